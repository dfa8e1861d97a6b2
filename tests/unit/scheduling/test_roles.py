"""Jobs with roles (SPEC section 8): every role placed as one gang, all or nothing."""

from __future__ import annotations

from corral.core.allocation import Allocation
from corral.core.job import Topology, TopologyLevel, TopologyMode
from corral.scheduling.config import SchedulerConfig
from corral.scheduling.cycle import Decisions, schedule
from corral.scheduling.fairshare import Capacity, job_share
from corral.scheduling.feasibility import never_fits, node_shapes
from corral.scheduling.quota import QuotaBook
from tests.builders import allocation, cluster, gpu_nodes, job, legacy, node, role


def nodes16(count: int) -> list:
    """``count`` nodes with 8 GPUs and 16 CPUs."""
    return [node(f"n{i}").gpus(8).cpus(16).build() for i in range(count)]


PS_AND_WORKERS = (role("ps", 1, cpus=2.0), role("worker", 2, gpus=8, cpus=4.0))


def placed(decisions: Decisions, job_id: int) -> Allocation:
    return next(a for a in decisions.placements if a.job_id == job_id)


def test_parameter_server_and_workers_place_as_one_gang() -> None:
    state = cluster(*nodes16(2))
    het = job(1).roles(*PS_AND_WORKERS).build()
    decisions = schedule(state, [het], legacy(), now=0.0)
    alloc = placed(decisions, 1)
    ranks = [(t.rank, t.node_rank, t.local_rank, len(t.gpus), t.cpus) for t in alloc.tasks]
    # ranks role after role as listed: the parameter server first, then the workers
    assert ranks == [(0, 0, 0, 0, 2.0), (1, 1, 0, 8, 4.0), (2, 2, 0, 8, 4.0)]
    workers = {t.node for t in alloc.tasks[1:]}
    assert workers == {"n0", "n1"}  # the workers' own nodes are distinct
    assert alloc.tasks[0].node in workers  # the CPU-only role shares a machine
    assert alloc.gpus == 16


def test_a_role_that_does_not_fit_holds_back_the_whole_job() -> None:
    busy = allocation(9).whole_node("n1").build()
    state = cluster(*nodes16(2), allocations=[busy])
    het = job(1).roles(*PS_AND_WORKERS).build()
    decisions = schedule(state, [het], legacy(), now=0.0)
    assert not decisions.placements  # the parameter server alone would fit: all or nothing
    assert "role worker:" in decisions.pending[1].reason


def test_roles_are_placed_largest_first_so_small_ones_do_not_block_big_ones() -> None:
    # 2 nodes; the 8-GPU worker needs a whole node; a 1-GPU role listed first must not
    # take a GPU of the only node the worker could have
    state = cluster(*nodes16(1), node("small").gpus(1).cpus(16))
    het = job(1).roles(role("helper", 1, gpus=1), role("worker", 1, gpus=8)).build()
    alloc = placed(schedule(state, [het], legacy(), now=0.0), 1)
    assert [(t.rank, t.node) for t in alloc.tasks] == [(0, "small"), (1, "n0")]


def test_job_topology_keeps_every_role_in_one_leaf() -> None:
    nodes = [
        node("a0").gpus(8).cpus(16).network("z", "s", "leaf-a"),
        node("b0").gpus(8).cpus(16).network("z", "s", "leaf-b"),
        node("b1").gpus(8).cpus(16).network("z", "s", "leaf-b"),
    ]
    spec_topology = Topology(TopologyLevel.LEAF, TopologyMode.REQUIRED)
    het = job(1).roles(*PS_AND_WORKERS)._with(topology=spec_topology).build()
    alloc = placed(schedule(cluster(*nodes), [het], legacy(), now=0.0), 1)
    assert set(alloc.nodes) == {"b0", "b1"}
    assert "within leaf" in alloc.note


def test_job_topology_required_and_no_leaf_has_room_waits() -> None:
    nodes = [
        node("a0").gpus(8).cpus(16).network("z", "s", "leaf-a"),
        node("b0").gpus(8).cpus(16).network("z", "s", "leaf-b"),
    ]
    het = job(1).roles(*PS_AND_WORKERS).topology("leaf").build()
    decisions = schedule(cluster(*nodes), [het], legacy(), now=0.0)
    assert not decisions.placements
    assert "no leaf has room for all its roles" in decisions.pending[1].reason


def test_totals_count_every_role() -> None:
    spec = job(1).roles(*PS_AND_WORKERS).spec()
    assert (spec.world_size, spec.node_count, spec.total_gpus) == (3, 3, 16.0)
    assert (spec.nodes, spec.gpus.count) == (2, 8)  # the largest role sizes one node
    share = job_share(spec, Capacity(gpus=32.0, cpus=64.0, memory=0.0))
    assert share == 0.5  # 16 of 32 GPUs (CPUs: 10 of 64)
    book = QuotaBook(SchedulerConfig(), {})
    assert book.demand(spec)["gpus"] == 16.0


def test_a_role_that_can_never_fit_is_named() -> None:
    spec = job(1).roles(role("ps", 1, cpus=2.0), role("worker", 2, gpus=16)).spec()
    why = never_fits(spec, node_shapes(gpu_nodes(4, 8)), SchedulerConfig())
    assert why is not None and why.startswith("role worker: can never fit")


def test_preemption_frees_room_for_a_job_with_roles() -> None:
    low = [allocation(10 + i).whole_node(f"n{i}").priority(0).build() for i in range(2)]
    state = cluster(*nodes16(2), allocations=low)
    het = job(1).roles(*PS_AND_WORKERS).priority(100).build()
    decisions = schedule(state, [het], SchedulerConfig(), now=0.0)
    assert {victim for victim, _ in decisions.preemptions} == {10, 11}


def test_backfill_and_estimates_plan_every_role() -> None:
    """A job with roles that must wait gets an estimated start (the plan places all its
    roles) and a reservation: a job behind it backfills only if it ends before then."""
    now = 1000.0
    busy = allocation(9).whole_node("n1").ends(now + 100).build()
    state = cluster(*nodes16(3), allocations=[busy])
    workers = role("worker", 3, gpus=8, cpus=4.0)
    het = job(1).roles(role("ps", 1, cpus=2.0), workers).priority(10).runtime_estimate(60)
    config = legacy(backfill=True)
    for runtime, backfills in ((50, True), (500, False)):
        behind = job(2).gpus(8).runtime_estimate(runtime).submitted(5)
        decisions = schedule(state, [het.build(), behind.build()], config, now=now)
        assert [a.job_id for a in decisions.placements] == ([2] if backfills else [])
        waiting = decisions.pending[1]
        assert waiting.estimated_start == now + 100, waiting
        if not backfills:
            assert "reserved for job 1" in decisions.pending[2].reason
