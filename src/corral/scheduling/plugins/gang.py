"""Built-in gang node-set selection: the best-scored nodes, all or nothing."""

from __future__ import annotations

from collections.abc import Sequence

from corral.core.job import Job
from corral.scheduling.evaluation import as_candidates
from corral.scheduling.framework import NodeRequest, ScoredNode, Unschedulable
from corral.scheduling.snapshot import NodeView


class TopScoredNodes:
    """The ``nodes`` highest-scored candidates (ties by name), or Unschedulable."""

    name = "top-scored"

    def select(
        self, job: Job, request: NodeRequest, candidates: Sequence[ScoredNode]
    ) -> list[NodeView] | Unschedulable:
        want = job.spec.nodes
        if len(candidates) < want:
            free = len(candidates)
            return Unschedulable(f"{free} node{'' if free == 1 else 's'} can host it now")
        return as_candidates(candidates).best(want)
