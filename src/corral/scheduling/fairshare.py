"""Fair share: decayed usage per queue, weighted dominant shares, and the cycle's order.

Pure. The control plane and the simulator keep a :class:`UsageLedger` between cycles and
``advance`` it to each cycle's ``now`` with the allocations that held resources since the
last one; the cycle turns it into shares (:meth:`UsageLedger.shares`) and orders the
pending jobs with :func:`fair_order`:

1. priority first (higher first);
2. within a priority, the queue with the lowest weighted dominant share goes next, and
   each job handed out adds its own dominant share to its queue's, so queues interleave
   in proportion to their weights within one cycle (weights 1:3 -> about 1 job in 4 and
   3 in 4 for jobs of equal size);
3. within a queue, submission time, then id.

Usage decays exponentially with a half-life (``policy.fair_share_half_life``): what a
queue used one half-life ago weighs half as much as what it uses now. The dominant share
of a queue is the largest, over GPUs, CPUs and memory, of its decayed resource-seconds
over the cluster's capacity times the mean life ``half_life / ln 2`` (the decayed length
of an endless history), so a queue that has held the whole cluster forever has share 1.
Divided by the queue's weight, that is its weighted dominant share.
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property

from corral.core.allocation import Allocation
from corral.core.job import Job, JobSpec
from corral.core.node import Node
from corral.scheduling.quota import gpus_per_node

MIN_JOB_SHARE = 1e-12  # a job that asks for nothing still moves its queue's turn on


def decay(usage: float, elapsed: float, half_life: float) -> float:
    """``usage`` after ``elapsed`` seconds of decay: halved every ``half_life`` seconds
    (``half_life`` infinite: no decay; zero: forgotten at once)."""
    if elapsed <= 0 or math.isinf(half_life):
        return usage
    if half_life <= 0:
        return 0.0
    return usage * 0.5 ** (elapsed / half_life)


def accrued(rate: float, elapsed: float, half_life: float) -> float:
    """Decayed usage, at the end of ``elapsed`` seconds, of holding ``rate`` resources
    throughout: the exact integral ``rate * (1 - 2^(-elapsed/h)) * h / ln 2``."""
    if elapsed <= 0 or rate == 0:
        return 0.0
    if math.isinf(half_life):
        return rate * elapsed
    if half_life <= 0:
        return 0.0
    mean_life = half_life / math.log(2)
    return rate * mean_life * -math.expm1(-elapsed / mean_life)


@dataclass(frozen=True)
class Usage:
    """Decayed resource-seconds: GPU-seconds, CPU-seconds and memory byte-seconds."""

    gpu: float = 0.0
    cpu: float = 0.0
    memory: float = 0.0

    def decayed(self, elapsed: float, half_life: float) -> Usage:
        return Usage(
            decay(self.gpu, elapsed, half_life),
            decay(self.cpu, elapsed, half_life),
            decay(self.memory, elapsed, half_life),
        )

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.gpu + other.gpu, self.cpu + other.cpu, self.memory + other.memory)


@dataclass(frozen=True)
class Capacity:
    """The cluster's resources: GPUs (every device, MIG ones counted once), CPUs, bytes."""

    gpus: float
    cpus: float
    memory: float

    @classmethod
    def of(cls, nodes: Iterable[Node]) -> Capacity:
        gpus = cpus = memory = 0.0
        for n in nodes:
            gpus += len(n.devices)
            cpus += n.cpus
            memory += n.memory
        return cls(gpus, cpus, memory)


def dominant_share(usage: Usage, capacity: Capacity, window: float = 1.0) -> float:
    """The largest of ``usage``'s resources over ``capacity * window`` (resources with no
    capacity are left out). With a ledger's usage, ``window`` is its mean life."""
    share = 0.0
    for used, cap in (
        (usage.gpu, capacity.gpus),
        (usage.cpu, capacity.cpus),
        (usage.memory, capacity.memory),
    ):
        if cap > 0 and window > 0:
            share = max(share, used / (cap * window))
    return share


def weighted_share(usage: Usage, capacity: Capacity, weight: float, window: float = 1.0) -> float:
    """``dominant_share / weight``: what fair share equalizes across queues."""
    return dominant_share(usage, capacity, window) / weight


def job_share(spec: JobSpec, capacity: Capacity) -> float:
    """The dominant share of the cluster a job of ``spec`` holds while it runs."""
    parts = spec.parts  # every role of a job with roles
    held = Usage(
        gpu=sum(gpus_per_node(p) * p.nodes for p in parts),
        cpu=sum((p.cpus or 0.0) * p.nodes for p in parts),
        memory=sum(float(p.memory or 0) * p.nodes for p in parts),
    )
    return dominant_share(held, capacity)


def held(alloc: Allocation) -> Usage:
    """What an allocation holds: GPUs (``Allocation.gpus``), CPUs and memory bytes."""
    return Usage(
        gpu=alloc.gpus,
        cpu=sum(t.cpus for t in alloc.tasks),
        memory=float(sum(t.memory for t in alloc.tasks)),
    )


