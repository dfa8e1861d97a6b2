"""The simulator on small workloads whose schedule is known exactly."""

from __future__ import annotations

import pytest

from corral.errors import ValidationError
from corral.schemas.cluster import load_cluster
from corral.schemas.config import load_config
from corral.sim.engine import simulate
from corral.sim.jobs_file import load_jobs
from corral.sim.result import Outcome

TWO_NODES = "nodes:\n  - name: 'n{0..1}'\n    gpus: {count: 8, model: H100}\n"


def run(jobs_yaml: str, cluster: str = TWO_NODES, config: str | None = None):
    nodes = load_cluster(cluster).to_nodes()
    return simulate(nodes, load_jobs(jobs_yaml), load_config(config))


def times(result) -> dict[str, tuple]:
    return {j.name: (j.state.value, j.start_time, j.end_time) for j in result.jobs}


def test_fifo_order_and_a_gang_waiting_for_whole_nodes() -> None:
    result = run(
        "- {name: a, submit_time: 0, duration: 100, resources: {gpus: 8}}\n"
        "- {name: b, submit_time: 0, duration: 50, resources: {gpus: 8}}\n"
        "- {name: gang, submit_time: 10, duration: 30, nodes: 2, resources: {gpus: 8}}\n"
        "- {name: small, submit_time: 20, duration: 10, resources: {gpus: 1}}\n"
    )
    assert times(result) == {
        "a": ("completed", 0.0, 100.0),
        "b": ("completed", 0.0, 50.0),
        # the gang needs both nodes whole: it starts when a ends
        "gang": ("completed", 100.0, 130.0),
        # strict priority order: the small job waits behind the gang (no backfill)
        "small": ("completed", 130.0, 140.0),
    }
    placement = next(j for j in result.jobs if j.name == "gang").placement
    assert [p.node for p in placement] == ["n0", "n1"] and all(len(p.gpus) == 8 for p in placement)


def test_priority_goes_first_and_binpacking_keeps_a_node_whole() -> None:
    result = run(
        "- {name: hold, submit_time: 0, duration: 10, resources: {gpus: 4}}\n"
        "- {name: low, submit_time: 1, duration: 10, priority: low, resources: {gpus: 8}}\n"
        "- {name: high, submit_time: 1, duration: 10, priority: high, resources: {gpus: 4}}\n"
    )
    got = times(result)
    # high (4 GPUs) packs beside hold on the same node, low takes the other node whole
    assert got["high"] == ("completed", 1.0, 11.0)
    assert got["low"] == ("completed", 1.0, 11.0)
    nodes = {j.name: j.placement[0].node for j in result.jobs}
    assert nodes["high"] == nodes["hold"] != nodes["low"]


def test_jobs_that_never_fit_are_refused_as_the_server_does() -> None:
    result = run(
        "- {name: huge, submit_time: 0, duration: 10, resources: {gpus: 9}}\n"
        "- {name: nowhere, submit_time: 0, duration: 10, priority: urgent}\n"
    )
    states = {j.name: (j.state, j.reason) for j in result.jobs}
    assert states["huge"][0] is Outcome.REFUSED and "can never fit" in states["huge"][1]
    assert states["nowhere"][0] is Outcome.REFUSED
    assert "unknown priority class" in states["nowhere"][1]


def test_time_limits_end_jobs() -> None:
    result = run(
        "- {name: slow, submit_time: 0, duration: 1h, time_limit: 30m, resources: {gpus: 1}}\n"
    )
    assert times(result)["slow"] == ("failed", 0.0, 1800.0)
    assert "time limit" in result.jobs[0].reason


CHECKPOINTED = (
    "jobs:\n"
    "  - {name: ckpt, submit_time: 0, duration: 100, checkpoint_interval: 30,"
    " resources: {gpus: 8}}\n"
    "  - {name: plain, submit_time: 0, duration: 100, resources: {gpus: 8}}\n"
    "node_events:\n"
    "  - {time: 70, node: n0, kind: fail}\n"
    "  - {time: 70, node: n1, kind: fail}\n"
    "  - {time: 80, node: n0, kind: recover}\n"
    "  - {time: 80, node: n1, kind: recover}\n"
)


def test_node_failure_loses_work_since_the_last_checkpoint() -> None:
    result = run(CHECKPOINTED)
    jobs = {j.name: j for j in result.jobs}
    # ckpt kept 60 s of work (checkpoints at 30 and 60): restarting at 80, it restores its
    # checkpoint (30 s on 8 GPUs, counted as lost GPU time), then runs the 40 s left
    assert (jobs["ckpt"].start_time, jobs["ckpt"].end_time) == (0.0, 150.0)
    assert jobs["ckpt"].lost_gpu_seconds == pytest.approx(10 * 8 + 30 * 8)
    # plain restarts from zero
    assert jobs["plain"].end_time == 180.0
    assert jobs["plain"].lost_gpu_seconds == pytest.approx(70 * 8)
    assert jobs["ckpt"].preemptions == jobs["plain"].preemptions == 1


