"""``PendingJobs``: the cycle's core jobs are reused only while their rows are unchanged."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from corral.server.db.engine import make_engine, migrate, session_factory
from corral.server.db.models import JobRow
from corral.server.services.converters import JOB_COLUMNS, PendingJobs


@pytest.fixture
def session(tmp_path: Path) -> Iterator[Session]:
    engine = make_engine(f"sqlite:///{tmp_path / 'corral.db'}")
    migrate(engine)
    with session_factory(engine)() as session:
        for name in ("a", "b"):
            session.add(
                JobRow(
                    name=name,
                    user="ann",
                    queue="default",
                    state="pending",
                    priority=0,
                    preemptible=True,
                    manifest={"command": ["true"], "name": name},
                    attempt=0,
                    submitted_at=1.0,
                    updated_at=1.0,
                )
            )
        session.commit()
        yield session


def _read(session: Session) -> list:
    return list(session.execute(select(*JOB_COLUMNS).order_by(JobRow.id)))


def test_unchanged_rows_give_the_same_jobs_and_changed_rows_new_ones(session: Session) -> None:
    memo = PendingJobs()
    first = memo.jobs(session, _read(session))
    assert [j.spec.name for j in first] == ["a", "b"]
    again = memo.jobs(session, _read(session))
    assert again[0] is first[0] and again[1] is first[1]
    session.execute(update(JobRow).where(JobRow.name == "b").values(attempt=1, priority=5))
    changed = memo.jobs(session, _read(session))
    assert changed[0] is first[0]
    assert changed[1] is not first[1]
    assert (changed[1].attempt, changed[1].priority) == (1, 5)


def test_only_the_rows_read_are_kept(session: Session) -> None:
    memo = PendingJobs()
    both = memo.jobs(session, _read(session))
    memo.jobs(session, _read(session)[:1])  # b left the pending set
    back = memo.jobs(session, _read(session))
    assert back[0] is both[0]
    assert back[1] is not both[1] and back[1] == both[1]  # rebuilt, the same job
