"""Fragmentation, as the simulator samples it: free GPUs no pending request could use."""

from __future__ import annotations

from collections.abc import Iterable

from corral.core.job import JobSpec
from corral.scheduling.config import SchedulerConfig
from corral.scheduling.framework import NodeRequest
from corral.scheduling.plugins.filters import fits_free
from corral.scheduling.snapshot import Snapshot

FRAGMENTATION_SHAPES = 16  # the most common pending request shapes it considers


def fragmented_gpus(
    snapshot: Snapshot, pending: Iterable[JobSpec], config: SchedulerConfig
) -> float:
    """Free GPUs (on ready nodes) that none of the most common requests of the ``pending``
    jobs could use; 0 with none pending."""
    counts: dict[NodeRequest, int] = {}
    for spec in pending:
        request = NodeRequest.of(spec, config.queue_placement(spec.queue))
        counts[request] = counts.get(request, 0) + 1
    if not counts:
        return 0.0
    shapes = sorted(counts, key=counts.__getitem__, reverse=True)[:FRAGMENTATION_SHAPES]
    stranded = 0.0
    for view in snapshot.views():
        free = len(view.node.devices) - view.used_gpus
        if free <= 0 or not view.node.state.schedulable or view.node.tpu_chips:
            continue
        if not any(fits_free(request, view) is None for request in shapes):
            stranded += free
    return stranded
