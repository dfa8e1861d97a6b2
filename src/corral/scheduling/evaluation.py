"""Filter and score results per request shape, kept as an index across jobs and cycles.

For each request shape (a :class:`NodeRequest`) the evaluator keeps every node's filter
verdict and score, the passing nodes ranked best first, and the rejection reasons counted.
A placement changes only the nodes it uses, and the snapshot logs them
(``Snapshot.changes_since``), so the next job with the same shape re-runs the plugins on
those nodes only and finds its best nodes in ``O(k log n)``: placing a job never scans
every node. Nodes alike in everything but their name (``NodeView.likeness``) share one
verdict, so a cluster of identical nodes costs one plugin run per shape and free state.
Filter and score plugins must therefore answer from the request and the node view alone,
and not from the node's name (they are pure).

Node-set selection receives the ranked passing nodes as :class:`Candidates`: a best-first
``Sequence[ScoredNode]`` that also answers "the best ``k``" and "how many candidates per
domain" (for network topology) without walking every node.
"""

from __future__ import annotations

import itertools
from collections import Counter, OrderedDict
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from sortedcontainers import SortedList

from corral.core.node import Node
from corral.scheduling.framework import (
    NodeRequest,
    Profile,
    ScoredNode,
    Status,
    Unschedulable,
)
from corral.scheduling.snapshot import NodeView, Snapshot

MAX_SHAPES = 256  # request shapes indexed at once (memory: shapes x nodes)
MAX_VERDICTS = 65536  # verdicts remembered per shape by node likeness

GroupKey = Callable[[Node], Hashable | None]  # a node's domain (None: in no domain)
Ranked = tuple[float, str]  # (-score, node name): ascending order is best first


class _ShapeIndex:
    """Every node's verdict for one request shape, and the passing nodes ranked."""

    def __init__(self, request: NodeRequest, profile: Profile) -> None:
        self.request = request
        self.profile = profile
        self.entries: dict[str, tuple[Status, float]] = {}
        self.ranked: SortedList = SortedList()
        self.rejections: Counter[str] = Counter()
        self.resolvable = 0
        self.synced = -1  # snapshot change-log position; -1: never built
        self.groups: dict[GroupKey, dict[Hashable, SortedList]] = {}
        self.verdicts: dict[tuple, tuple[Status, float]] = {}  # by NodeView.likeness()
        # (rejections, resolvable) per set of excluded nodes, until the next change
        self.summaries: dict[frozenset, tuple[Counter[str], int]] = {}

    def sync(self, snapshot: Snapshot) -> None:
        changed = snapshot.changes_since(self.synced) if self.synced >= 0 else None
        if changed is None:
            self._rebuild(snapshot)
        else:
            nodes = snapshot.nodes
            for name in set(changed):
                self._update(nodes[name])
        self.synced = snapshot.change_position

    def _rebuild(self, snapshot: Snapshot) -> None:
        self.entries.clear()
        self.rejections.clear()
        self.summaries.clear()
        self.resolvable = 0
        ranked: list[Ranked] = []
        for view in snapshot.views():
            status, score = self.entries[view.name] = self._verdict(view)
            if status is None:
                self.resolvable += 1
                ranked.append((-score, view.name))
            else:
                self.rejections[status.reason] += 1
                self.resolvable += isinstance(status, Unschedulable)
        self.ranked = SortedList(ranked)
        for key in list(self.groups):
            self.groups[key] = self._grouped(key, snapshot.nodes)

    def _update(self, view: NodeView) -> None:
        name = view.name
        old = self.entries.get(name)
        new = self.entries[name] = self._verdict(view)
        if old == new:
            return
        if old is not None:
            self._count(name, old, view.node, -1)
        self._count(name, new, view.node, +1)

    def _count(self, name: str, entry: tuple[Status, float], node: Node, sign: int) -> None:
        status, score = entry
        if self.summaries:
            self.summaries.clear()
        if status is not None:
            reason = status.reason
            self.rejections[reason] += sign
            if not self.rejections[reason]:
                del self.rejections[reason]
            self.resolvable += sign * isinstance(status, Unschedulable)
            return
        self.resolvable += sign
        item = (-score, name)
        if sign > 0:
            self.ranked.add(item)
        else:
            self.ranked.remove(item)
        for key, groups in self.groups.items():
            domain = key(node)
            if domain is None:
                continue
            if sign > 0:
                groups.setdefault(domain, SortedList()).add(item)
            else:
                members = groups[domain]
                members.remove(item)
                if not members:
                    del groups[domain]

    def grouped(self, key: GroupKey, nodes: Mapping[str, NodeView]) -> dict[Hashable, SortedList]:
        """Passing nodes ranked per domain of ``key``; maintained once first asked for."""
        groups = self.groups.get(key)
        if groups is None:
            groups = self.groups[key] = self._grouped(key, nodes)
        return groups

    def _grouped(self, key: GroupKey, nodes: Mapping[str, NodeView]) -> dict[Hashable, SortedList]:
        members: dict[Hashable, list[Ranked]] = {}
        for item in self.ranked:
            domain = key(nodes[item[1]].node)
            if domain is not None:
                members.setdefault(domain, []).append(item)
        return {domain: SortedList(items) for domain, items in members.items()}

    def _verdict(self, view: NodeView) -> tuple[Status, float]:
        """The plugins' answer for ``view``, shared by nodes alike in all but name."""
        key = view.likeness()
        verdict = self.verdicts.get(key)
        if verdict is None:
            if len(self.verdicts) >= MAX_VERDICTS:
                self.verdicts.clear()
            verdict = self.verdicts[key] = self._run(view)
        return verdict

    def _run(self, view: NodeView) -> tuple[Status, float]:
        for plugin in self.profile.filters:
            status = plugin.filter(self.request, view)
            if status is not None:
                return status, 0.0
        return None, sum(p.weight * p.score(self.request, view) for p in self.profile.scores)


