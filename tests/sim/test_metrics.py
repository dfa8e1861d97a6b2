"""Metrics on hand-made results whose values are computed by hand."""

from __future__ import annotations

import json

import pytest

from corral.sim.metrics import (
    Metrics,
    compute_metrics,
    jain_index,
    jobs_json,
    percentile,
    time_average,
)
from corral.sim.result import JobRecord, Outcome, Sample, SimResult, TaskPlace


def record(
    name: str,
    submit: float,
    start: float | None,
    end: float | None,
    gpus: float,
    run_time: float,
    *,
    queue: str = "default",
    state: Outcome = Outcome.COMPLETED,
    **extra,
) -> JobRecord:
    return JobRecord(name, queue, submit, start, end, state, gpus, run_time, **extra)


def three_jobs() -> SimResult:
    """4 GPUs. a (2 GPUs) runs 0-10, c (2 GPUs) 5-10, then b (4 GPUs) 10-30.

    Allocated: 2 on [0, 5), 4 on [5, 30): 110 of 120 GPU-seconds. Fragmented: the 2 free
    GPUs on [0, 5) that b (which needs 4) cannot use: 10 GPU-seconds.
    """
    jobs = (
        record("a", 0, 0, 10, 2, 10, queue="x"),
        record("b", 0, 10, 30, 4, 20, queue="y"),
        record("c", 5, 5, 10, 2, 5, queue="x"),
    )
    samples = (
        Sample(0, allocated_gpus=2, pending_jobs=1, running_jobs=1, fragmented_gpus=2),
        Sample(5, allocated_gpus=4, pending_jobs=1, running_jobs=2),
        Sample(10, allocated_gpus=4, pending_jobs=0, running_jobs=1),
        Sample(30, allocated_gpus=0, pending_jobs=0, running_jobs=0),
    )
    return SimResult(jobs, samples, capacity_gpus=4, config_name="fifo", seed=1)


def test_three_jobs_by_hand() -> None:
    m = compute_metrics(three_jobs())
    assert (m.jobs, m.completed, m.failed, m.refused, m.unfinished) == (3, 3, 0, 0, 0)
    # JCTs 10, 30, 5 -> sorted 5, 10, 30; p95 at rank 1.9: 10 + 0.9 * 20
    assert m.avg_jct == pytest.approx(15)
    assert m.p50_jct == pytest.approx(10)
    assert m.p95_jct == pytest.approx(28)
    assert m.p99_jct == pytest.approx(29.6)
    # waits 0, 10, 0
    assert m.avg_wait == pytest.approx(10 / 3)
    assert m.p50_wait == pytest.approx(0)
    assert m.p95_wait == pytest.approx(9)
    assert m.p99_wait == pytest.approx(9.8)
    # slowdowns 10/10, 30/20, 5/5
    assert m.avg_slowdown == pytest.approx(3.5 / 3)
    assert m.makespan == pytest.approx(30)
    assert m.gpu_utilization == pytest.approx(110 / 120)
    assert m.avg_fragmentation == pytest.approx(10 / 120)
    # x: 2*10 + 2*5 = 30 GPU-s, y: 4*20 = 80 GPU-s
    assert dict(m.queue_gpu_hours) == pytest.approx({"x": 30 / 3600, "y": 80 / 3600})
    assert m.gpu_hours == pytest.approx(110 / 3600)
    assert m.fairness == pytest.approx(110**2 / (2 * (30**2 + 80**2)))
    assert (m.preemptions, m.lost_gpu_hours) == (0, 0)
    # pooled SRPT on 4 GPUs: a 0-5, c 5-7.5, b 7.5-27.5
    assert m.srpt_lower_bound == pytest.approx(35 / 3)
    assert m.jct_ratio == pytest.approx(15 / (35 / 3))
    # all work from 0: 110 / 4 = 27.5 > any submit + run time (20)
    assert m.makespan_lower_bound == pytest.approx(27.5)
    assert m.makespan_ratio == pytest.approx(30 / 27.5)


def test_bounds_are_never_above_the_measured_values() -> None:
    m = compute_metrics(three_jobs())
    assert m.srpt_lower_bound <= m.avg_jct
    assert m.makespan_lower_bound <= m.makespan
    assert m.jct_ratio >= 1 and m.makespan_ratio >= 1


def test_utilization_from_a_two_sample_step_function() -> None:
    # 8 GPUs; 4 allocated on [0, 10), 8 on [10, 20): (40 + 80) / 160
    jobs = (record("a", 0, 0, 20, 8, 20),)
    samples = (Sample(0, 4, 0, 1), Sample(10, 8, 0, 1))
    m = compute_metrics(SimResult(jobs, samples, capacity_gpus=8))
    assert m.gpu_utilization == pytest.approx(0.75)


