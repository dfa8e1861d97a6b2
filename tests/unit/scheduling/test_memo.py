"""The caller's memo (``scheduling.memo``): a kept snapshot and memo decide like fresh ones."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from corral.core.allocation import Allocation
from corral.core.job import Job, PlacementPolicy
from corral.scheduling.config import Policy, SchedulerConfig
from corral.scheduling.cycle import ClusterState, Decisions, schedule
from corral.scheduling.memo import RequestMemo, SchedulingMemo
from corral.scheduling.plugins import backfill
from corral.scheduling.registry import build_profile, default_registry
from corral.scheduling.snapshot import Snapshot
from tests.builders import job, node

POLICIES = {
    "strict": Policy(backfill=False, preemption=False, order="priority-fifo"),
    "backfill": Policy(backfill=True, preemption=False, order="priority-fifo"),
    "backfill-preemption": Policy(backfill=True, preemption=True, order="priority-fifo"),
    "fair-share-backfill-preemption": Policy(backfill=True, preemption=True, order="fair-share"),
}
if "jct" in default_registry(load_entry_points=False).names():
    POLICIES["jct-backfill-preemption"] = Policy(backfill=True, preemption=True, order="jct")
SHAPES = [(1, 1), (1, 2), (1, 4), (1, 8), (2, 8), (1, 3)]  # (nodes, GPUs per node)


def arrival(rng: random.Random, job_id: int, now: float) -> Job:
    nodes, gpus = rng.choice(SHAPES)
    builder = job(job_id).gpus(gpus).nodes(nodes).submitted(now).queue(rng.choice("ab"))
    if rng.random() < 0.8:  # the rest have no estimate: they run "forever"
        builder = builder.runtime_estimate(rng.choice([60.0, 300.0, 900.0, 3600.0]))
    if rng.random() < 0.3:
        builder = builder.priority(100)
    return builder.preemptible().build()


class Cluster:
    """Running work and a queue, advanced cycle by cycle as a caller would: placements
    start, jobs end at their expected end, preempted jobs exit the cycle after."""

    def __init__(self, policy: Policy, seed: int) -> None:
        self.nodes = tuple(
            node(f"n{i}")
            .gpus(8, nvlink=[[0, 1, 2, 3], [4, 5, 6, 7]])
            .network("z", f"s{i % 2}")
            .build()
            for i in range(6)
        )
        queues = (replace(SchedulerConfig().queues[0], name="a"),)
        queues += (replace(queues[0], name="b"),)
        self.config = SchedulerConfig(queues=queues, policy=policy)
        self.profile = build_profile(self.config)
        self.rng = random.Random(seed)
        self.snapshot, self.memo = Snapshot(self.nodes), SchedulingMemo()
        self.running: dict[int, Allocation] = {}
        self.pending: dict[int, Job] = {}
        self.preempting: set[int] = set()
        self.next_id, self.now = 1, 1000.0

    def arrive(self, count: int) -> None:
        for _ in range(count):
            self.pending[self.next_id] = arrival(self.rng, self.next_id, self.now)
            self.next_id += 1

    def end(self, job_ids: list[int]) -> None:
        for job_id in job_ids:
            self.snapshot.release(self.running.pop(job_id))
            self.preempting.discard(job_id)

    def cycle(self) -> tuple[Decisions, Decisions]:
        running, preempting = tuple(self.running.values()), frozenset(self.preempting)
        fresh = schedule(
            ClusterState(self.nodes, running, preempting=preempting),
            list(self.pending.values()),
            self.config,
            self.now,
            self.profile,
        )
        kept = schedule(
            ClusterState(self.nodes, running, self.snapshot, preempting, memo=self.memo),
            list(self.pending.values()),
            self.config,
            self.now,
            self.profile,
        )
        for alloc in kept.placements:  # the kept snapshot has them assumed
            self.running[alloc.job_id] = alloc
            del self.pending[alloc.job_id]
        self.preempting.update(job_id for job_id, _ in kept.preemptions)
        return fresh, kept


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_kept_snapshot_and_memo_decide_like_fresh_ones(policy: str, seed: int) -> None:
    cluster = Cluster(POLICIES[policy], seed)
    cluster.arrive(24)
    for step in range(30):
        fresh, kept = cluster.cycle()
        assert kept == fresh, f"cycle {step}"
        if step % 3 == 2:  # now and then only a job arrives: nothing else changes
            cluster.now += 1.0
            cluster.arrive(1)
            continue
        cluster.now += cluster.rng.choice([30.0, 120.0, 600.0])
        exited = [j for j in cluster.preempting if j in cluster.running]
        ended = [j for j, a in cluster.running.items() if a.expected_end <= cluster.now]
        cluster.end(sorted(set(exited + ended)))
        cluster.arrive(cluster.rng.randint(0, 4))


def test_a_reservation_is_searched_again_only_when_something_changed(monkeypatch) -> None:
    cluster = Cluster(POLICIES["backfill"], 7)
    searches: list[int] = []  # with the kept memo
    search = backfill._search

    def counted(job: Job, request, ctx):  # noqa: ANN001, ANN202
        if ctx.memo is cluster.memo:
            searches.append(job.id)
        return search(job, request, ctx)

    monkeypatch.setattr(backfill, "_search", counted)
    cluster.pending = {
        1: job(1).gpus(8).runtime_estimate(600).build(),
        2: job(2).gpus(8).nodes(6).runtime_estimate(600).build(),  # waits for job 1: reserves
    }
    cluster.next_id = 3
    for _ in range(4):  # then only jobs arrive, that cannot start: nothing changes
        fresh, kept = cluster.cycle()
        assert kept == fresh
        assert kept.pending[2].reason.startswith("next to start")
        cluster.now += 10.0
        cluster.pending[cluster.next_id] = job(cluster.next_id).gpus(8).nodes(3).build()
        cluster.next_id += 1
    assert searches == [2]
    cluster.end([1])  # the reservation's job can start now: the next blocked job searches
    fresh, kept = cluster.cycle()
    assert kept == fresh and [a.job_id for a in kept.placements] == [2]
    assert searches == [2, 3]


def test_requests_are_interned_by_value_and_follow_a_changed_spec() -> None:
    memo = RequestMemo()
    binpack = PlacementPolicy.BINPACK
    one, same = job(1).gpus(4).build(), job(2).gpus(4).build()
    first = memo.of(one, binpack)
    assert memo.of(one, binpack) is first
    assert memo.of(same, binpack).request is first.request  # equal requests: one object
    assert memo.of(same, binpack).shape == first.shape
    gang = memo.of(job(3).gpus(4).nodes(2).build(), binpack)
    assert gang.request is first.request and gang.shape != first.shape  # another gang size
    changed = memo.of(
        replace(one, spec=replace(one.spec, gpus=job(9).gpus(8).spec().gpus)), binpack
    )
    assert changed.request != first.request
    assert memo.of(one, PlacementPolicy.SPREAD).request.placement is PlacementPolicy.SPREAD


def test_a_memo_used_with_another_snapshot_starts_over() -> None:
    cluster = Cluster(POLICIES["backfill"], 5)
    cluster.arrive(12)
    cluster.cycle()
    other = Snapshot.build(cluster.nodes, tuple(cluster.running.values()))
    state = ClusterState(cluster.nodes, tuple(cluster.running.values()), other, memo=cluster.memo)
    fresh = ClusterState(cluster.nodes, tuple(cluster.running.values()))
    queue = list(cluster.pending.values())
    config, profile = cluster.config, cluster.profile
    assert schedule(state, queue, config, 2000.0, profile) == schedule(
        fresh, queue, config, 2000.0, profile
    )
