"""A short-lived in-memory copy of the node inventory for submission-time checks.

Submissions check feasibility against every node; reading and converting thousands of node
rows per submission would dominate its cost. The copy is refreshed when this process
changes a node and at least every ``ttl`` seconds (another replica may have changed one).
"""

from __future__ import annotations

import threading

from sqlalchemy import select
from sqlalchemy.orm import Session

from corral.core.job import JobSpec
from corral.core.pools import Pool
from corral.scheduling.config import SchedulerConfig
from corral.scheduling.feasibility import NodeShapes, never_fits, node_shapes
from corral.server.db.models import NodeRow
from corral.server.services.converters import node_of


class NodeCatalog:
    def __init__(self, ttl: float = 2.0) -> None:
        self.ttl = ttl
        self._lock = threading.Lock()
        self._shapes: NodeShapes | None = None
        self._loaded_at = 0.0
        self.pools: tuple[Pool, ...] = ()  # their nodes count as the nodes they may add

    def shapes(self, session: Session, now: float) -> NodeShapes:
        """Every registered node, grouped by shape (see ``node_shapes``), and what the
        pools may add."""
        with self._lock:
            if self._shapes is None or now - self._loaded_at > self.ttl:
                self._shapes = node_shapes(node_of(r) for r in session.scalars(select(NodeRow)))
                self._shapes += pool_shapes(self.pools)
                self._loaded_at = now
            return self._shapes

    def never_fits(
        self, session: Session, spec: JobSpec, config: SchedulerConfig, now: float
    ) -> str | None:
        """Why ``spec`` can never fit the cluster, or None. A refusal is checked again
        against a fresh copy first: the cached one may predate a node another replica
        added."""
        reason = never_fits(spec, self.shapes(session, now), config)
        if reason:
            self.invalidate()
            reason = never_fits(spec, self.shapes(session, now), config)
        if reason and self.pools:
            reason += f" (counting the nodes pools {', '.join(p.name for p in self.pools)} may add)"
        return reason

    def invalidate(self) -> None:
        with self._lock:
            self._shapes = None


def pool_shapes(pools: tuple[Pool, ...]) -> NodeShapes:
    """The nodes pools may add, as shapes: a node pool's node ``max`` times; a TPU pool's
    slice once (a slice job fits within one slice)."""
    shapes: NodeShapes = []
    for pool in pools:
        nodes = pool.unit_nodes(pool.unit_name(0))
        if pool.tpu:
            shapes += [(node, 1) for node in nodes]
        else:
            shapes += [(nodes[0], pool.max)]
    return shapes