def test_utilization_window_is_first_submission_to_last_completion() -> None:
    # Window [5, 25]: samples before 5 and after 25 are clipped; nothing before the first.
    jobs = (
        record("a", 5, 10, 25, 2, 15),
        record("r", 0, None, None, 64, 10, state=Outcome.REFUSED),  # outside the window
    )
    samples = (
        Sample(0, 2, 0, 1),  # holds on [0, 10): counts on [5, 10)
        Sample(10, 4, 0, 1),  # [10, 25)
        Sample(25, 0, 0, 0),
        Sample(30, 4, 0, 1),  # after the last completion
    )
    m = compute_metrics(SimResult(jobs, samples, capacity_gpus=4))
    assert m.makespan == pytest.approx(20)
    assert m.gpu_utilization == pytest.approx((2 * 5 + 4 * 15) / (4 * 20))


def test_time_average_treats_before_the_first_sample_as_zero() -> None:
    samples = [Sample(5, 10, 0, 1)]
    assert time_average(samples, "allocated_gpus", 0, 10) == pytest.approx(5)
    assert time_average(samples, "allocated_gpus", 3, 3) is None


PERCENTILE_CASES = {
    # name: (values, q, expected) -- numpy.percentile's default "linear" method
    "single value": ([7.0], 95, 7.0),
    "two values, median": ([1.0, 3.0], 50, 2.0),
    "four values, median": ([4.0, 1.0, 3.0, 2.0], 50, 2.5),
    "p95 of 1..10": ([float(v) for v in range(1, 11)], 95, 9.55),
    "p99 of 1..100": ([float(v) for v in range(1, 101)], 99, 99.01),
    "min": ([3.0, 1.0, 2.0], 0, 1.0),
    "max": ([3.0, 1.0, 2.0], 100, 3.0),
}


@pytest.mark.parametrize("case", list(PERCENTILE_CASES), ids=list(PERCENTILE_CASES))
def test_percentile(case: str) -> None:
    values, q, expected = PERCENTILE_CASES[case]
    assert percentile(values, q) == pytest.approx(expected)


def test_percentile_of_nothing_is_none_and_q_is_checked() -> None:
    assert percentile([], 50) is None
    with pytest.raises(ValueError):
        percentile([1.0], 101)


def test_jain_index() -> None:
    assert jain_index([5.0, 5.0, 5.0, 5.0]) == pytest.approx(1.0)
    assert jain_index([9.0, 0.0, 0.0]) == pytest.approx(1 / 3)
    assert jain_index([1.0, 3.0]) == pytest.approx(16 / 20)
    assert jain_index([]) is None
    assert jain_index([0.0, 0.0]) is None


def test_fairness_over_queues() -> None:
    equal = (
        record("a", 0, 0, 10, 1, 10, queue="p"),
        record("b", 0, 0, 5, 2, 5, queue="q"),
    )
    assert compute_metrics(SimResult(equal, (), capacity_gpus=4)).fairness == pytest.approx(1.0)
    # Queue q's only job never ran: q got nothing, p everything -> 1/2.
    one_takes_all = (
        record("a", 0, 0, 10, 1, 10, queue="p"),
        record("b", 0, None, None, 2, 5, queue="q", state=Outcome.UNFINISHED),
    )
    m = compute_metrics(SimResult(one_takes_all, (), capacity_gpus=4))
    assert dict(m.queue_gpu_hours) == pytest.approx({"p": 10 / 3600, "q": 0.0})
    assert m.fairness == pytest.approx(1 / 2)


def test_refused_queues_do_not_count_towards_fairness() -> None:
    jobs = (
        record("a", 0, 0, 10, 1, 10, queue="p"),
        record("r", 0, None, None, 99, 5, queue="big", state=Outcome.REFUSED),
    )
    m = compute_metrics(SimResult(jobs, (), capacity_gpus=4))
    assert dict(m.queue_gpu_hours) == pytest.approx({"p": 10 / 3600})
    assert m.fairness == pytest.approx(1.0)


def test_preemptions_and_lost_work_count_in_queue_gpu_hours() -> None:
    jobs = (
        # preempted twice, 1800 GPU-s thrown away, then ran 2 GPUs x 3600 s to completion
        record("a", 0, 0, 9000, 2, 3600, queue="p", preemptions=2, lost_gpu_seconds=1800),
        # failed after losing 3600 GPU-s
        record("f", 0, 0, 1800, 2, 7200, queue="q", state=Outcome.FAILED, lost_gpu_seconds=3600),
    )
    m = compute_metrics(SimResult(jobs, (), capacity_gpus=4))
    assert m.preemptions == 2
    assert m.lost_gpu_hours == pytest.approx(1.5)
    assert dict(m.queue_gpu_hours) == pytest.approx({"p": 2.5, "q": 1.0})
    assert m.gpu_hours == pytest.approx(3.5)
    assert (m.completed, m.failed) == (1, 1)


