"""Per-node change versions that agents long-poll, so that work reaches them at once.

Agents sync every few seconds; without a nudge a job placed, cancelled or preempted would
wait for the node's next sync. Services bump the versions of the nodes whose desired tasks
may have changed (after their transaction commits); ``GET /agent/watch`` returns as soon
as a node's version differs from the one its agent last saw, and the agent syncs. The
versions live in this process only; with several replicas, the leader records the nodes its
writes changed in the lease row and the other replicas bump them here
(``server.leader.nudges``).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import defaultdict
from collections.abc import Iterable


class NodeWatch:
    def __init__(self) -> None:
        self._versions: defaultdict[str, int] = defaultdict(int)
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._changed: asyncio.Condition | None = None
        self._closed = False

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Attach to the server's event loop (at startup)."""
        self._loop = loop
        self._changed = asyncio.Condition()

    @property
    def closed(self) -> bool:
        """True once the server began shutting down."""
        return self._closed

    def version(self, node: str) -> int:
        with self._lock:
            return self._versions[node]

    def bump(self, nodes: Iterable[str]) -> None:
        """Mark ``nodes`` changed; callable from any thread."""
        nodes = list(nodes)
        if not nodes:
            return
        with self._lock:
            for node in nodes:
                self._versions[node] += 1
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(lambda: self._loop.create_task(self._notify()))

    def bump_all(self) -> None:
        """Mark every node this replica has seen an agent watch or sync changed."""
        with self._lock:
            nodes = list(self._versions)
        self.bump(nodes)

    def close(self) -> None:
        """Answer every pending and future wait at once (the server is shutting down)."""
        self._closed = True
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(lambda: self._loop.create_task(self._notify()))

    async def _notify(self) -> None:
        assert self._changed is not None
        async with self._changed:
            self._changed.notify_all()

    async def wait(self, node: str, since: int, timeout: float) -> int:
        """The node's version once it differs from ``since``, or after ``timeout`` seconds."""
        if self._changed is None or self._closed:
            return self.version(node)
        async with self._changed:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self._changed.wait_for(lambda: self._closed or self.version(node) != since),
                    timeout,
                )
        return self.version(node)
