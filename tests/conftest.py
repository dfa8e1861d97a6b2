"""Fixtures shared by every test layer."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from tests.e2e.cluster import free_port
from tests.postgres import PostgresServer


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One real PostgreSQL server for the whole session (started on first use)."""
    server = PostgresServer(free_port())
    server.start()
    try:
        yield server
    finally:
        server.destroy()


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> str:
    """A fresh, empty PostgreSQL database for this test."""
    return postgres_server.new_database()


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    """Undo what a command run in-process did to logging (``corral server`` and ``agent``
    configure the root logger): the next test's output must not carry its records."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