@dataclass(frozen=True)
class UsageLedger:
    """Decayed usage per queue as of time ``at``. Frozen: ``advance`` returns a new one."""

    at: float
    half_life: float
    usage: tuple[tuple[str, Usage], ...] = field(default=())  # by queue, sorted by name

    @classmethod
    def start(cls, at: float, half_life: float) -> UsageLedger:
        """An empty ledger (no queue has used anything) at time ``at``."""
        return cls(at, half_life)

    @cached_property
    def _by_queue(self) -> dict[str, Usage]:
        return dict(self.usage)

    def of(self, queue: str) -> Usage:
        return self._by_queue.get(queue, Usage())

    @property
    def window(self) -> float:
        """The decayed length of an endless history: the mean life ``half_life / ln 2``
        (1 without decay, where shares are then raw resource-seconds over capacity)."""
        if math.isinf(self.half_life) or self.half_life <= 0:
            return 1.0
        return self.half_life / math.log(2)

    def advance(self, now: float, allocations: Iterable[Allocation]) -> UsageLedger:
        """The ledger at ``now``: everything decayed by ``now - at``, plus what each of
        ``allocations`` held over the interval (from the later of ``at`` and its
        ``started_at``), integrated exactly under the decay. Pass the allocations that
        held resources during the interval; a ``now`` before ``at`` changes nothing."""
        elapsed = now - self.at
        if elapsed <= 0:
            return self
        totals: dict[str, Usage] = {q: u.decayed(elapsed, self.half_life) for q, u in self.usage}
        added: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
        for alloc in allocations:
            since = self.at if alloc.started_at is None else max(self.at, alloc.started_at)
            span = now - since
            if span <= 0:
                continue
            rate = held(alloc)
            slot = added[alloc.queue]
            slot[0] += accrued(rate.gpu, span, self.half_life)
            slot[1] += accrued(rate.cpu, span, self.half_life)
            slot[2] += accrued(rate.memory, span, self.half_life)
        for queue, (gpu, cpu, memory) in added.items():
            totals[queue] = totals.get(queue, Usage()) + Usage(gpu, cpu, memory)
        return replace(self, at=now, usage=tuple(sorted(totals.items())))

    def advance_rates(self, now: float, rates: Mapping[str, Usage]) -> UsageLedger:
        """``advance`` for a caller that knows what each queue held at a constant rate
        over the whole interval since ``at`` (the simulator: starts and ends happen only
        at the times it advances the ledger): O(queues), not O(allocations)."""
        elapsed = now - self.at
        if elapsed <= 0:
            return self
        totals: dict[str, Usage] = {q: u.decayed(elapsed, self.half_life) for q, u in self.usage}
        for queue, rate in rates.items():
            if rate.gpu or rate.cpu or rate.memory:
                added = Usage(
                    accrued(rate.gpu, elapsed, self.half_life),
                    accrued(rate.cpu, elapsed, self.half_life),
                    accrued(rate.memory, elapsed, self.half_life),
                )
                totals[queue] = totals.get(queue, Usage()) + added
        return replace(self, at=now, usage=tuple(sorted(totals.items())))

    def shares(self, capacity: Capacity) -> dict[str, float]:
        """Each queue's dominant share (unweighted) of the decayed usage."""
        return {q: dominant_share(u, capacity, self.window) for q, u in self.usage}


def queue_shares(
    ledger: UsageLedger | None, allocations: Iterable[Allocation], capacity: Capacity
) -> dict[str, float]:
    """Each queue's dominant share, unweighted: of what it holds now (``allocations``)
    plus of its decayed past usage (``ledger``; its average share over the decay window).
    Both are fractions of the cluster, so a queue that held little lately but holds much
    now does not jump ahead, nor the reverse."""
    shares = ledger.shares(capacity) if ledger is not None else {}
    now_held: dict[str, Usage] = {}
    for alloc in allocations:
        now_held[alloc.queue] = now_held.get(alloc.queue, Usage()) + held(alloc)
    for queue, usage in now_held.items():
        shares[queue] = shares.get(queue, 0.0) + dominant_share(usage, capacity)
    return shares


def fair_order(
    jobs: Iterable[Job],
    shares: Mapping[str, float],
    weights: Mapping[str, float],
    capacity: Capacity,
    within: Callable[[Job], tuple] | None = None,
) -> list[Job]:
    """``jobs`` in fair-share order (a new list; see the module docstring).

    ``shares``: each queue's dominant share (``UsageLedger.shares``; absent: 0);
    ``weights``: each queue's weight (absent: 1); ``within``: the order inside a queue
    (default: submission order; the ``jct`` order passes its own). Each job handed out adds its
    ``job_share`` to its queue's share, and the share carries over to lower priorities.
    O(J log J) for the sort within queues plus O(J log Q) for the heap of queue heads.
    """
    levels: dict[int, dict[str, list[Job]]] = defaultdict(lambda: defaultdict(list))
    for job in jobs:
        levels[job.priority][job.queue].append(job)
    share = dict(shares)
    out: list[Job] = []
    for priority in sorted(levels, reverse=True):
        queues = levels[priority]
        heads: list[tuple[float, float, int, str]] = []
        position: dict[str, int] = {}
        for queue, members in queues.items():
            members.sort(key=within or _submission)
            position[queue] = 0
            head = members[0]
            weight = weights.get(queue, 1.0)
            heads.append((share.get(queue, 0.0) / weight, head.submitted_at, head.id, queue))
        heapq.heapify(heads)
        while heads:
            _, _, _, queue = heapq.heappop(heads)
            members = queues[queue]
            job = members[position[queue]]
            out.append(job)
            share[queue] = share.get(queue, 0.0) + max(job_share(job.spec, capacity), MIN_JOB_SHARE)
            position[queue] += 1
            if position[queue] < len(members):
                head = members[position[queue]]
                weight = weights.get(queue, 1.0)
                heapq.heappush(heads, (share[queue] / weight, head.submitted_at, head.id, queue))
    return out


def _submission(job: Job) -> tuple:
    return (job.submitted_at, job.id)
