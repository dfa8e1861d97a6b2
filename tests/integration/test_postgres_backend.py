"""The PostgreSQL backend: the same migrations build the same schema, twice over."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import text

from corral.server.db.engine import make_engine, migrate
from corral.server.db.models import Base


def test_migrations_match_the_models_on_postgresql(postgres_url: str) -> None:
    engine = make_engine(postgres_url)
    migrate(engine)
    migrate(engine)
    with engine.connect() as connection:
        assert connection.execute(text("select version()")).scalar().startswith("PostgreSQL")
        assert compare_metadata(MigrationContext.configure(connection), Base.metadata) == []
