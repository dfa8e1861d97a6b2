"""Lower bounds that say how close a schedule came to the best possible one.

Both bounds relax the cluster into ONE server of ``capacity_gpus`` GPUs that any job may
use in full: a job's size is its GPU-seconds (``gpus * run_time``), and alone it would take
``gpus * run_time / capacity_gpus`` seconds. Every real schedule (gangs, topology, whole
nodes, preemptions that throw work away) is also a schedule of this relaxation in which
jobs are served at most at rate ``capacity_gpus`` in total, so what the relaxation cannot
beat, no real schedule beats either.

Which jobs count: a bound describes the jobs it is given. Refused jobs are always left out
(no schedule runs them); every other job counts by its ``run_time``, whatever its state.
``corral.sim.metrics`` passes the completed jobs only, so that each bound covers exactly
the jobs its measured value covers (mean JCT and makespan are measured on completed jobs):
a bound over more jobs than were measured (say, a huge job left unfinished) could rise
above the measured value and would no longer be a lower bound of it.

Pure functions; O(n log n) in the number of jobs.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from corral.sim.result import JobRecord, Outcome


def _runnable(jobs: Sequence[JobRecord]) -> list[JobRecord]:
    return sorted((j for j in jobs if j.state is not Outcome.REFUSED), key=lambda j: j.submit_time)


def _check_capacity(capacity_gpus: float) -> None:
    if not capacity_gpus > 0:
        raise ValueError(f"capacity_gpus must be positive, got {capacity_gpus!r}")


def srpt_mean_jct_lower_bound(jobs: Sequence[JobRecord], capacity_gpus: float) -> float:
    """Pooled-SRPT lower bound on the mean job completion time, in seconds.

    Runs preemptive shortest-remaining-processing-time on one server of ``capacity_gpus``
    GPUs: job ``i`` arrives at its ``submit_time`` with ``gpus * run_time / capacity_gpus``
    seconds of work. SRPT minimises the sum of completion times on one preemptive server
    with release dates (also against schedules that share the server between jobs), and
    every cluster schedule is such a shared schedule, so the mean of SRPT's
    ``completion - submit`` never exceeds a real schedule's mean JCT over the same jobs.

    Refused jobs are left out; returns 0.0 when no job is left. Event-driven with a heap of
    remaining times: O(n log n).
    """
    _check_capacity(capacity_gpus)
    runnable = _runnable(jobs)
    if not runnable:
        return 0.0
    heap: list[tuple[float, int]] = []  # (remaining seconds at full rate, index)
    now = runnable[0].submit_time
    total = 0.0
    i, n = 0, len(runnable)
    while i < n or heap:
        if not heap:  # idle until the next arrival
            now = max(now, runnable[i].submit_time)
        while i < n and runnable[i].submit_time <= now:
            job = runnable[i]
            heapq.heappush(heap, (max(0.0, job.gpus) * max(0.0, job.run_time) / capacity_gpus, i))
            i += 1
        next_arrival = runnable[i].submit_time if i < n else float("inf")
        # Serve the shortest remaining job until it ends or the next job arrives.
        remaining, index = heap[0]
        if now + remaining <= next_arrival:
            heapq.heappop(heap)
            now += remaining
            total += now - runnable[index].submit_time
        else:
            heapq.heapreplace(heap, (remaining - (next_arrival - now), index))
            now = next_arrival
    return total / n


def makespan_lower_bound(
    jobs: Sequence[JobRecord], capacity_gpus: float, *, origin: float | None = None
) -> float:
    """Lower bound on the makespan (last completion minus ``origin``), in seconds.

    ``origin`` defaults to the first submission among the jobs. The bound is the latest of
    these instants, each of which no schedule can finish before:

    - ``submit_time + run_time`` of every job (a job never runs faster than its run time);
    - ``t + W(t) / capacity_gpus`` for every submission time ``t``, where ``W(t)`` is the
      GPU-seconds of the jobs submitted at or after ``t``: that work cannot start before
      ``t`` and the cluster serves at most ``capacity_gpus`` GPU-seconds per second. At the
      first submission this is ``min submit + total GPU-seconds / capacity_gpus``; later
      times make it stronger when the work arrives late.

    Refused jobs are left out; returns 0.0 when no job is left.
    """
    _check_capacity(capacity_gpus)
    runnable = _runnable(jobs)
    if not runnable:
        return 0.0
    start = runnable[0].submit_time if origin is None else origin
    end = max(j.submit_time + max(0.0, j.run_time) for j in runnable)
    later_work = 0.0
    for job in reversed(runnable):  # latest submission first: later_work = W(job.submit_time)
        later_work += max(0.0, job.gpus) * max(0.0, job.run_time)
        end = max(end, job.submit_time + later_work / capacity_gpus)
    return max(0.0, end - start)
