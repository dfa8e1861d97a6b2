"""Submission-time check: could this job ever run on these nodes?"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from corral.core.job import JobSpec
from corral.core.node import Node
from corral.core.resources import GpuKind
from corral.scheduling.config import SchedulerConfig
from corral.scheduling.framework import NodeRequest
from corral.scheduling.plugins.filters import NodeSelectorFilter, fits_capacity
from corral.scheduling.snapshot import NodeView


def never_fits(spec: JobSpec, nodes: Iterable[Node], config: SchedulerConfig) -> str | None:
    """Why ``spec`` can never be placed on ``nodes`` (all of them empty), or None.

    Node state is ignored (a draining or lost node may come back). With no nodes at all
    the answer is None: the job waits for agents to register.
    """
    config.queue(spec.queue)
    nodes = list(nodes)
    if not nodes:
        return None
    request = NodeRequest.of(spec, config.policy.placement)
    selector = NodeSelectorFilter()
    reasons: Counter[str] = Counter()
    able = 0
    for node in nodes:
        view = NodeView(node)
        status = selector.filter(request, view)
        reason = status.reason if status else fits_capacity(request, view)
        if reason:
            reasons[reason] += 1
        else:
            able += 1
    if able >= spec.nodes:
        return None
    what = f"{spec.nodes} node{'s' if spec.nodes > 1 else ''} with {request.describe()}"
    if request.gpus.kind is GpuKind.WHOLE:
        most = max(len(n.devices) for n in nodes)
        what += f" (the largest node has {most} GPUs)"
    why = "; ".join(f"{n} node{'s' if n > 1 else ''}: {r}" for r, n in reasons.most_common(3))
    return (
        f"can never fit this cluster: needs {what}, but only {able} of {len(nodes)} nodes "
        f"could ever host it" + (f" ({why})" if why else "")
    )
