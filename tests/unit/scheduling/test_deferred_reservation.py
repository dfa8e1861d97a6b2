"""Deferred reservations: a cycle asked for decisions only (``estimate=False``, as the
simulator asks) searches for EASY backfill's reservation only once a decision needs it,
and decides exactly as a cycle that searches at once."""

from __future__ import annotations

import pytest

from corral.core.job import Job
from corral.scheduling.cycle import ClusterState, Decisions, schedule
from corral.scheduling.plugins import backfill
from tests.builders import job, legacy, node
from tests.unit.scheduling.test_memo import POLICIES, Cluster


def _both(cluster: Cluster) -> tuple[Decisions, Decisions]:
    """The cycle searching at once (fresh state) and deferring (kept snapshot and memo);
    the kept snapshot follows the deferring cycle's placements."""
    running, preempting = tuple(cluster.running.values()), frozenset(cluster.preempting)
    queue = list(cluster.pending.values())
    eager = schedule(
        ClusterState(cluster.nodes, running, preempting=preempting),
        queue,
        cluster.config,
        cluster.now,
        cluster.profile,
    )
    lazy = schedule(
        ClusterState(cluster.nodes, running, cluster.snapshot, preempting, memo=cluster.memo),
        queue,
        cluster.config,
        cluster.now,
        cluster.profile,
        estimate=False,
    )
    for alloc in lazy.placements:
        cluster.running[alloc.job_id] = alloc
        del cluster.pending[alloc.job_id]
    cluster.preempting.update(job_id for job_id, _ in lazy.preemptions)
    return eager, lazy


@pytest.mark.parametrize("policy", [p for p in POLICIES if p != "strict"])
@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_deferring_decides_like_searching_at_once(policy: str, seed: int) -> None:
    cluster = Cluster(POLICIES[policy], seed)
    cluster.arrive(24)
    for step in range(30):
        eager, lazy = _both(cluster)
        assert lazy.placements == eager.placements, f"cycle {step}"
        assert lazy.preemptions == eager.preemptions, f"cycle {step}"
        assert lazy.pending.keys() == eager.pending.keys()
        cluster.now += cluster.rng.choice([1.0, 30.0, 120.0, 600.0])
        exited = [j for j in cluster.preempting if j in cluster.running]
        ended = [j for j, a in cluster.running.items() if a.expected_end <= cluster.now]
        cluster.end(sorted(set(exited + ended)))
        cluster.arrive(cluster.rng.randint(0, 4))


def _searches(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    found: list[int] = []
    search = backfill._search

    def counted(job: Job, request, ctx):  # noqa: ANN001, ANN202
        found.append(job.id)
        return search(job, request, ctx)

    monkeypatch.setattr(backfill, "_search", counted)
    return found


def _cluster() -> tuple:
    nodes = tuple(node(f"n{i}").gpus(8).build() for i in range(2))
    busy = job(1).gpus(8).runtime_estimate(600).build()
    placed = schedule(ClusterState(nodes), [busy], legacy(backfill=True), 0.0).placements
    return nodes, placed


def test_nothing_behind_that_fits_means_no_search(monkeypatch: pytest.MonkeyPatch) -> None:
    nodes, running = _cluster()  # n0 busy until 600, n1 free
    searches = _searches(monkeypatch)
    gang = job(2).gpus(8).nodes(2).runtime_estimate(600).build()  # waits for job 1
    wide = job(3).gpus(8).nodes(2).runtime_estimate(60).build()  # cannot start either
    config = legacy(backfill=True)
    lazy = schedule(ClusterState(nodes, running), [gang, wide], config, 10.0, estimate=False)
    assert searches == [] and lazy.placements == ()
    assert lazy.pending[2].reason.startswith("first to wait: backfill reserves for it")
    assert lazy.pending[2].estimated_start is None
    eager = schedule(ClusterState(nodes, running), [gang, wide], config, 10.0)
    assert searches == [2] and eager.pending[2].reason.startswith("next to start: n0, n1")


def test_a_job_behind_that_fits_has_the_reservation_searched_and_respected(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    nodes, running = _cluster()
    searches = _searches(monkeypatch)
    gang = job(2).gpus(8).nodes(2).runtime_estimate(600).build()
    long = job(3).gpus(8).runtime_estimate(3600).build()  # would outlive the reservation
    short = job(4).gpus(8).runtime_estimate(60).build()  # ends before it: may backfill
    config = legacy(backfill=True)
    queue = [gang, long, short]
    lazy = schedule(ClusterState(nodes, running), queue, config, 10.0, estimate=False)
    eager = schedule(ClusterState(nodes, running), queue, config, 10.0)
    assert searches == [2, 2]  # once each: the deferring cycle needed it for job 3
    assert [a.job_id for a in lazy.placements] == [4] == [a.job_id for a in eager.placements]
    assert lazy.pending[2] == eager.pending[2]  # resolved: the same reason and start
    assert lazy.pending[2].estimated_start == 600.0


def test_when_the_first_finds_no_reservation_the_next_deferred_one_gets_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    nodes, running = _cluster()
    reserve = backfill.reserve
    monkeypatch.setattr(  # job 2's search finds nothing (as when it can never start)
        backfill, "reserve", lambda j, r, c: None if j.id == 2 else reserve(j, r, c)
    )
    first = job(2).gpus(8).nodes(2).runtime_estimate(600).build()
    second = job(3).gpus(4).nodes(2).runtime_estimate(600).build()  # another shape
    same = job(5).gpus(8).nodes(2).runtime_estimate(900).build()  # job 2's shape
    long = job(4).gpus(8).runtime_estimate(3600).build()  # fits n1 now: resolves them
    config = legacy(backfill=True)
    queue = [first, second, same, long]
    lazy = schedule(ClusterState(nodes, running), queue, config, 10.0, estimate=False)
    eager = schedule(ClusterState(nodes, running), queue, config, 10.0)
    assert lazy.placements == eager.placements == ()  # job 4 kept off job 3's reservation
    reasons = {j: p.reason for j, p in lazy.pending.items()}
    assert reasons == {j: p.reason for j, p in eager.pending.items()}  # (no forward plan)
    assert lazy.pending[3].estimated_start == 600.0
    assert lazy.pending[3].reason.startswith("next to start: n0, n1 reserved")
