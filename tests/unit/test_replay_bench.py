"""The metrics of ``bench/replay.py`` (pure, in ``bench/replay_metrics.py``) on synthetic
timestamps worked out by hand."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

PATH = Path(__file__).resolve().parents[2] / "bench" / "replay_metrics.py"
SPEC = importlib.util.spec_from_file_location("replay_metrics", PATH)
assert SPEC is not None and SPEC.loader is not None
rm = importlib.util.module_from_spec(SPEC)
sys.modules["replay_metrics"] = rm  # dataclasses look their module up
SPEC.loader.exec_module(rm)

T0 = 100.0
ROWS = (
    rm.Row(0, 2, 4, 10, 0),  # A: 80 GPU-s
    rm.Row(0, 1, 8, 5, 0),  # B: 40
    rm.Row(0, 1, 8, 4, 1),  # C: 32, after B
)


def task(gpus, launched, start, end, exited):  # noqa: ANN001, ANN201
    return rm.TaskTimes(gpus, launched, exited, start, end)


JOBS = (
    rm.JobTimes(
        T0,
        100.5,
        111.1,
        (task(4, 100.6, 100.7, 110.7, 110.8), task(4, 100.6, 100.9, 110.9, 111.0)),
    ),
    rm.JobTimes(T0, 100.5, 105.7, (task(8, 100.55, 100.6, 105.6, 105.65),)),
    rm.JobTimes(T0, 105.8, 110.1, (task(8, 105.9, 106.0, 110.0, 110.05),)),
)

EXPECTED = {
    "jobs": 3,
    "submit_rate": 3 / 0.5,
    "first_wave_jobs": 2,  # A (gang up at 100.9) and B started before B ended (105.6)
    "first_wave_rate": 2 / 0.9,
    "all_started_s": 6.0,  # C at 106.0
    "makespan_s": 10.9,  # A's last rank ends at 110.9
    "lower_bound_s": 10.0,  # max(152 GPU-s / 16 GPUs, A's 10 s)
    "makespan_ratio": 1.09,
    # A: 8 GPUs x (110.9 (cut) - 100.5); B: 8 x 5.2; C: 8 x 4.3
    "util_allocated": (83.2 + 41.6 + 34.4) / (16 * 10.9),
    "util_useful": 152 / (16 * 10.9),
    "launch_p50_ms": 200,  # of 0.2 0.4 | 0.1 | 0.2
    "launch_p95_ms": 370,  # 0.2 + 0.85 x (0.4 - 0.2)
    "skew_p50_ms": 200,  # A only
    "end_latency_p50_ms": 100,  # of 0.2 | 0.1 | 0.1
    "end_latency_p95_ms": 190,
    "mean_jct_s": (11.1 + 5.7 + 10.1) / 3,
    "mean_wait_s": (0.5 + 0.5 + 5.8) / 3,
    "placed_to_launched_ms": 100,  # of 0.1 0.1 | 0.05 | 0.1
    "launched_to_start_ms": 100,  # of 0.1 0.3 | 0.05 | 0.1
    "end_to_exited_ms": 75,  # of 0.1 0.1 | 0.05 | 0.05
    "exited_to_freed_ms": 50,  # per job: 0.1 | 0.05 | 0.05
}


def test_every_metric_of_a_worked_example() -> None:
    got = rm.metrics(rm.RunTimes(T0, 16, 0.5, ROWS, JOBS))
    assert set(got) == set(EXPECTED)
    for key, value in EXPECTED.items():
        assert got[key] == pytest.approx(value, rel=1e-9, abs=1e-9), key


def test_no_gang_no_skew_and_no_jobs_no_numbers() -> None:
    got = rm.metrics(rm.RunTimes(T0, 16, 0.5, ROWS, JOBS[1:]))
    assert got["skew_p50_ms"] is None
    empty = rm.metrics(rm.RunTimes(T0, 16, 0.0, (), ()))
    assert empty["jobs"] == 0 and empty["makespan_s"] == 0
    assert empty["submit_rate"] is None and empty["util_useful"] is None
    assert empty["launch_p50_ms"] is None and empty["mean_jct_s"] is None


@pytest.mark.parametrize(
    ("rows", "gpus", "bound"),
    [
        pytest.param(ROWS, 16, 10.0, id="longest-job"),
        pytest.param(ROWS, 8, 19.0, id="work"),  # 152 / 8
        pytest.param((rm.Row(8, 1, 1, 5, 0), *ROWS), 16, 13.0, id="late-arrival"),
        pytest.param((), 16, 0.0, id="empty"),
    ],
)
def test_lower_bound(rows, gpus, bound) -> None:  # noqa: ANN001
    assert rm.lower_bound(rows, gpus) == pytest.approx(bound)


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        ([3.0], 0.95, 3.0),
        ([1.0, 2.0], 0.5, 1.5),
        ([4.0, 1.0, 3.0, 2.0], 0.95, 3.85),
        ([], 0.5, None),
    ],
)
def test_percentile(values, q, expected) -> None:  # noqa: ANN001
    assert rm.percentile(values, q) == (None if expected is None else pytest.approx(expected))


def test_workload_and_stamps(tmp_path: Path) -> None:
    csv = tmp_path / "w.csv"
    csv.write_text(
        "submit_offset_s,num_nodes,gpus_per_node,duration_s,priority\n0.5,2,8,3,1\n1,1,1,2,0\n"
    )
    assert rm.load_workload(csv, limit=1, time_scale=2) == [rm.Row(1.0, 2, 8, 6.0, 1)]
    assert len(rm.load_workload(csv)) == 2
    assert rm.parse_stamp("start 12.5\nend 14,25\n") == (12.5, 14.25)
    assert rm.parse_stamp("start 12.5\n") == (12.5, None)


def test_earlier_attempts_count_as_allocated_only() -> None:
    # B was placed once before, at 99.0 (before t0: cut), and preempted at 100.4
    b = rm.JobTimes(T0, 100.5, 105.7, JOBS[1].tasks, earlier=((99.0, 100.4),))
    got = rm.metrics(rm.RunTimes(T0, 16, 0.5, ROWS, (JOBS[0], b, JOBS[2])))
    assert got["util_allocated"] == pytest.approx((83.2 + 41.6 + 34.4 + 8 * 0.4) / (16 * 10.9))
    assert got["util_useful"] == pytest.approx(EXPECTED["util_useful"])