def test_a_job_that_does_not_requeue_fails_with_its_node() -> None:
    result = run(
        "jobs:\n  - {name: fragile, submit_time: 0, duration: 100, requeue: false,"
        " resources: {gpus: 8}}\n"
        "node_events:\n  - {time: 5, node: n0, kind: fail}\n"
    )
    assert result.jobs[0].state is Outcome.FAILED and "n0 failed" in result.jobs[0].reason


def test_work_that_can_never_start_is_left_unfinished() -> None:
    result = run(
        "jobs:\n  - {name: gang, submit_time: 10, duration: 5, nodes: 2, resources: {gpus: 8}}\n"
        "node_events:\n  - {time: 0, node: n1, kind: fail}\n"
    )
    assert result.jobs[0].state is Outcome.UNFINISHED


def test_same_inputs_give_the_same_result() -> None:
    workload = "".join(
        f"- {{name: j{i}, submit_time: {i % 7}, duration: {10 + i % 5},"
        f" resources: {{gpus: {1 + i % 8}}}}}\n"
        for i in range(60)
    )
    assert run(workload) == run(workload)


def test_samples_trace_allocation_over_time() -> None:
    result = run(
        "- {name: a, submit_time: 0, duration: 10, resources: {gpus: 8}}\n"
        "- {name: b, submit_time: 5, duration: 10, resources: {gpus: 4}}\n"
    )
    assert [(s.time, s.allocated_gpus, s.running_jobs) for s in result.samples] == [
        (0.0, 8.0, 1),
        (5.0, 12.0, 2),
        (10.0, 4.0, 1),
        (15.0, 0.0, 0),
    ]
    assert result.capacity_gpus == 16


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("- {name: a, duration: 5}\n", "submit_time: field required"),
        ("- {name: a, submit_time: 0, duration: soon}\n", "duration"),
        ("- {name: a, submit_time: 0, duration: 5, gpuz: 1}\n", "gpuz: unknown field"),
        (
            "- {name: a, submit_time: 0, duration: 5}\n- {name: a, submit_time: 1, duration: 5}\n",
            "unique",
        ),
        ("{jobs: [], extra: 1}\n", "unknown keys"),
        ("jobs: []\nnode_events: [{time: 1, node: n0, kind: explode}]\n", "node_events.0"),
    ],
)
def test_bad_jobs_files_are_refused_with_the_entry_and_field(text: str, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        load_jobs(text)


def test_queues_of_the_workload_exist_unless_the_configuration_declares_queues() -> None:
    jobs = "- {name: a, submit_time: 0, duration: 5, queue: vc-1, resources: {gpus: 1}}\n"
    assert run(jobs).jobs[0].state is Outcome.COMPLETED
    declared = run(jobs, config="queues: [{name: team-a}]\n").jobs[0]
    assert declared.state is Outcome.REFUSED and "unknown queue 'vc-1'" in declared.reason


BACKFILL_WORKLOAD = (
    "- {name: a, submit_time: 0, duration: 100, runtime_estimate: 100, resources: {gpus: 8}}\n"
    "- {name: gang, submit_time: 10, duration: 30, runtime_estimate: 30, nodes: 2,"
    " resources: {gpus: 8}}\n"
    "- {name: short, submit_time: 20, duration: 50, runtime_estimate: 50, resources: {gpus: 4}}\n"
    "- {name: long, submit_time: 20, duration: 500, runtime_estimate: 500,"
    " resources: {gpus: 4}}\n"
)


def test_easy_backfill_starts_what_fits_before_the_reservation() -> None:
    strict = "policy: {order: fair-share, backfill: false, preemption: false}\n"
    fifo = times(run(BACKFILL_WORKLOAD, config=strict))
    easy = times(run(BACKFILL_WORKLOAD, config=strict.replace("false,", "true,", 1)))
    # strict order: everything waits behind the gang, which waits for a
    assert fifo["short"] == ("completed", 130.0, 180.0)
    # backfill: short fits on the idle node and ends (70) before the gang's reservation
    # (100); long would not, so it waits; the gang starts exactly when it would have
    assert easy["short"] == ("completed", 20.0, 70.0)
    assert easy["gang"] == fifo["gang"] == ("completed", 100.0, 130.0)
    assert easy["long"][1] == 130.0


LEAVES = (
    "nodes:\n"
    "  - {name: 'a{0..2}', gpus: {count: 8}, network: [z, s, leaf-a]}\n"
    "  - {name: 'b{0..1}', gpus: {count: 8}, network: [z, s, leaf-b]}\n"
)


def test_topology_keeps_a_simulated_gang_in_one_leaf() -> None:
    result = run(
        "- {name: pair, submit_time: 0, duration: 10, nodes: 2, resources: {gpus: 8},"
        " topology: {level: leaf, mode: required}}\n"
        "- {name: trio, submit_time: 0, duration: 10, nodes: 3, resources: {gpus: 8},"
        " topology: {level: leaf, mode: required}}\n",
        cluster=LEAVES,
    )
    nodes = {j.name: {p.node for p in j.placement} for j in result.jobs}
    assert nodes["pair"] == {"b0", "b1"}  # the smallest leaf that fits
    assert nodes["trio"] == {"a0", "a1", "a2"}
    assert {j.start_time for j in result.jobs} == {0.0}
