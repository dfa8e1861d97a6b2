"""The lower bounds: hand-computed cases, and never above what a valid schedule achieves."""

from __future__ import annotations

import random

import pytest

from corral.sim.bounds import makespan_lower_bound, srpt_mean_jct_lower_bound
from corral.sim.result import JobRecord, Outcome


def job(
    name: str,
    submit: float,
    gpus: float,
    run_time: float,
    *,
    start: float | None = None,
    state: Outcome = Outcome.COMPLETED,
) -> JobRecord:
    end = None if start is None else start + run_time
    return JobRecord(name, "default", submit, start, end, state, gpus, run_time)


SRPT_CASES = {
    # name: (jobs, capacity, expected mean JCT)
    "one job uses the whole pool": ([job("a", 0, 2, 10)], 4, 5.0),
    # a runs 0-2 (8 left), b arrives shorter and runs 2-5, a finishes at 13: (13 + 3) / 2
    "a shorter arrival preempts": ([job("a", 0, 1, 10), job("b", 2, 1, 3)], 1, 8.0),
    # b arrives with 5 left vs a's 4: a keeps running (0-6), b 6-11: (6 + 9) / 2
    "a longer arrival waits": ([job("a", 0, 1, 6), job("b", 2, 1, 5)], 1, 7.5),
    "idle gap between jobs": ([job("a", 0, 1, 1), job("b", 10, 1, 1)], 1, 1.0),
    # sizes 20, 80, 10 GPU-s on 4 GPUs: a 0-5, c 5-7.5, b 7.5-27.5: (5 + 27.5 + 2.5) / 3
    "three jobs": ([job("a", 0, 2, 10), job("b", 0, 4, 20), job("c", 5, 2, 5)], 4, 35 / 3),
    "same arrival, shortest first": ([job("a", 0, 1, 3), job("b", 0, 1, 1)], 1, 2.5),
    "fractional GPUs": ([job("a", 0, 0.5, 8)], 2, 2.0),
    "zero-size job completes at submit": ([job("a", 3, 0, 10), job("b", 3, 1, 2)], 1, 1.0),
    "refused jobs are left out": (
        [job("a", 0, 1, 4), job("r", 0, 64, 100, state=Outcome.REFUSED)],
        1,
        4.0,
    ),
    "unfinished and failed jobs count by run time": (
        [
            job("a", 0, 1, 1),
            job("u", 0, 1, 2, state=Outcome.UNFINISHED),
            job("f", 0, 1, 3, state=Outcome.FAILED),
        ],
        1,
        (1 + 3 + 6) / 3,
    ),
    "no jobs": ([], 8, 0.0),
}


@pytest.mark.parametrize("case", list(SRPT_CASES), ids=list(SRPT_CASES))
def test_srpt_bound_hand_cases(case: str) -> None:
    jobs, capacity, expected = SRPT_CASES[case]
    assert srpt_mean_jct_lower_bound(jobs, capacity) == pytest.approx(expected)


MAKESPAN_CASES = {
    # name: (jobs, capacity, expected makespan bound)
    "a job's own run time dominates": ([job("a", 0, 2, 10)], 4, 10.0),
    "total work dominates": ([job("a", 0, 4, 10), job("b", 0, 4, 10)], 4, 20.0),
    # per job: 15; all work from 0: 21/2 = 10.5; work arriving at 10: 10 + 20/2 = 20
    "late work dominates": (
        [job("a", 0, 1, 1), job("b", 10, 2, 5), job("c", 10, 2, 5)],
        2,
        20.0,
    ),
    "relative to the first submission": ([job("a", 100, 1, 5), job("b", 102, 1, 5)], 1, 10.0),
    "refused jobs are left out": (
        [job("a", 0, 1, 5), job("r", 0, 99, 1000, state=Outcome.REFUSED)],
        1,
        5.0,
    ),
    "no jobs": ([], 8, 0.0),
}


@pytest.mark.parametrize("case", list(MAKESPAN_CASES), ids=list(MAKESPAN_CASES))
def test_makespan_bound_hand_cases(case: str) -> None:
    jobs, capacity, expected = MAKESPAN_CASES[case]
    assert makespan_lower_bound(jobs, capacity) == pytest.approx(expected)


def test_makespan_bound_from_an_earlier_origin() -> None:
    assert makespan_lower_bound([job("a", 10, 1, 5)], 1, origin=0) == pytest.approx(15.0)