def test_counts_and_which_jobs_each_metric_covers() -> None:
    jobs = (
        record("done", 0, 2, 12, 1, 10),
        record("failed", 0, 4, 8, 1, 100, state=Outcome.FAILED),
        record("running", 0, 6, None, 1, 50, state=Outcome.UNFINISHED),
        record("pending", 0, None, None, 1, 50, state=Outcome.UNFINISHED),
        record("refused", 0, None, None, 99, 5, state=Outcome.REFUSED),
        record("instant", 1, 1, 1, 1, 0),  # zero run time: no slowdown
    )
    m = compute_metrics(SimResult(jobs, (), capacity_gpus=4))
    assert (m.jobs, m.completed, m.failed, m.refused, m.unfinished) == (6, 2, 1, 1, 2)
    assert m.avg_jct == pytest.approx((12 + 0) / 2)  # completed jobs only
    assert m.avg_wait == pytest.approx((2 + 4 + 6 + 0) / 4)  # every job that started
    assert m.avg_slowdown == pytest.approx(12 / 10)  # completed, run time > 0
    assert m.makespan == pytest.approx(12)  # last completion (not the failed end)
    # bounds cover the completed jobs only, so they stay below the measured values
    assert m.srpt_lower_bound <= m.avg_jct
    assert m.makespan_lower_bound <= m.makespan


def test_no_completed_jobs() -> None:
    jobs = (
        record("pending", 0, None, None, 8, 50, state=Outcome.UNFINISHED),
        record("refused", 0, None, None, 99, 5, state=Outcome.REFUSED),
    )
    samples = (Sample(0, 0, 1, 0),)
    m = compute_metrics(SimResult(jobs, samples, capacity_gpus=4))
    assert (m.jobs, m.completed, m.refused, m.unfinished) == (2, 0, 1, 1)
    for name in (
        "avg_jct",
        "p50_jct",
        "p95_jct",
        "p99_jct",
        "avg_wait",
        "p50_wait",
        "avg_slowdown",
        "makespan",
        "gpu_utilization",
        "avg_fragmentation",
        "fairness",
        "srpt_lower_bound",
        "jct_ratio",
        "makespan_lower_bound",
        "makespan_ratio",
    ):
        assert getattr(m, name) is None, name
    assert (m.preemptions, m.lost_gpu_hours, m.gpu_hours) == (0, 0, 0)
    json.dumps(m.to_json(), allow_nan=False)


def test_empty_result_and_zero_capacity() -> None:
    empty = compute_metrics(SimResult((), (), capacity_gpus=0))
    assert empty.jobs == 0 and empty.avg_jct is None and empty.gpu_utilization is None
    cpu_only = compute_metrics(SimResult((record("a", 0, 0, 5, 0, 5),), (), capacity_gpus=0))
    assert cpu_only.avg_jct == 5 and cpu_only.srpt_lower_bound is None


def test_a_window_of_zero_length() -> None:
    jobs = (record("a", 3, 3, 3, 1, 0),)
    m = compute_metrics(SimResult(jobs, (Sample(3, 0, 0, 0),), capacity_gpus=4))
    assert m.makespan == 0 and m.gpu_utilization is None
    assert m.srpt_lower_bound == 0 and m.jct_ratio is None


def test_to_json_has_the_spec_keys() -> None:
    data = compute_metrics(three_jobs()).to_json()
    spec = {"avg_jct", "p50_jct", "p95_jct", "avg_wait", "makespan", "gpu_utilization"}
    assert spec <= data.keys()
    assert set(data) == set(Metrics.__dataclass_fields__) - {"pools"}  # (only with pools)
    assert data["queue_gpu_hours"] == pytest.approx({"x": 30 / 3600, "y": 80 / 3600})
    assert json.loads(json.dumps(data, allow_nan=False)) == data


def test_jobs_json_matches_spec_section_5() -> None:
    jobs = (
        record(
            "j1",
            0,
            0,
            120,
            3,
            120,
            preemptions=1,
            placement=(TaskPlace("gpu-00", (0, 1)), TaskPlace("gpu-01", (3,))),
        ),
        record("p", 5, None, None, 1, 10, state=Outcome.UNFINISHED, reason="waiting"),
    )
    entries = jobs_json(SimResult(jobs, (), capacity_gpus=8))
    assert entries[0] == {
        "name": "j1",
        "queue": "default",
        "submit_time": 0,
        "start_time": 0,
        "end_time": 120,
        "state": "completed",
        "gpus": 3,
        "run_time": 120,
        "wait": 0,
        "jct": 120,
        "preemptions": 1,
        "lost_gpu_seconds": 0.0,
        "placement": [{"node": "gpu-00", "gpus": [0, 1]}, {"node": "gpu-01", "gpus": [3]}],
        "reason": None,
    }
    assert entries[1]["state"] == "unfinished"
    assert entries[1]["start_time"] is None and entries[1]["jct"] is None
    assert entries[1]["placement"] == [] and entries[1]["reason"] == "waiting"
    json.dumps(entries, allow_nan=False)


def test_the_run_time_bound_is_tighter_and_still_below_the_measured_jct() -> None:
    metrics = compute_metrics(three_jobs())
    assert metrics.jct_lower_bound >= metrics.srpt_lower_bound
    assert metrics.jct_lower_bound <= metrics.avg_jct
    assert 1.0 <= metrics.jct_bound_ratio <= metrics.jct_ratio
