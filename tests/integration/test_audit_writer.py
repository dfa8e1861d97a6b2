"""The audit log's batched writer on a real SQLite database: nothing queued is lost,
reads see every earlier call, shutdown stores the rest, outages cost one warning line."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from corral.server.db.engine import make_engine, migrate, session_factory
from corral.server.db.models import AuditRow
from corral.server.services.audit import AuditWriter


def _entry(n: int, status: int | None = 201) -> dict[str, object]:
    return {
        "at": float(n),
        "user": "bob",
        "role": "user",
        "token_id": 1,
        "method": "POST",
        "path": "/api/v1/jobs",
        "target": str(n),
        "status": status,
    }


@pytest.fixture
def sessions(tmp_path: Path) -> sessionmaker[Session]:
    engine = make_engine(f"sqlite:///{tmp_path / 'corral.db'}")
    migrate(engine)
    return session_factory(engine)


def _stored(sessions: sessionmaker[Session]) -> list[str]:
    with sessions() as session:
        return list(session.scalars(select(AuditRow.target).order_by(AuditRow.id)))


def test_flush_stores_everything_queued_before_it(sessions: sessionmaker[Session]) -> None:
    writer = AuditWriter(sessions)
    threads = [
        threading.Thread(target=lambda k=k: [writer.put(_entry(k * 1000 + i)) for i in range(300)])
        for k in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    writer.flush()
    stored = _stored(sessions)
    assert sorted(stored, key=int) == [str(k * 1000 + i) for k in range(4) for i in range(300)]
    for k in range(4):  # each caller's entries in its order
        mine = [int(t) for t in stored if int(t) // 1000 == k]
        assert mine == sorted(mine)
    writer.close()


def test_close_stores_what_is_left_and_later_entries_at_once(
    sessions: sessionmaker[Session],
) -> None:
    writer = AuditWriter(sessions)
    for i in range(50):
        writer.put(_entry(i))
    writer.close()
    assert len(_stored(sessions)) == 50
    writer.put(_entry(50))  # after shutdown began: stored synchronously
    assert _stored(sessions)[-1] == "50"


def test_an_entry_the_database_refuses_costs_only_itself(
    sessions: sessionmaker[Session], caplog: pytest.LogCaptureFixture
) -> None:
    writer = AuditWriter(sessions)
    writer.put(_entry(1))
    writer.put(_entry(2, status=None))  # NOT NULL
    writer.put(_entry(3))
    writer.close()
    assert _stored(sessions) == ["1", "3"]
    refused = [r for r in caplog.records if "not recorded" in r.getMessage()]
    assert len(refused) == 1 and refused[0].exc_info is None


def test_an_unavailable_database_logs_one_line_without_a_traceback(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    gone = session_factory(make_engine(f"sqlite:///{tmp_path / 'gone.db'}"))
    (tmp_path / "gone.db").mkdir()  # a directory: SQLite cannot open it
    writer = AuditWriter(gone)
    with caplog.at_level(logging.WARNING, logger="corral.server"):
        writer.put(_entry(1))
        writer.flush()  # returns: the batch is dropped, the writer keeps running
        writer.put(_entry(2))
        writer.close()
    lines = [r for r in caplog.records if r.name == "corral.server"]
    assert lines and all("database unavailable" in r.getMessage() for r in lines)
    assert all(r.exc_info is None for r in lines)


def test_count_query_sees_no_duplicates(sessions: sessionmaker[Session]) -> None:
    writer = AuditWriter(sessions)
    for i in range(1200):  # more than one batch
        writer.put(_entry(i))
    writer.flush()
    writer.flush()
    with sessions() as session:
        assert session.scalar(select(func.count()).select_from(AuditRow)) == 1200
    writer.close()
