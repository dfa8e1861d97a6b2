"""Built-in queue orders (``policy.order``).

``fair-share`` (the default): priority first, then the queue with the lowest weighted
dominant share of decayed usage (``corral.scheduling.fairshare``; the cycle orders with
``fair_order``), then submission order; its ``sort_key`` is the order without usage.
``priority-fifo``: priority first, then submission order.
``shortest-first``: priority first, then the shortest expected run time (the job's
``runtime_estimate``, else its learned run time, else its ``time_limit``; jobs with none
go last), then submission.
With true durations as estimates (``corral sim --oracle``) it is the shortest-job-first
oracle that schedulers are compared against.
"""

from __future__ import annotations

from corral.core.job import Job


class PriorityThenSubmission:
    name = "priority-fifo"

    def sort_key(self, job: Job) -> tuple:
        return (-job.priority, job.submitted_at, job.id)


class FairShare(PriorityThenSubmission):
    name = "fair-share"


class ShortestFirst:
    name = "shortest-first"

    def sort_key(self, job: Job) -> tuple:
        return (-job.priority, job.expected_runtime, job.submitted_at, job.id)
