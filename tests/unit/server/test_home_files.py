"""Secrets on disk (issue 14): the server's home is 0700, its SQLite files and token files
0600, whatever the umask, and looser modes found at start are tightened."""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from corral.server.app import build_context
from corral.server.context import ServerSettings
from corral.server.db.engine import make_engine, migrate
from corral.server.home import secure_home


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(autouse=True)
def loose_umask() -> Iterator[None]:
    """A umask that lets everyone read new files, as on many hosts."""
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def test_the_home_is_created_private(tmp_path: Path) -> None:
    home = tmp_path / "new" / "home"
    secure_home(home)
    assert mode(home) == 0o700


def test_a_loose_home_is_tightened_with_a_log_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o755)
    with caplog.at_level(logging.WARNING, logger="corral.server"):
        secure_home(home)
    assert mode(home) == 0o700
    assert [r.getMessage() for r in caplog.records] == [
        f"{home} was open to other accounts (mode 0755); made it 0700"
    ]
    caplog.clear()
    secure_home(home)  # already private: nothing to say
    assert not caplog.records


def test_sqlite_files_are_private(tmp_path: Path) -> None:
    path = tmp_path / "corral.db"
    engine = make_engine(f"sqlite:///{path}")
    migrate(engine)
    with engine.begin() as connection:  # a write: the -wal and -shm files exist
        connection.execute(text("CREATE TABLE probe (x INTEGER)"))
    files = {p.name: mode(p) for p in tmp_path.iterdir()}
    assert {"corral.db", "corral.db-wal", "corral.db-shm"} <= set(files)
    assert set(files.values()) == {0o600}, files
    engine.dispose()


def test_loose_sqlite_files_are_tightened(tmp_path: Path) -> None:
    path = tmp_path / "corral.db"
    migrate(make_engine(f"sqlite:///{path}"))
    for name in ("corral.db", "corral.db-wal", "corral.db-shm"):
        (tmp_path / name).touch()
        (tmp_path / name).chmod(0o644)
    engine = make_engine(f"sqlite:///{path}")
    with engine.connect() as connection:
        connection.execute(text("SELECT 1"))
    assert {mode(tmp_path / n) for n in ("corral.db", "corral.db-wal", "corral.db-shm")} == {0o600}
    engine.dispose()


def test_a_server_start_leaves_only_private_files(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o755)
    ctx = build_context(ServerSettings(db_url=f"sqlite:///{home / 'corral.db'}", home=home))
    try:
        assert mode(home) == 0o700
        for name in ("token", "join-token", "corral.db"):
            assert mode(home / name) == 0o600, name
    finally:
        ctx.sessions.kw["bind"].dispose()
