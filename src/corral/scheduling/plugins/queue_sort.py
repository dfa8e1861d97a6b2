"""Built-in queue orders (``policy.order``).

``priority-fifo``: priority first, then submission order (the default).
``shortest-first``: priority first, then the shortest expected run time (the job's
``runtime_estimate``, else its ``time_limit``; jobs with neither go last), then submission.
With true durations as estimates (``corral sim --oracle``) it is the shortest-job-first
oracle that schedulers are compared against.
"""

from __future__ import annotations

import math

from corral.core.job import Job


class PriorityThenSubmission:
    name = "priority-fifo"

    def sort_key(self, job: Job) -> tuple:
        return (-job.priority, job.submitted_at, job.id)


class ShortestFirst:
    name = "shortest-first"

    def sort_key(self, job: Job) -> tuple:
        spec = job.spec
        expected = spec.runtime_estimate or spec.time_limit or math.inf
        return (-job.priority, expected, job.submitted_at, job.id)
