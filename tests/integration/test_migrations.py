"""The Alembic migrations build exactly the schema the ORM declares."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError, OperationalError

from corral.server.db.engine import make_engine, migrate
from corral.server.db.models import Base
from tests.integration.conftest import BACKENDS, database_url


def test_migrations_match_the_models_and_are_idempotent(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'corral.db'}")
    migrate(engine)
    migrate(engine)  # a second start upgrades nothing and breaks nothing
    with engine.connect() as connection:
        assert compare_metadata(MigrationContext.configure(connection), Base.metadata) == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_database_in_use_upgrades_from_the_first_schema(
    tmp_path: Path, request: pytest.FixtureRequest, backend: str
) -> None:
    """Upgrading a database whose tasks refer to its jobs. On SQLite, altering ``jobs``
    means copying and dropping it, which foreign keys would refuse (a server started on an
    old demo's database failed so)."""
    engine = make_engine(database_url(backend, request, tmp_path))
    migrate(engine, "0001")
    job = {"id": 1, "user": "ann", "queue": "default", "state": "running", "priority": 0}
    job |= {"preemptible": True, "manifest": '{"command": ["true"]}', "attempt": 0}
    job |= {"submitted_at": 1.0, "updated_at": 1.0}
    task = {"job_id": 1, "attempt": 0, "rank": 0, "node": "n", "node_rank": 0}
    task |= {"local_rank": 0, "gpus": "[0]", "gpu_milli": 1000, "gpu_memory": 0}
    task |= {"mig_slots": "[]", "cpus": 1.0, "memory": 0, "state": "running"}
    task |= {"released": False, "log_size": 0}
    with engine.begin() as connection:
        for table, row in (("jobs", job), ("tasks", task)):
            columns = ", ".join(f'"{c}"' for c in row)
            values = ", ".join(f":{c}" for c in row)
            connection.execute(text(f"INSERT INTO {table} ({columns}) VALUES ({values})"), row)
    migrate(engine)
    with engine.connect() as connection:
        assert compare_metadata(MigrationContext.configure(connection), Base.metadata) == []
        jobs = connection.execute(text('SELECT "user", idle FROM jobs')).all()
        assert [(user, bool(idle)) for user, idle in jobs] == [("ann", False)]
        assert connection.execute(text("SELECT job_id FROM tasks")).all() == [(1,)]
        with pytest.raises(IntegrityError):  # references are enforced (again, on SQLite)
            connection.execute(text("DELETE FROM jobs"))


def test_a_failed_upgrade_on_sqlite_changes_nothing(tmp_path: Path) -> None:
    """Each schema statement must not commit on its own: a failure late in an upgrade
    leaves the database as it was, so the next start can upgrade it."""
    engine = make_engine(f"sqlite:///{tmp_path / 'corral.db'}")
    migrate(engine, "0001")
    with engine.begin() as connection:  # in the way of the last migration
        connection.execute(text("CREATE TABLE leases (x INTEGER)"))
    with pytest.raises(OperationalError, match="leases already exists"):
        migrate(engine)
    with engine.connect() as connection:
        assert connection.execute(text("SELECT version_num FROM alembic_version")).all() == [
            ("0001",)
        ]
        tables = connection.execute(text("SELECT name FROM sqlite_master WHERE type='table'"))
        assert "server_secrets" not in {name for (name,) in tables}  # 0003 was undone
    with engine.begin() as connection:
        connection.execute(text("DROP TABLE leases"))
    migrate(engine)
    with engine.connect() as connection:
        assert compare_metadata(MigrationContext.configure(connection), Base.metadata) == []
