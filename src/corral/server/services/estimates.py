"""Run times the control plane learns: a ``RuntimePredictor`` fed from the jobs that
succeeded, read from the database a few at a time.

The scheduling loop calls :meth:`RunTimeHistory.refresh` before each cycle: the first
call reads the last ``backlog`` succeeded jobs, later ones only the jobs that ended since
(by end time, then id). A job's run time is its last attempt's (``ended_at -
started_at``): a job resumed from a checkpoint ran longer in all, but its last attempt is
what the next resume of a similar job will take as well. Every replica learns the same
from the same rows, so a new leader predicts as the old one did.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace

from sqlalchemy import and_, or_, select
from sqlalchemy.orm import Session

from corral.core.job import Job, JobState
from corral.scheduling.estimates import JobFeatures, Prediction, RuntimePredictor
from corral.server.db.models import JobRow
from corral.server.services.converters import spec_of

BACKLOG = 5000  # succeeded jobs read at the first refresh
BATCH = 2000  # at most this many new ones per refresh
# what a refresh reads of a job (``spec_of`` needs the first four)
_COLUMNS = (
    JobRow.id,
    JobRow.submitted_at,
    JobRow.user,
    JobRow.manifest,
    JobRow.started_at,
    JobRow.ended_at,
)


@dataclass
class RunTimeHistory:
    predictor: RuntimePredictor = field(default_factory=RuntimePredictor)
    backlog: int = BACKLOG
    _seen: tuple[float, int] | None = None  # (ended_at, id) of the last job read
    _memo: dict[int, tuple[int, Job, Job]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)  # the loop and API threads

    def refresh(self, session: Session) -> int:
        """Learn from the jobs that succeeded since the last call; returns how many."""
        with self._lock:
            return self._refresh(session)

    def _refresh(self, session: Session) -> int:
        done = JobRow.state == JobState.SUCCEEDED.value
        timed = and_(JobRow.started_at.is_not(None), JobRow.ended_at.is_not(None))
        query = select(*_COLUMNS).where(done, timed)  # plain rows: thousands at the start
        if self._seen is None:
            query = query.order_by(JobRow.ended_at.desc(), JobRow.id.desc()).limit(self.backlog)
            rows = list(reversed(list(session.execute(query))))
        else:
            at, job_id = self._seen
            later = or_(JobRow.ended_at > at, and_(JobRow.ended_at == at, JobRow.id > job_id))
            query = query.where(later).order_by(JobRow.ended_at, JobRow.id).limit(BATCH)
            rows = list(session.execute(query))
        for row in rows:
            runtime = (row.ended_at or 0.0) - (row.started_at or 0.0)
            self.predictor.observe(JobFeatures.of(spec_of(row), row.user), runtime)
        if rows:
            self._seen = (rows[-1].ended_at or 0.0, rows[-1].id)
        elif self._seen is None:
            self._seen = (0.0, 0)
        return len(rows)

    def predict(self, row: JobRow | object) -> Prediction | None:
        """The learned run time of a job row (or a plain row with ``user`` and a spec)."""
        features = JobFeatures.of(spec_of(row), row.user)  # type: ignore[arg-type, attr-defined]
        with self._lock:
            return self.predictor.predict(features)

    def with_prediction(self, job: Job, user: str) -> Job:
        """``job`` with its learned run time, when it has no estimate of its own (the same
        object back while neither the job nor the history changed)."""
        if job.spec.runtime_estimate:
            return job
        seen = self._memo.get(job.id)
        if seen is not None and seen[0] == self.predictor.observed and seen[1] is job:
            return seen[2]
        features = JobFeatures.of(job.spec, user)
        with self._lock:
            found = self.predictor.predict(features)
        seconds = None if found is None else found.seconds
        out = job if seconds == job.predicted_runtime else replace(job, predicted_runtime=seconds)
        self._memo[job.id] = (self.predictor.observed, job, out)
        return out

    def predicted(self, jobs: list[Job], users: list[str]) -> list[Job]:
        """``with_prediction`` of each job (``users[i]`` submitted ``jobs[i]``); forgets
        the jobs not in ``jobs``."""
        out = [self.with_prediction(job, user) for job, user in zip(jobs, users, strict=True)]
        if len(self._memo) > len(jobs):
            keep = {job.id for job in jobs}
            self._memo = {k: v for k, v in self._memo.items() if k in keep}
        return out
