"""Metrics of one simulation run: what a ``SimResult`` says about the schedule.

Pure functions over the result, no I/O. Definitions (SPEC section 5 names the JSON keys):

- **Counts** by final state: ``completed``, ``failed``, ``refused``, ``unfinished``.
- **JCT** (end minus submit) over completed jobs; **wait** (first start minus submit) over
  jobs that started, whatever their final state; **slowdown** is JCT over run time, for
  completed jobs with a positive run time. Percentiles interpolate linearly between the
  closest ranks (numpy's default, ``statistics.quantiles(method="inclusive")``).
- **The window**: from the first submission of a job that was not refused (refused jobs
  leave at once; counting the time before the first real job would blame the scheduler for
  an empty queue) to the last completion. ``makespan`` is its length.
- **gpu_utilization**: allocated GPU-time over capacity GPU-time in the window, from the
  samples (each holds from its time until the next sample; none allocated before the
  first). ``avg_fragmentation``: time-weighted ``fragmented_gpus / capacity`` likewise.
- **Per-queue GPU-hours**: GPU time each queue actually consumed, ``gpus * run_time`` of
  its completed jobs plus ``lost_gpu_seconds`` of all its jobs (work thrown away by
  preemptions and failures: it held GPUs too). Work of jobs still running at the end is
  not recorded by the simulator and is not counted. Every queue with a job that was not
  refused appears, with 0 if it got nothing. ``fairness`` is Jain's index over these
  numbers: 1 when all queues got the same, 1/n when one queue got everything. It compares
  raw GPU-hours, not shares weighted by quota or demand.
- **preemptions**: the total over jobs; **lost_gpu_hours**: GPU-hours thrown away by
  preemptions and failures (work since the last checkpoint; the records do not tell the
  two apart).
- **Bounds** (``corral.sim.bounds``) over the completed jobs, the jobs the measured values
  cover; ``jct_ratio = avg_jct / srpt_lower_bound`` and
  ``makespan_ratio = makespan / makespan_lower_bound`` are >= 1, and 1 is optimal. The
  pooled SRPT bound lets one job use the whole cluster, so on real traces it is far below
  anything reachable; ``jct_lower_bound`` is the stronger max(SRPT bound, mean run time)
  (no job ends sooner than its run time), with ``jct_bound_ratio`` against it.

**With pools** (``SimResult.pools``; none of this otherwise): the window ends at the
run's end, ``SimResult.end_time`` (the last job's end or the last change to a pool unit,
whichever is later: what idle units cost after the last job counts), and
``gpu_utilization`` is allocated GPU-time over **paid** GPU-time in it: the fixed nodes'
GPUs over the whole window plus each pool unit's GPUs from its request to its deletion
(``corral.sim.pools``); ``avg_fragmentation`` is over paid GPU-time likewise.
``PoolTotals`` adds ``paid_gpu_hours`` and ``used_gpu_hours`` (those two), the pools'
``pool_node_hours``, ``pool_provisioning_hours``, ``pool_cost``, units provisioned and
interrupted, and the waits caused by provisioning: ``provisioning_wait_jobs`` (jobs that
waited on a unit they then started on), ``provisioning_wait_total`` and
``provisioning_wait_avg`` (seconds, over those jobs). ``pools_json`` gives each pool's
``PoolRecord``, with ``gpu_utilization`` (used over paid GPU-hours on its nodes).

Empty cases: a value whose jobs do not exist (no completed job, no started job, a window
of zero length, a zero bound) is ``None``, never ``0`` or ``NaN``; counts and sums are 0.

Made-up times (a workload that is not ``timed``, such as a pod list replayed without
timestamps): JCT, wait, slowdown, makespan and the bounds and ratios built on them
(``TIMED``) are ``None`` and listed in ``not_applicable``, for tables to show "n/a".
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from corral.sim.bounds import makespan_lower_bound, srpt_mean_jct_lower_bound
from corral.sim.result import JobRecord, Outcome, PoolRecord, Sample, SimResult

# The metrics that mean nothing when the submit and run times are made up.
TIMED = (
    "avg_jct",
    "p50_jct",
    "p95_jct",
    "p99_jct",
    "avg_wait",
    "p50_wait",
    "p95_wait",
    "p99_wait",
    "avg_slowdown",
    "makespan",
    "srpt_lower_bound",
    "jct_ratio",
    "jct_lower_bound",
    "jct_bound_ratio",
    "makespan_lower_bound",
    "makespan_ratio",
)


@dataclass(frozen=True)
class PoolTotals:
    """The pools' totals of a run (module docstring); hours, seconds for waits."""

    paid_gpu_hours: float
    used_gpu_hours: float
    pool_node_hours: float
    pool_provisioning_hours: float
    pool_cost: float
    pool_units_provisioned: int
    pool_units_interrupted: int
    provisioning_wait_jobs: int
    provisioning_wait_total: float
    provisioning_wait_avg: float | None
    by_pool: tuple[PoolRecord, ...] = ()  # each pool's (not in the metrics' JSON)


