"""A real PostgreSQL server for the tests, started from the server binaries on the machine.

``PostgresServer`` runs ``initdb`` and ``pg_ctl`` on a throwaway data directory, listening
on a free loopback port (and a Unix socket in the same directory), with durability traded
for speed (``fsync=off``). Each test gets its own database (``new_database``). As root, the
binaries run as the ``postgres`` user, since PostgreSQL refuses to run as root.

The binaries come from ``$CORRAL_PG_BINDIR``, else ``pg_config --bindir``, else the
newest ``/usr/lib/postgresql/*/bin``, else ``$PATH``. Without them the tests fail with a
message saying how to install them (``.ci/run`` installs Debian's ``postgresql``).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

SUPERUSER = "corral"


def find_bindir() -> Path:
    """The directory holding ``initdb`` and ``pg_ctl``; ``RuntimeError`` if none."""
    candidates: list[Path] = []
    if os.environ.get("CORRAL_PG_BINDIR"):
        candidates.append(Path(os.environ["CORRAL_PG_BINDIR"]))
    if shutil.which("pg_config"):
        out = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True)
        if out.returncode == 0:
            candidates.append(Path(out.stdout.strip()))
    candidates += sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)
    if shutil.which("initdb"):
        candidates.append(Path(shutil.which("initdb")).resolve().parent)  # type: ignore[arg-type]
    for bindir in candidates:
        if (bindir / "initdb").exists() and (bindir / "pg_ctl").exists():
            return bindir
    raise RuntimeError(
        "PostgreSQL server binaries (initdb, pg_ctl) not found: install them "
        "(Debian: apt-get install postgresql) or set CORRAL_PG_BINDIR"
    )


class PostgresServer:
    """One PostgreSQL cluster in a temporary directory; ``start``/``stop`` may repeat."""

    def __init__(self, port: int, synchronous_commit: bool = False) -> None:
        """``synchronous_commit``: a commit returns only once its WAL is written (to the
        OS: ``fsync`` stays off), so acknowledged work survives ``stop("immediate")``;
        off by default for speed, which loses the last commits in such a stop."""
        self.port = port
        self.synchronous_commit = synchronous_commit
        self.bindir = find_bindir()
        self.root = Path(tempfile.mkdtemp(prefix="corral-pg-"))
        self.data = self.root / "data"
        self._run_as = self._unprivileged_user()
        self._names = itertools.count()
        if self._run_as is not None:
            shutil.chown(self.root, self._run_as, self._run_as)
        self.root.chmod(0o755)
        self._pg("initdb", "-D", str(self.data), "-U", SUPERUSER, "-A", "trust", "-E", "UTF8")

    @staticmethod
    def _unprivileged_user() -> str | None:
        if os.geteuid() != 0:
            return None
        try:
            pwd.getpwnam("postgres")
        except KeyError as exc:
            raise RuntimeError("running as root needs a 'postgres' user to run PostgreSQL") from exc
        return "postgres"

    def _pg(self, tool: str, *args: str) -> None:
        command = [str(self.bindir / tool), *args]
        if self._run_as is not None:
            command = ["runuser", "-u", self._run_as, "--", *command]
        result = subprocess.run(command, capture_output=True, text=True, cwd=self.root)
        if result.returncode != 0:
            raise RuntimeError(f"{tool} failed: {result.stdout}{result.stderr}")

    def start(self) -> None:
        options = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 "
            f"-c fsync=off -c synchronous_commit={'on' if self.synchronous_commit else 'off'} "
            "-c full_page_writes=off "
            "-c max_connections=400"
        )
        self._pg(
            "pg_ctl", "start", "-w", "-t", "60", "-D", str(self.data),
            "-l", str(self.root / "server.log"), "-o", options,
        )  # fmt: skip

    def stop(self, mode: str = "fast") -> None:
        """``mode``: ``fast`` (clean) or ``immediate`` (as if killed)."""
        self._pg("pg_ctl", "stop", "-w", "-D", str(self.data), "-m", mode)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def new_database(self) -> str:
        """A fresh empty database; its URL."""
        import psycopg

        name = f"corral_test_{next(self._names)}"
        with psycopg.connect(self.url(), autocommit=True) as connection:
            connection.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def drop_database(self, url: str) -> None:
        """Drop a database ``new_database`` made (closing its connections), so that
        autovacuum does not work on it behind later runs."""
        import psycopg

        name = url.rsplit("/", 1)[1]
        with psycopg.connect(self.url(), autocommit=True) as connection:
            connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def destroy(self) -> None:
        with contextlib.suppress(RuntimeError):
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)
