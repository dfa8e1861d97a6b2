"""Filter and score results per request shape and node, memoized for one cycle.

A placement changes only the nodes it uses (their ``NodeView.version`` moves), so the next
job with the same request re-runs the plugins on those nodes only. Filter and score
plugins must therefore answer from the request and the node view alone (they are pure).
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

from corral.scheduling.framework import (
    NodeRequest,
    Profile,
    ScoredNode,
    Status,
    Unschedulable,
)
from corral.scheduling.snapshot import NodeView

MAX_SHAPES = 64  # request shapes remembered per cycle (bounds memory: shapes x nodes)


@dataclass
class Evaluation:
    """Nodes that pass every filter (scored), and why the others were rejected."""

    candidates: list[ScoredNode] = field(default_factory=list)
    rejections: Counter[str] = field(default_factory=Counter)
    resolvable: int = 0  # nodes that pass, or would once resources free up


class NodeEvaluator:
    def __init__(self, profile: Profile) -> None:
        self.profile = profile
        self._memo: OrderedDict[NodeRequest, dict[str, tuple[int, Status, float]]] = OrderedDict()

    def evaluate(self, request: NodeRequest, views: Sequence[NodeView]) -> Evaluation:
        memo = self._memo.get(request)
        if memo is None:
            memo = self._memo[request] = {}
            if len(self._memo) > MAX_SHAPES:
                self._memo.popitem(last=False)
        else:
            self._memo.move_to_end(request)
        result = Evaluation()
        for view in views:
            entry = memo.get(view.node.name)
            if entry is None or entry[0] != view.version:
                entry = memo[view.node.name] = (view.version, *self._run(request, view))
            _, status, score = entry
            if status is None:
                result.resolvable += 1
                result.candidates.append(ScoredNode(view, score))
            else:
                result.rejections[status.reason] += 1
                result.resolvable += isinstance(status, Unschedulable)
        return result

    def _run(self, request: NodeRequest, view: NodeView) -> tuple[Status, float]:
        for plugin in self.profile.filters:
            status = plugin.filter(request, view)
            if status is not None:
                return status, 0.0
        return None, sum(p.weight * p.score(request, view) for p in self.profile.scores)
