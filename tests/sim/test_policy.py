"""Queues, fair share, preemption and backfill, through the simulator (issue 5's tests)."""

from __future__ import annotations

from corral.schemas.cluster import load_cluster
from corral.schemas.config import load_config
from corral.sim.engine import simulate
from corral.sim.jobs_file import load_jobs
from corral.sim.result import JobRecord, Outcome


def cluster(nodes: int, gpus: int = 8) -> str:
    return f"nodes:\n  - name: 'n{{0..{nodes - 1}}}'\n    gpus: {{count: {gpus}, model: H100}}\n"


def run(jobs: list[str], nodes: int, config: str, gpus: int = 8) -> dict[str, JobRecord]:
    result = simulate(
        load_cluster(cluster(nodes, gpus)).to_nodes(),
        load_jobs("\n".join(f"- {j}" for j in jobs)),
        load_config(config),
    )
    return {j.name: j for j in result.jobs}


def test_a_gang_behind_a_stream_of_small_jobs_starts_no_later_than_promised() -> None:
    fill = [
        f"{{name: fill{i}, submit_time: 0, duration: {100 * (i + 1)}, runtime_estimate: "
        f"{100 * (i + 1)}, resources: {{gpus: 1}}}}"
        for i in range(16)
    ]
    gang = (
        "{name: gang, submit_time: 10, duration: 500, runtime_estimate: 500, nodes: 2, "
        "resources: {gpus: 8}}"
    )
    stream = [
        f"{{name: s{i}, submit_time: {20 + i}, duration: {50 + (i * 37) % 250}, "
        f"runtime_estimate: {50 + (i * 37) % 250}, resources: {{gpus: 1}}}}"
        for i in range(500)
    ]
    easy = "policy: {order: fair-share, backfill: true, preemption: false}"
    jobs = run([*fill, gang, *stream], 2, easy)
    big = jobs["gang"]
    assert big.promised_start is not None
    assert big.state is Outcome.COMPLETED
    assert big.start_time is not None and big.start_time <= big.promised_start
    assert big.start_time == 1600.0  # when the longest of the first jobs lets go
    # the stream did backfill around it: some small jobs started before the gang
    assert any(j.start_time < big.start_time for n, j in jobs.items() if n.startswith("s"))


def test_two_queues_weighted_1_to_3_share_gpu_hours_1_to_3() -> None:
    config = "queues:\n  - {name: a, weight: 1}\n  - {name: b, weight: 3}\n"
    jobs = [
        f"{{name: {q}{i}, queue: {q}, submit_time: 0, duration: 100, resources: {{gpus: 1}}}}"
        for q in ("a", "b")
        for i in range(600)
    ]
    records = run(jobs, 1, config)
    horizon = 5000.0  # both queues still have work waiting until well after this

    def gpu_seconds(queue: str) -> float:
        return sum(
            min(j.end_time, horizon) - j.start_time
            for j in records.values()
            if j.queue == queue and j.start_time is not None and j.start_time < horizon
        )

    ratio = gpu_seconds("b") / gpu_seconds("a")
    assert 3 * 0.9 <= ratio <= 3 * 1.1, ratio


def test_reclaim_returns_a_queues_nominal_quota_within_one_grace_period() -> None:
    config = (
        "queues:\n"
        "  - {name: a, quota: {gpus: 8}, cohort: lab}\n"
        "  - {name: b, quota: {gpus: 8}, cohort: lab}\n"
        "policy: {preemption: true}\n"
    )
    borrower = [
        f"{{name: b{i}, queue: b, submit_time: 0, duration: 10000, grace_period: 30, "
        f"resources: {{gpus: 1}}}}"
        for i in range(16)
    ]
    owner = [
        f"{{name: a{i}, queue: a, submit_time: 100, duration: 50, resources: {{gpus: 1}}}}"
        for i in range(8)
    ]
    jobs = run([*borrower, *owner], 2, config)
    assert all(jobs[f"b{i}"].start_time == 0.0 for i in range(16))  # b borrowed a's quota
    starts = [jobs[f"a{i}"].start_time for i in range(8)]
    assert all(s is not None and 100.0 <= s <= 130.0 for s in starts), starts
    assert sum(j.preemptions for n, j in jobs.items() if n.startswith("b")) == 8


def test_a_preemption_frees_one_whole_node_not_gpus_scattered_over_several() -> None:
    # spread: every node holds a low-priority 4-GPU job and a normal-priority 4-GPU job;
    # the 8-GPU job needs one whole node: freeing the lowest-priority jobs (4 GPUs on
    # each of two nodes) would not do, so it takes both jobs of one node
    low = [
        f"{{name: low{i}, submit_time: 0, duration: 10000, priority: low, requeue: false, "
        f"resources: {{gpus: 4}}}}"
        for i in range(4)
    ]
    normal = [
        f"{{name: mid{i}, submit_time: 1, duration: 10000, priority: normal, requeue: false, "
        f"resources: {{gpus: 4}}}}"
        for i in range(4)
    ]
    high = "{name: high, submit_time: 10, duration: 100, priority: high, resources: {gpus: 8}}"
    jobs = run([*low, *normal, high], 4, "policy: {preemption: true, placement: spread}")
    victims = sorted(n for n, j in jobs.items() if j.preemptions)
    assert len(victims) == 2 and victims[0].startswith("low") and victims[1].startswith("mid")
    freed = {jobs[v].placement[0].node for v in victims}
    assert len(freed) == 1  # both on one node
    assert jobs["high"].start_time == 10 + 30  # after one grace period (the default 30 s)
    assert {p.node for p in jobs["high"].placement} == freed


def test_victims_lose_the_fewest_gpu_hours_given_their_checkpoints() -> None:
    jobs = run(
        [
            "{name: saves-often, submit_time: 0, duration: 100000, checkpoint_interval: 100, "
            "priority: low, resources: {gpus: 8}}",
            "{name: never-saved, submit_time: 0, duration: 100000, priority: low, "
            "resources: {gpus: 8}}",
            "{name: high, submit_time: 950, duration: 100, priority: high, resources: {gpus: 8}}",
        ],
        2,
        "policy: {preemption: true}",
    )
    assert jobs["saves-often"].preemptions == 1
    assert jobs["never-saved"].preemptions == 0
    # it ran 980 s (950 + the 30 s grace period) and had saved at 900: 80 s x 8 GPUs lost,
    # and 30 s x 8 GPUs restoring its checkpoint when it starts again (the restore time)
    assert jobs["saves-often"].lost_gpu_seconds == 80 * 8 + 30 * 8
    assert jobs["high"].start_time == 980.0
