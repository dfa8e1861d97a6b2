"""The Alembic migrations build exactly the schema the ORM declares."""

from __future__ import annotations

from pathlib import Path

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from corral.server.db.engine import make_engine, migrate
from corral.server.db.models import Base


def test_migrations_match_the_models_and_are_idempotent(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'corral.db'}")
    migrate(engine)
    migrate(engine)  # a second start upgrades nothing and breaks nothing
    with engine.connect() as connection:
        assert compare_metadata(MigrationContext.configure(connection), Base.metadata) == []
