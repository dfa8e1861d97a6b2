"""``RunTimeHistory``: the control plane learns run times from the jobs that succeeded."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from corral.server.db.engine import make_engine, migrate, session_factory
from corral.server.db.models import JobRow
from corral.server.services.converters import JOB_COLUMNS, PendingJobs
from corral.server.services.estimates import RunTimeHistory


def add(
    session: Session,
    name: str,
    state: str,
    ran: float | None = None,
    at: float = 10.0,
    user: str = "ann",
    estimate: str | None = None,
) -> None:
    manifest: dict = {"command": ["python", f"{name}.py"], "name": name, "resources": {"gpus": 1}}
    if estimate:
        manifest["runtime_estimate"] = estimate
    session.add(
        JobRow(
            name=name,
            user=user,
            queue="default",
            state=state,
            priority=0,
            preemptible=True,
            manifest=manifest,
            attempt=0,
            submitted_at=float(next(SUBMITTED)),
            updated_at=at,
            started_at=None if ran is None else at - ran,
            ended_at=None if ran is None else at,
        )
    )
    session.commit()


# distinct submission times: the spec memo (``converters.spec_of``) is keyed by (id,
# submitted_at, user) across the databases of the tests in this process
SUBMITTED = itertools.count(7_000_001)


@pytest.fixture
def session(tmp_path: Path) -> Iterator[Session]:
    engine = make_engine(f"sqlite:///{tmp_path / 'corral.db'}")
    migrate(engine)
    with session_factory(engine)() as session:
        yield session


def pending(session: Session, history: RunTimeHistory) -> dict[str, float | None]:
    rows = list(session.execute(select(*JOB_COLUMNS).where(JobRow.state == "pending")))
    jobs = history.predicted(PendingJobs().jobs(session, rows), [r.user for r in rows])
    return {job.spec.name or "": job.predicted_runtime for job in jobs}


def test_pending_jobs_get_the_run_times_of_similar_finished_jobs(session: Session) -> None:
    add(session, "train", "succeeded", ran=3600.0)
    add(session, "train", "succeeded", ran=5400.0, at=20.0)
    add(session, "eval", "succeeded", ran=60.0)
    add(session, "eval", "failed", ran=1.0)  # failures say nothing about a run time
    add(session, "train", "pending")
    add(session, "eval", "pending")
    add(session, "new", "pending", user="bob")  # no history of its own: everyone's median
    add(session, "fixed", "pending", estimate="2h")  # its own estimate wins: no prediction
    history = RunTimeHistory()
    assert history.refresh(session) == 3
    assert pending(session, history) == {
        "train": 4500.0,
        "eval": 60.0,
        "new": 3600.0,
        "fixed": None,
    }


def test_refresh_reads_only_what_ended_since(session: Session) -> None:
    add(session, "train", "succeeded", ran=100.0)
    history = RunTimeHistory()
    assert history.refresh(session) == 1
    assert history.refresh(session) == 0
    add(session, "train", "succeeded", ran=300.0, at=50.0)
    assert history.refresh(session) == 1
    add(session, "train", "pending")
    assert pending(session, history) == {"train": 200.0}


def test_the_first_refresh_reads_the_last_backlog_jobs(session: Session) -> None:
    for i in range(5):
        add(session, "train", "succeeded", ran=float(100 * (i + 1)), at=10.0 + i)
    history = RunTimeHistory(backlog=2)
    assert history.refresh(session) == 2  # the last two: 400 and 500 s
    add(session, "train", "pending")
    assert pending(session, history) == {"train": 450.0}
