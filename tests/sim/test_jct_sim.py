"""The default scheduler in the simulator: learned run times order the queue, and a far
longer checkpointing job is preempted for a short one, paying its restore time."""

from __future__ import annotations

from corral.schemas.cluster import load_cluster
from corral.schemas.config import load_config
from corral.sim.engine import simulate
from corral.sim.jobs_file import load_jobs
from corral.sim.result import SimResult
from corral.sim.workload import Workload

ONE_GPU = "nodes:\n  - {name: n0, gpus: {count: 1}}\n"
EIGHT_GPUS = "nodes:\n  - {name: n0, gpus: {count: 8}}\n"


def run(workload: Workload, cluster: str, config: str | None = None) -> SimResult:
    return simulate(load_cluster(cluster).to_nodes(), workload, load_config(config))


def spans(result: SimResult) -> dict[str, tuple[float | None, float | None]]:
    return {j.name: (j.start_time, j.end_time) for j in result.jobs}


LEARNED = load_jobs(
    "- {name: j1, command: python long.py, submit_time: 0, duration: 1000, resources: {gpus: 1}}\n"
    "- {name: j2, command: python short.py, submit_time: 0, duration: 10, resources: {gpus: 1}}\n"
    "- {name: j3, command: python other.py, submit_time: 2000, duration: 500,"
    " resources: {gpus: 1}}\n"
    "- {name: j4, command: python long.py, submit_time: 2100, duration: 1000,"
    " resources: {gpus: 1}}\n"
    "- {name: j5, command: python short.py, submit_time: 2200, duration: 10,"
    " resources: {gpus: 1}}\n"
)


def test_run_times_learned_from_completions_put_the_short_job_first() -> None:
    got = spans(run(LEARNED, ONE_GPU))
    # nothing is known at first: submission order
    assert got["j1"] == (0.0, 1000.0) and got["j2"] == (1000.0, 1010.0)
    # then long.py is known to take 1000 s and short.py 10 s: j5 goes before j4
    assert got["j5"] == (2500.0, 2510.0) and got["j4"] == (2510.0, 3510.0)


def test_fifo_keeps_submission_order() -> None:
    fifo = "policy: {order: priority-fifo, backfill: false, preemption: false}"
    got = spans(run(LEARNED, ONE_GPU, fifo))
    assert got["j4"] == (2500.0, 3500.0) and got["j5"] == (3500.0, 3510.0)


PREEMPT = load_jobs(
    "- {name: long, submit_time: 0, duration: 100000, resources: {gpus: 8}}\n"
    "- {name: short, submit_time: 1000, duration: 600, runtime_estimate: 600,"
    " resources: {gpus: 8}}\n"
)


def test_a_short_job_preempts_a_far_longer_one_that_saves_and_it_resumes() -> None:
    result = run(PREEMPT.saving_on_preemption(), EIGHT_GPUS)
    jobs = {j.name: j for j in result.jobs}
    # long has run 1000 s (> min_run) and has no end in sight; it gets its 30 s of grace
    assert spans(result)["short"] == (1030.0, 1630.0)
    # it saved when signalled: it resumes at 1630 with 100000 - 1030 s left, after 30 s of
    # restoring its checkpoint (8 GPUs), counted as lost GPU time
    assert spans(result)["long"] == (0.0, 1630.0 + 30.0 + 98970.0)
    assert (jobs["long"].preemptions, jobs["long"].lost_gpu_seconds) == (1, 30.0 * 8)


def test_a_job_that_never_checkpoints_is_not_preempted_for_completion_time() -> None:
    result = run(PREEMPT, EIGHT_GPUS)  # a jobs file: no checkpoint_interval, no saving
    assert spans(result)["short"] == (100000.0, 100600.0)
    assert all(j.preemptions == 0 for j in result.jobs)


def test_saving_on_preemption_leaves_periodic_checkpoints_alone() -> None:
    workload = load_jobs(
        "- {name: a, submit_time: 0, duration: 10, checkpoint_interval: 5}\n"
        "- {name: b, submit_time: 0, duration: 10}\n"
    ).saving_on_preemption()
    assert [j.saves_on_preemption for j in workload.jobs] == [False, True]
