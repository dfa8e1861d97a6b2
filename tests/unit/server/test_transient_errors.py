"""Which database errors are worth a retry (503) and which are the statement's (500)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import DBAPIError

from corral.server.errors import transient


def _error(engine_url: str, statement: str) -> DBAPIError:
    engine = create_engine(engine_url, connect_args={"timeout": 0})
    with engine.connect() as connection, pytest.raises(DBAPIError) as caught:
        connection.execute(text(statement))
    return caught.value


def test_a_statement_that_does_not_fit_the_schema_is_not_transient(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    with create_engine(url).begin() as connection:
        connection.execute(text("CREATE TABLE jobs (id INTEGER)"))
    assert not transient(_error(url, "SELECT nope FROM jobs"))
    assert not transient(_error(url, "SELECT * FROM nothing"))
    assert not transient(_error(url, "CREATE TABLE jobs (id INTEGER)"))


def test_a_locked_database_is_transient(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    holder = create_engine(url).connect()
    holder.exec_driver_sql("CREATE TABLE jobs (id INTEGER)")
    holder.commit()
    holder.exec_driver_sql("BEGIN EXCLUSIVE")
    try:
        error = _error(url, "SELECT * FROM jobs")
        assert "locked" in str(error.orig)
        assert transient(error)
    finally:
        holder.rollback()
        holder.close()
