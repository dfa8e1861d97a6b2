"""The ``jct`` order (the default, ``policy.order: jct``): shortest expected remaining
GPU-time first, so that mean job completion time stays low without anyone giving run
times.

Within a priority, and between queues by fair share as ``fair-share`` does, jobs are
ordered by their **expected size**: GPUs x the expected remaining run time
(``Job.expected_remaining``: the job's ``runtime_estimate``, else the run time learned
from similar finished jobs, ``scheduling.estimates``, capped by its ``time_limit``, less
the work it has kept; a job that outran its estimate is expected to run as long again,
so a mispredicted long job sinks as it runs, as under least-attained-service). Jobs with
no estimate at all go last, in submission order.

**Starvation guard** (Tiresias' promotion): a job that has been pending more than
``starvation`` times its expected remaining run time (at least ``starvation_floor``
seconds; an unknown run time counts as a day) goes first, in submission order.

**Preemption for JCT** (``policy.jct.preempt``, with ``policy.preemption``): a job may
preempt a running job of its own queue and equal priority when that pays: the victim is
preemptible and requeued when preempted (not ``requeue: false``), checkpoints (it has
reported a checkpoint, so it resumes where it stopped),
has run at least ``min_run`` seconds since it last started, and has at least ``margin``
times the job's expected size left. The preemption plugin finds the cheapest such set
(``plugins/preemption.py``); :func:`jct_victim` is its test.

Pure: no I/O; ``now`` is given.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from corral.core.allocation import Allocation
from corral.core.job import Job
from corral.scheduling.config import JctPolicy

DAY = 86400.0
MAX_KEYS = 100_000  # jobs whose order key is kept (then it starts over)
CPU_ONLY_GPUS = 0.1  # a job without GPUs is sized as if it held this much of one


def expected_size(job: Job) -> float:
    """GPU-seconds ``job`` is expected to need from its next start (inf: unknown)."""
    return max(job.spec.total_gpus, CPU_ONLY_GPUS) * job.expected_remaining


def remaining_size(alloc: Allocation, now: float) -> float:
    """GPU-seconds a running allocation is expected to still need: to its expected end,
    or, once past it, as long again as it has run (inf: unknown end)."""
    left = alloc.expected_end - now
    if left <= 0:
        ran = now - alloc.started_at if alloc.started_at is not None else 0.0
        left = max(ran, 60.0)
    return max(alloc.gpus, CPU_ONLY_GPUS) * left


def starving(job: Job, now: float, policy: JctPolicy) -> bool:
    """Pending longer than ``starvation`` times its expected remaining run time."""
    return now - job.submitted_at - job.ran >= patience(job, policy)


def patience(job: Job, policy: JctPolicy) -> float:
    """How long ``job`` may wait (less the time it ran) before it is starving."""
    remaining = job.expected_remaining
    limit = policy.starvation * (DAY if math.isinf(remaining) else min(remaining, DAY))
    return max(policy.starvation_floor, limit)


class ShortestExpectedFirst:
    """The ``jct`` queue sort; ``key_at(now)`` adds the starvation guard."""

    name = "jct"

    def __init__(self, policy: JctPolicy | None = None) -> None:
        self.policy = policy or JctPolicy()
        # job id -> (the job object, its key, its key when starving): asked every cycle
        self._keys: dict[int, tuple[Job, tuple, tuple]] = {}

    def sort_key(self, job: Job) -> tuple:
        return (-job.priority, *self._within(job, starved=False))

    def key_at(self, now: float) -> Callable[[Job], tuple]:
        """The order's key at ``now`` within a priority (fair share goes between)."""
        keys = self._keys
        if len(keys) > MAX_KEYS:
            keys.clear()

        def key(job: Job) -> tuple:
            found = keys.get(job.id)
            if found is None or found[0] is not job:
                found = keys[job.id] = self._keys_of(job)
            _, normal, starved, submitted, ran, patience = found
            return starved if now - submitted - ran >= patience else normal

        return key

    def _keys_of(self, job: Job) -> tuple[Job, tuple, tuple, float, float, float]:
        """The job, its key, its key when starving, and what ``starving`` compares."""
        return (
            job,
            self._within(job, False),
            self._within(job, True),
            job.submitted_at,
            job.ran,
            patience(job, self.policy),
        )

    @staticmethod
    def _within(job: Job, starved: bool) -> tuple:
        if starved:
            return (0, 0.0, job.submitted_at, job.id)
        return (1, expected_size(job), job.submitted_at, job.id)


def jct_victim(
    job: Job, alloc: Allocation, now: float, policy: JctPolicy, size: float | None = None
) -> bool:
    """Whether preempting ``alloc`` for ``job`` pays (module docstring); ``size``: the
    job's expected size, if not its own."""
    if not alloc.preemptible or alloc.priority != job.priority or alloc.queue != job.queue:
        return False
    if alloc.last_checkpoint is None or alloc.started_at is None or not alloc.requeue:
        return False  # it would lose its work, or fail (requeue: false)
    if now - alloc.started_at < policy.min_run:
        return False
    size = expected_size(job) if size is None else size
    return not math.isinf(size) and remaining_size(alloc, now) >= policy.margin * size


def restore_cost(gpus: float) -> float:
    """Seconds a job preempted from a checkpoint spends restoring it when it starts again,
    as the Helios simulator (SC'21) charges: 7 s on one GPU, 30 s up to 8, 60 s above."""
    if gpus <= 1:
        return 7.0
    return 30.0 if gpus <= 8 else 60.0
