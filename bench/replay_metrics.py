"""The pure part of ``bench/replay.py``: the workload CSV, the stamp files, and every
metric of a replay computed from timestamps alone (no I/O but ``load_workload``).

Timestamps are ``time.time()`` seconds, all from one clock (the cluster's host):

- ``t0``: the bench's clock when the first release was sent (all offsets 0: every job
  was submitted held), else when the first submission was due.
- ``JobTimes.arrival``: when the job could first be scheduled: ``max(submitted_at, t0)``
  (the API's ``submitted_at``; a held job's is before ``t0``, so it arrives at ``t0``).
- ``placed``: the API's event ``pending -> running`` of the job's last attempt (the
  scheduling cycle that placed it); ``freed``: the job's ``ended_at`` (the server took the
  last task's exit, so the GPUs are free for the next cycle). ``earlier``: each earlier
  attempt's placement and the event that took it off its GPUs (a requeue): allocated, not
  useful (only the last attempt's run counts as useful).
- ``TaskTimes.launched`` / ``exited``: the API's task ``started_at`` / ``ended_at`` (the
  agent about to start the process / the agent reaping it).
- ``TaskTimes.start`` / ``end``: the stamps the task's own shell wrote (its real process
  start and end).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Row:
    """One job of a workload (already scaled by ``--time-scale``)."""

    offset: float  # seconds after t0 it is submitted
    nodes: int
    gpus_per_node: int
    duration: float
    priority: int

    @property
    def gpu_seconds(self) -> float:
        return self.nodes * self.gpus_per_node * self.duration


def load_workload(path: Path, limit: int | None = None, time_scale: float = 1.0) -> list[Row]:
    """The rows of a workload CSV (``submit_offset_s,num_nodes,gpus_per_node,duration_s,
    priority``): the first ``limit``, offsets and durations times ``time_scale``."""
    with open(path, newline="") as handle:
        rows = [
            Row(
                float(r["submit_offset_s"]) * time_scale,
                int(r["num_nodes"]),
                int(r["gpus_per_node"]),
                float(r["duration_s"]) * time_scale,
                int(r["priority"]),
            )
            for r in csv.DictReader(handle)
        ]
    return rows[:limit] if limit else rows


def parse_stamp(text: str) -> tuple[float | None, float | None]:
    """(start, end) from a stamp file's ``start T`` / ``end T`` lines (None if missing)."""
    found: dict[str, float] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] in ("start", "end"):
            found[parts[0]] = float(parts[1].replace(",", "."))  # EPOCHREALTIME's locale
    return found.get("start"), found.get("end")


@dataclass(frozen=True)
class TaskTimes:
    gpus: float  # GPUs it held
    launched: float  # API: the agent starting the process
    exited: float  # API: the agent saw it exit
    start: float  # stamp: the process's first line
    end: float  # stamp: its last line


@dataclass(frozen=True)
class JobTimes:
    arrival: float
    placed: float
    freed: float
    tasks: tuple[TaskTimes, ...]
    # earlier attempts (preempted, or requeued from a lost node): (placed, GPUs given back)
    earlier: tuple[tuple[float, float], ...] = ()

    @property
    def started(self) -> float:
        """When the whole gang runs: its last task's real start."""
        return max(t.start for t in self.tasks)

    @property
    def ended(self) -> float:
        """Its last task's real end."""
        return max(t.end for t in self.tasks)