@pytest.mark.parametrize("bound", [srpt_mean_jct_lower_bound, makespan_lower_bound])
def test_capacity_must_be_positive(bound) -> None:
    with pytest.raises(ValueError, match="capacity_gpus"):
        bound([job("a", 0, 1, 1)], 0)


def test_srpt_bound_is_tight_for_shortest_first_on_one_gpu() -> None:
    durations = [5, 1, 3, 2, 4]
    jobs, now = [], 0.0
    for i, d in enumerate(sorted(durations)):
        jobs.append(job(f"j{i}", 0, 1, d, start=now))
        now += d
    measured = sum(j.jct for j in jobs) / len(jobs)
    assert srpt_mean_jct_lower_bound(jobs, 1) == pytest.approx(measured)
    assert makespan_lower_bound(jobs, 1) == pytest.approx(now)


def greedy_schedule(rng: random.Random, n: int, capacity: int) -> list[JobRecord]:
    """A valid non-preemptive schedule on a pool of ``capacity`` GPUs, in random order.

    At each event it starts waiting jobs that fit, trying them in a random order; each job
    holds its GPUs for its whole run time. Any cluster schedule is a pool schedule too.
    """
    specs = [
        (f"j{i}", rng.uniform(0, 50), rng.randint(1, capacity), rng.uniform(0.5, 20))
        for i in range(n)
    ]
    waiting = sorted(specs, key=lambda s: s[1])
    running: list[tuple[float, int]] = []  # (end, gpus)
    done: list[JobRecord] = []
    now = 0.0
    while waiting or running:
        running = [(end, g) for end, g in running if end > now]
        free = capacity - sum(g for _, g in running)
        arrived = [s for s in waiting if s[1] <= now]
        rng.shuffle(arrived)
        for spec in arrived:
            name, submit, gpus, run_time = spec
            if gpus <= free:
                free -= gpus
                running.append((now + run_time, gpus))
                waiting.remove(spec)
                done.append(job(name, submit, gpus, run_time, start=now))
        events = [end for end, _ in running] + [s[1] for s in waiting if s[1] > now]
        if not events:
            break
        now = min(events)
    assert not waiting
    return done


@pytest.mark.parametrize("seed", range(40))
def test_bounds_never_exceed_random_valid_schedules(seed: int) -> None:
    rng = random.Random(seed)
    capacity = rng.choice([1, 2, 4, 8, 16])
    jobs = greedy_schedule(rng, rng.randint(1, 30), capacity)
    mean_jct = sum(j.jct for j in jobs) / len(jobs)
    first = min(j.submit_time for j in jobs)
    makespan = max(j.end_time for j in jobs) - first
    assert srpt_mean_jct_lower_bound(jobs, capacity) <= mean_jct + 1e-9
    assert makespan_lower_bound(jobs, capacity) <= makespan + 1e-9


def test_srpt_bound_scales_to_many_jobs() -> None:
    rng = random.Random(7)
    jobs = [
        job(f"j{i}", rng.uniform(0, 4e6), rng.randint(1, 8), rng.uniform(1, 1e4))
        for i in range(50_000)
    ]
    bound = srpt_mean_jct_lower_bound(jobs, 1000)
    assert 0 < bound < 1e4


def srpt_reference(jobs: list[JobRecord], capacity: float) -> float:
    """A plain O(n^2) SRPT, written without a heap, to check the fast one."""
    remaining = {i: j.gpus * j.run_time / capacity for i, j in enumerate(jobs)}
    now, total = min(j.submit_time for j in jobs), 0.0
    while remaining:
        ready = [i for i in remaining if jobs[i].submit_time <= now]
        later = [jobs[i].submit_time for i in remaining if jobs[i].submit_time > now]
        if not ready:
            now = min(later)
            continue
        i = min(ready, key=lambda k: (remaining[k], k))
        step = min(remaining[i], min(later, default=float("inf")) - now)
        now += step
        remaining[i] -= step
        if remaining[i] <= 1e-12:
            del remaining[i]
            total += now - jobs[i].submit_time
    return total / len(jobs)


@pytest.mark.parametrize("seed", range(20))
def test_srpt_bound_matches_a_plain_reference(seed: int) -> None:
    rng = random.Random(seed)
    jobs = [
        job(f"j{i}", rng.choice([0, 1, 2, 5, 7.5, 10]), rng.randint(1, 4), rng.uniform(0, 10))
        for i in range(rng.randint(1, 25))
    ]
    capacity = rng.choice([1, 3, 8])
    assert srpt_mean_jct_lower_bound(jobs, capacity) == pytest.approx(
        srpt_reference(jobs, capacity)
    )