@dataclass(frozen=True)
class Metrics:
    """Everything ``compute_metrics`` measures. Times in seconds, fractions in [0, 1]."""

    jobs: int
    completed: int
    failed: int
    refused: int
    unfinished: int
    avg_jct: float | None
    p50_jct: float | None
    p95_jct: float | None
    p99_jct: float | None
    avg_wait: float | None
    p50_wait: float | None
    p95_wait: float | None
    p99_wait: float | None
    avg_slowdown: float | None
    makespan: float | None
    gpu_utilization: float | None
    avg_fragmentation: float | None
    gpu_hours: float  # all queues together
    queue_gpu_hours: tuple[tuple[str, float], ...]  # sorted by queue name
    fairness: float | None  # Jain's index over queue_gpu_hours
    preemptions: int
    lost_gpu_hours: float
    srpt_lower_bound: float | None
    jct_ratio: float | None
    jct_lower_bound: float | None  # max(SRPT bound, mean run time of completed jobs)
    jct_bound_ratio: float | None
    makespan_lower_bound: float | None
    makespan_ratio: float | None
    not_applicable: tuple[str, ...] = ()  # fields left out: the workload's times are made up
    pools: PoolTotals | None = None  # with pools only

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict: one key per field, ``queue_gpu_hours`` as an object; with
        pools, ``PoolTotals``' keys too (``by_pool`` aside)."""
        data = asdict(self)
        data["queue_gpu_hours"] = dict(self.queue_gpu_hours)
        data["not_applicable"] = list(self.not_applicable)
        del data["pools"]
        if self.pools is not None:
            data.update({k: v for k, v in asdict(self.pools).items() if k != "by_pool"})
        return data


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0..100) with linear interpolation; None for no values."""
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be within 0..100, got {q}")
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def jain_index(values: Sequence[float]) -> float | None:
    """Jain's fairness index ``(sum x)^2 / (n * sum x^2)``; None when all are 0 (or none)."""
    squares = sum(v * v for v in values)
    if not values or squares == 0:
        return None
    return sum(values) ** 2 / (len(values) * squares)


def time_average(
    samples: Sequence[Sample], attribute: str, start: float, end: float
) -> float | None:
    """Mean of a sampled step function over ``[start, end]``; None for an empty window.

    Each sample holds from its time until the next sample's time (the last one until
    ``end``); before the first sample the value is 0.
    """
    if end <= start:
        return None
    area = 0.0
    ordered = sorted(samples, key=lambda s: s.time)
    for i, sample in enumerate(ordered):
        begin = max(sample.time, start)
        until = min(ordered[i + 1].time, end) if i + 1 < len(ordered) else end
        if until > begin:
            area += getattr(sample, attribute) * (until - begin)
    return area / (end - start)


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _ratio(value: float | None, bound: float | None) -> float | None:
    return None if value is None or not bound else value / bound


def _queue_gpu_seconds(jobs: Iterable[JobRecord]) -> dict[str, float]:
    seconds: dict[str, float] = {}
    for job in jobs:
        if job.state is Outcome.REFUSED:
            continue
        used = job.gpus * job.run_time if job.state is Outcome.COMPLETED else 0.0
        seconds[job.queue] = seconds.get(job.queue, 0.0) + used + job.lost_gpu_seconds
    return seconds


def compute_metrics(result: SimResult, *, timed: bool = True) -> Metrics:
    """All metrics of one run, as defined in the module docstring; ``timed=False`` for a
    workload whose submit and run times are made up (``Workload.timed``)."""
    metrics = _compute(result)
    if timed:
        return metrics
    return replace(metrics, **dict.fromkeys(TIMED), not_applicable=TIMED)