class Candidates(Sequence[ScoredNode]):
    """The nodes that can host one node's share of a job now, best first (score, then
    name), minus ``excluded`` ones (held for a reservation). Iterating is lazy, so taking
    the first few is cheap; ``len`` is O(excluded)."""

    def __init__(
        self,
        index: _ShapeIndex,
        nodes: Mapping[str, NodeView],
        excluded: Mapping[str, int] | None = None,
    ) -> None:
        self._index = index
        self._nodes = nodes
        self._excluded = {
            name: holder
            for name, holder in (excluded or {}).items()
            if (entry := index.entries.get(name)) is not None and entry[0] is None
        }
        self._all_excluded = excluded or {}

    @classmethod
    def of(cls, scored: Sequence[ScoredNode]) -> Candidates:
        """Candidates from a plain list (for tests and callers without an index)."""
        index = _ShapeIndex.__new__(_ShapeIndex)
        index.entries = {c.node.name: (None, c.score) for c in scored}
        index.ranked = SortedList((-c.score, c.node.name) for c in scored)
        index.rejections, index.resolvable, index.groups = Counter(), len(scored), {}
        return cls(index, {c.node.name: c.node for c in scored})

    def __len__(self) -> int:
        return len(self._index.ranked) - len(self._excluded)

    def __iter__(self) -> Iterator[ScoredNode]:
        return self._iterate(self._index.ranked)

    def __getitem__(self, i):  # type: ignore[no-untyped-def,override]
        if isinstance(i, slice):
            return list(itertools.islice(self, i.start, i.stop, i.step))
        if i < 0:
            i += len(self)
        found = next(itertools.islice(self, i, None), None)
        if found is None:
            raise IndexError(i)
        return found

    def best(self, k: int) -> list[NodeView]:
        """The ``k`` best candidates (fewer if there are not so many)."""
        return [c.node for c in itertools.islice(self, k)]

    def domain_sizes(self, key: GroupKey) -> dict[Hashable, int]:
        """Candidates per domain of ``key`` (nodes outside every domain are left out)."""
        groups = self._index.grouped(key, self._nodes)
        sizes = {domain: len(members) for domain, members in groups.items()}
        for name in self._excluded:
            domain = key(self._nodes[name].node)
            if domain is not None:
                sizes[domain] -= 1
        return {domain: n for domain, n in sizes.items() if n}

    def best_in(self, key: GroupKey, domain: Hashable, k: int) -> list[NodeView]:
        """The ``k`` best candidates whose domain of ``key`` is ``domain``."""
        members = self._index.grouped(key, self._nodes).get(domain, ())
        return [c.node for c in itertools.islice(self._iterate(members), k)]

    @property
    def rejections(self) -> Counter[str]:
        """Why the other nodes cannot host it, counted (reserved nodes as such). Read
        only: it is shared by every job that sees the same nodes reserved."""
        return self._summary()[0]

    @property
    def resolvable(self) -> int:
        """Nodes that pass, or would once resources free up (reserved ones included)."""
        return self._summary()[1]

    def _summary(self) -> tuple[Counter[str], int]:
        index = self._index
        key = frozenset(self._all_excluded.items())
        found = index.summaries.get(key)
        if found is not None:
            return found
        counts = Counter(index.rejections)
        resolvable = index.resolvable + len(self._all_excluded)
        for name, holder in self._all_excluded.items():
            entry = index.entries.get(name)
            if entry is not None:
                if entry[0] is not None:
                    counts[entry[0].reason] -= 1
                if entry[0] is None or isinstance(entry[0], Unschedulable):
                    resolvable -= 1
            counts[f"reserved for job {holder}"] += 1
        found = index.summaries[key] = (+counts, resolvable)
        return found

    def _iterate(self, ranked: Sequence[Ranked]) -> Iterator[ScoredNode]:
        excluded, nodes = self._excluded, self._nodes
        for neg_score, name in ranked:
            if name not in excluded:
                yield ScoredNode(nodes[name], -neg_score)


def as_candidates(candidates: Sequence[ScoredNode]) -> Candidates:
    """``candidates`` as :class:`Candidates` (a plain sequence is ranked once)."""
    return candidates if isinstance(candidates, Candidates) else Candidates.of(candidates)


@dataclass
class NodeEvaluator:
    """Per-shape indexes for one profile over one snapshot (LRU-bounded). Kept between
    jobs and cycles by the caller (``SchedulingMemo.evaluator``); used with one snapshot
    only, as it follows that snapshot's change log."""

    profile: Profile

    def __post_init__(self) -> None:
        self._shapes: OrderedDict[NodeRequest, _ShapeIndex] = OrderedDict()

    def evaluate(
        self,
        request: NodeRequest,
        snapshot: Snapshot,
        excluded: Mapping[str, int] | None = None,
    ) -> Candidates:
        """The current candidates for ``request``; ``excluded`` maps nodes it may not use
        to the job they are held for."""
        index = self._shapes.get(request)
        if index is None:
            index = self._shapes[request] = _ShapeIndex(request, self.profile)
            if len(self._shapes) > MAX_SHAPES:
                self._shapes.popitem(last=False)
        else:
            self._shapes.move_to_end(request)
        index.sync(snapshot)
        return Candidates(index, snapshot.nodes, excluded)
