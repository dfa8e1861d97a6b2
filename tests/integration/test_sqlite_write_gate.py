"""The SQLite write gate (``db/engine.py``): concurrent writers in one process all get
through, and every way a write transaction ends hands the gate back."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from sqlalchemy import create_engine, func, insert, select, text
from sqlalchemy.exc import IntegrityError

from corral.server.db.engine import WriteGate, migrate, session_factory
from corral.server.db.models import AuditRow

ROW = {"at": 1.0, "method": "POST", "path": "/api/v1/jobs", "status": 201}


@pytest.fixture
def gated(tmp_path: Path) -> tuple:
    engine = create_engine(f"sqlite:///{tmp_path / 'g.db'}", pool_size=8)
    migrate(engine)
    gate = WriteGate()
    gate.install(engine)
    return engine, gate


def test_concurrent_writers_all_commit_and_leave_the_gate_free(gated: tuple) -> None:
    engine, gate = gated
    sessions = session_factory(engine)

    def write() -> None:
        for _ in range(25):
            with sessions.begin() as session:
                session.execute(insert(AuditRow), [ROW])
                session.scalar(select(func.count()).select_from(AuditRow))

    threads = [threading.Thread(target=write) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    with sessions() as session:
        assert session.scalar(select(func.count()).select_from(AuditRow)) == 200
    assert not gate.held


def test_rollback_close_and_reads_hand_the_gate_back(gated: tuple) -> None:
    engine, gate = gated
    sessions = session_factory(engine)
    with pytest.raises(IntegrityError), sessions.begin() as session:
        session.execute(insert(AuditRow), [{**ROW, "status": None}])  # NOT NULL
    assert not gate.held
    session = sessions()
    session.execute(insert(AuditRow), [ROW])
    assert gate.held  # inside a write transaction
    session.close()  # neither committed nor rolled back: the pool resets it
    assert not gate.held
    with engine.connect() as connection:
        connection.execute(text("SELECT 1"))
        assert not gate.held  # reads do not take it
        connection.execute(insert(AuditRow), [ROW])
        connection.commit()
        assert not gate.held
