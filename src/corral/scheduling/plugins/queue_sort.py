"""Built-in queue order: priority first, then submission order."""

from __future__ import annotations

from corral.core.job import Job


class PriorityThenSubmission:
    name = "priority-fifo"

    def sort_key(self, job: Job) -> tuple:
        return (-job.priority, job.submitted_at, job.id)
