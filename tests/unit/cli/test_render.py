"""The CLI's tables are total (issue 14): no stored value, however absurd, crashes
`corral jobs` or `corral show`."""

from __future__ import annotations

import math
import re
from typing import Any

import pytest
from rich.console import Console

from corral.cli.render import job_panel, jobs_table, when
from corral.core.units import format_duration, format_size
from corral.schemas.api import JobOut, TaskOut

NOW = 1_800_000_000.0
ABSURD = [1e308, -1e308, 1e20, -1e20, 0.0, math.inf, -math.inf, math.nan]


def job(**changes: Any) -> JobOut:
    fields: dict[str, Any] = {
        "id": 1,
        "name": "n",
        "user": "alice",
        "queue": "default",
        "state": "pending",
        "priority": 100,
        "priority_class": "normal",
        "preemptible": True,
        "attempt": 0,
        "nodes": 1,
        "tasks_per_node": 1,
        "gpus": "1",
        "total_gpus": 1.0,
        "reason": "waiting",
        "position": 1,
        "submitted_at": NOW,
        "started_at": None,
        "ended_at": None,
        "exit_code": None,
        "manifest": {"command": ["true"]},
    }
    return JobOut.model_validate({**fields, **changes})


def render(*things: object) -> str:
    console = Console(width=200, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    for thing in things:
        console.print(thing)
    return console.export_text()


@pytest.mark.parametrize("value", ABSURD)
def test_times_and_durations_are_total(value: float) -> None:
    assert isinstance(when(value), str) and isinstance(format_duration(value), str)
    pending = job(estimated_start=value, submitted_at=value)
    ended = job(state="failed", started_at=value, ended_at=NOW, submitted_at=value)
    task = TaskOut(
        rank=0,
        node="n",
        node_rank=0,
        local_rank=0,
        gpus=[0],
        state="exited",
        peak_memory=10**40,
        cpu_seconds=value if not math.isnan(value) else None,
    )
    running = job(state="running", started_at=NOW, tasks=[task])
    text = render(
        jobs_table([pending, ended, running], NOW),
        job_panel(pending, NOW),
        job_panel(ended, NOW),
        job_panel(running, NOW),
    )
    assert "alice" in text


def test_far_times_read_as_epoch_seconds() -> None:
    assert when(1e308) == "1e+308 (epoch seconds)"
    assert format_duration(math.inf) == "forever" and format_duration(math.nan) == "-"
    assert format_duration(1e308) == "3.17e+300 years"
    assert format_size(10**40) == "1e+40B" and format_size(5 * 10**15) == "5PB"


def test_show_lists_each_tasks_usage() -> None:
    task = TaskOut(
        rank=0,
        node="gpu-0",
        node_rank=0,
        local_rank=0,
        gpus=[0],
        state="exited",
        exit_code=137,
        peak_memory=64 * 2**20,
        cpu_seconds=125.0,
        reason="out of memory: killed at its limit of 64 MiB",
    )
    shown = render(job_panel(job(state="failed", tasks=[task], unix_user="alice2"), NOW))
    assert "PEAK MEM" in shown and "67.1MB" in shown and "2m05s" in shown
    assert "out of memory" in shown and re.search(r"Runs as\s+alice2", shown)


def test_show_lists_the_dependencies_and_a_hold() -> None:
    waiting = job(dependency="afterok:12:13,afterany:14", held=True, reason="held")
    shown = render(job_panel(waiting, NOW))
    assert "Depends on" in shown and "afterok:12:13,afterany:14" in shown
    assert "Held" in shown and "corral release" in shown
    assert "Depends on" not in render(job_panel(job(), NOW))


def test_an_array_is_one_row_and_its_elements_are_named_by_index() -> None:
    array = {"job_id": 12, "spec": "0-99%4", "tasks": "0-99", "count": 100, "max_running": 4}
    states = {"pending": 90, "running": 4, "succeeded": 6}
    grouped = job(id=12, array_job_id=12, array={**array, "states": states})
    element = job(id=15, array_job_id=12, array_task_id=3)
    table = render(jobs_table([grouped, element], NOW))
    row = next(line for line in table.splitlines() if line.startswith("12_[0-99%4]"))
    assert "pending 90, running 4, succeeded 6" in row
    assert any(line.startswith("12_3 ") for line in table.splitlines())
    shown = render(job_panel(job(id=15, array_job_id=12, array_task_id=3, array=array), NOW))
    assert "job 12_3 (id 15)" in shown and re.search(r"Array\s+12_\[0-99\] \(at most 4", shown)