@dataclass(frozen=True)
class RunTimes:
    t0: float
    cluster_gpus: int
    submit_seconds: float  # wall time of all submissions (held or not), one connection
    rows: tuple[Row, ...]  # the workload, for the lower bound
    jobs: tuple[JobTimes, ...]  # the jobs that ran to the end, with stamps


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q`` quantile (0..1), linear between the closest ranks (numpy's default)."""
    if not values:
        return None
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def lower_bound(rows: Iterable[Row], cluster_gpus: int) -> float:
    """No schedule ends sooner than the work spread over every GPU (total GPU-seconds /
    GPUs: perfect packing, no fragmentation), nor than any one job's arrival plus its
    duration (``offset + duration``; the longest job when all offsets are 0)."""
    rows = list(rows)
    if not rows:
        return 0.0
    work = sum(r.gpu_seconds for r in rows) / cluster_gpus
    return max(work, max(r.offset + r.duration for r in rows))


def _clipped(start: float, end: float, low: float, high: float) -> float:
    return max(0.0, min(end, high) - max(start, low))


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _ms(value: float | None) -> float | None:
    return None if value is None else value * 1000


def first_wave(jobs: Sequence[JobTimes], t0: float) -> tuple[int, float | None]:
    """The first wave: the jobs whose whole gang started (last task's real start) no later
    than the first job ended (its last task's real end). Returns their number and their
    starts per second: that number over the time from ``t0`` to the last of their starts."""
    if not jobs:
        return 0, None
    first_end = min(j.ended for j in jobs)
    wave = [j.started for j in jobs if j.started <= first_end]
    span = max(wave) - t0
    return len(wave), (len(wave) / span if span > 0 else None)


def metrics(run: RunTimes) -> dict[str, float | None]:
    """Every number of the replay's table (see ``METRICS`` in ``bench/replay.py``)."""
    jobs, t0 = run.jobs, run.t0
    tasks = [(j, t) for j in jobs for t in j.tasks]
    makespan = max((j.ended for j in jobs), default=t0) - t0
    bound = lower_bound(run.rows, run.cluster_gpus)
    wave, wave_rate = first_wave(jobs, t0)
    capacity = run.cluster_gpus * makespan
    high = t0 + makespan
    allocated = sum(t.gpus * _clipped(j.placed, j.freed, t0, high) for j, t in tasks) + sum(
        t.gpus * _clipped(a, b, t0, high) for j, t in tasks for a, b in j.earlier
    )
    useful = sum(t.gpus * _clipped(t.start, t.end, t0, high) for _, t in tasks)
    launch = [t.start - j.placed for j, t in tasks]
    skew = [j.started - min(t.start for t in j.tasks) for j in jobs if len(j.tasks) > 1]
    end_latency = [j.freed - j.ended for j in jobs]
    return {
        "jobs": float(len(jobs)),
        "submit_rate": len(run.rows) / run.submit_seconds if run.submit_seconds > 0 else None,
        "first_wave_jobs": float(wave),
        "first_wave_rate": wave_rate,
        "all_started_s": max(j.started for j in jobs) - t0 if jobs else None,
        "makespan_s": makespan,
        "lower_bound_s": bound,
        "makespan_ratio": makespan / bound if bound > 0 else None,
        "util_allocated": allocated / capacity if capacity > 0 else None,
        "util_useful": useful / capacity if capacity > 0 else None,
        "launch_p50_ms": _ms(percentile(launch, 0.5)),
        "launch_p95_ms": _ms(percentile(launch, 0.95)),
        "skew_p50_ms": _ms(percentile(skew, 0.5)),
        "end_latency_p50_ms": _ms(percentile(end_latency, 0.5)),
        "end_latency_p95_ms": _ms(percentile(end_latency, 0.95)),
        "mean_jct_s": _mean([j.freed - j.arrival for j in jobs]),
        "mean_wait_s": _mean([j.placed - j.arrival for j in jobs]),
        # where the lifecycle goes (medians over tasks; the last over jobs: the last exit the
        # agents saw to the GPUs free)
        "placed_to_launched_ms": _ms(percentile([t.launched - j.placed for j, t in tasks], 0.5)),
        "launched_to_start_ms": _ms(percentile([t.start - t.launched for _, t in tasks], 0.5)),
        "end_to_exited_ms": _ms(percentile([t.exited - t.end for _, t in tasks], 0.5)),
        "exited_to_freed_ms": _ms(
            percentile([j.freed - max(t.exited for t in j.tasks) for j in jobs], 0.5)
        ),
    }