def _compute(result: SimResult) -> Metrics:
    jobs = result.jobs
    by_state = {state: [j for j in jobs if j.state is state] for state in Outcome}
    completed = by_state[Outcome.COMPLETED]
    jcts = [j.jct for j in completed if j.jct is not None]
    waits = [w for w in (j.wait for j in jobs) if w is not None]
    slowdowns = [j.jct / j.run_time for j in completed if j.jct is not None and j.run_time > 0]

    submits = [j.submit_time for j in jobs if j.state is not Outcome.REFUSED]
    ends = [j.end_time for j in completed if j.end_time is not None]
    start = min(submits) if submits else None
    end = max(ends) if ends else None
    makespan = None if start is None or end is None else max(0.0, float(end - start))

    capacity = result.capacity_gpus
    utilization = fragmentation = pools = None
    if result.pools:
        pools, utilization, fragmentation = _pool_totals(result, start, end)
    elif start is not None and end is not None and capacity > 0:
        allocated = time_average(result.samples, "allocated_gpus", start, end)
        fragmented = time_average(result.samples, "fragmented_gpus", start, end)
        utilization = None if allocated is None else allocated / capacity
        fragmentation = None if fragmented is None else fragmented / capacity

    queue_seconds = _queue_gpu_seconds(jobs)
    queue_hours = tuple(sorted((q, s / 3600) for q, s in queue_seconds.items()))

    srpt_bound = makespan_bound = None
    if completed and capacity > 0:
        srpt_bound = srpt_mean_jct_lower_bound(completed, capacity)
        makespan_bound = makespan_lower_bound(completed, capacity, origin=start)

    avg_jct = _mean(jcts)
    jct_bound = None
    if srpt_bound is not None:
        jct_bound = max(srpt_bound, _mean([j.run_time for j in completed]) or 0.0)
    return Metrics(
        jobs=len(jobs),
        completed=len(completed),
        failed=len(by_state[Outcome.FAILED]),
        refused=len(by_state[Outcome.REFUSED]),
        unfinished=len(by_state[Outcome.UNFINISHED]),
        avg_jct=avg_jct,
        p50_jct=percentile(jcts, 50),
        p95_jct=percentile(jcts, 95),
        p99_jct=percentile(jcts, 99),
        avg_wait=_mean(waits),
        p50_wait=percentile(waits, 50),
        p95_wait=percentile(waits, 95),
        p99_wait=percentile(waits, 99),
        avg_slowdown=_mean(slowdowns),
        makespan=makespan,
        gpu_utilization=utilization,
        avg_fragmentation=fragmentation,
        gpu_hours=sum(queue_seconds.values()) / 3600,
        queue_gpu_hours=queue_hours,
        fairness=jain_index([h for _, h in queue_hours]),
        preemptions=sum(j.preemptions for j in jobs),
        lost_gpu_hours=sum(j.lost_gpu_seconds for j in jobs) / 3600,  # preemptions, failures
        srpt_lower_bound=srpt_bound,
        jct_ratio=_ratio(avg_jct, srpt_bound),
        jct_lower_bound=jct_bound,
        jct_bound_ratio=_ratio(avg_jct, jct_bound),
        makespan_lower_bound=makespan_bound,
        makespan_ratio=_ratio(makespan, makespan_bound),
        pools=pools,
    )


def _pool_totals(
    result: SimResult, start: float | None, end: float | None
) -> tuple[PoolTotals, float | None, float | None]:
    """The pools' totals, and GPU utilization and fragmentation over paid GPU-time, in
    the window from ``start`` to the run's end (module docstring)."""
    begin = start if start is not None else 0.0
    until = max(begin, end or begin, result.end_time or begin)
    span = until - begin
    used = (time_average(result.samples, "allocated_gpus", begin, until) or 0.0) * span
    fragmented = (time_average(result.samples, "fragmented_gpus", begin, until) or 0.0) * span
    paid = result.fixed_gpus * span + sum(p.gpu_hours_paid for p in result.pools) * 3600
    waits = [j.provisioning_wait for j in result.jobs if j.provisioning_wait > 0]
    totals = PoolTotals(
        paid_gpu_hours=paid / 3600,
        used_gpu_hours=used / 3600,
        pool_node_hours=sum(p.node_hours for p in result.pools),
        pool_provisioning_hours=sum(p.provisioning_hours for p in result.pools),
        pool_cost=sum(p.cost for p in result.pools),
        pool_units_provisioned=sum(p.units_provisioned for p in result.pools),
        pool_units_interrupted=sum(p.units_interrupted for p in result.pools),
        provisioning_wait_jobs=len(waits),
        provisioning_wait_total=sum(waits),
        provisioning_wait_avg=_mean(waits),
        by_pool=result.pools,
    )
    if paid <= 0:
        return totals, None, None
    return totals, used / paid, fragmented / paid


def pools_json(result: SimResult) -> list[dict[str, Any]]:
    """Each pool's ``PoolRecord`` as a dict, with ``gpu_utilization`` (GPU-hours used over
    paid on its nodes; None when it paid for none)."""
    return [
        {**asdict(p), "gpu_utilization": _ratio(p.gpu_hours_used, p.gpu_hours_paid)}
        for p in result.pools
    ]


def jobs_json(result: SimResult) -> list[dict[str, Any]]:
    """SPEC section 5's per-job entries, in the result's order, with a few extra keys.

    ``placement`` is the job's last placement, one entry per task in rank order.
    """
    return [
        {
            "name": job.name,
            "queue": job.queue,
            "submit_time": job.submit_time,
            "start_time": job.start_time,
            "end_time": job.end_time,
            "state": job.state.value,
            "gpus": job.gpus,
            "run_time": job.run_time,
            "wait": job.wait,
            "jct": job.jct,
            "preemptions": job.preemptions,
            "lost_gpu_seconds": job.lost_gpu_seconds,
            "placement": [{"node": p.node, "gpus": list(p.gpus)} for p in job.placement],
            "reason": job.reason,
            **({"provisioning_wait": job.provisioning_wait} if result.pools else {}),
        }
        for job in result.jobs
    ]
