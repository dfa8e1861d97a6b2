"""The server's files hold secrets (the admin and join tokens in ``$CORRAL_HOME``, token
hashes and the job-token key in the database): only the server's account may read them.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

log = logging.getLogger("corral.server")

SQLITE_COMPANIONS = ("-wal", "-shm", "-journal", ".migrate.lock")


def secure_home(home: Path) -> None:
    """Create ``home`` with mode 0700, or tighten it to 0700 (with a log line) if others
    could enter it."""
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    mode = stat.S_IMODE(home.stat().st_mode)
    if mode & 0o077:
        home.chmod(0o700)
        log.warning("%s was open to other accounts (mode %04o); made it 0700", home, mode)


def secure_sqlite_file(path: Path) -> None:
    """Create the SQLite database file ``path`` with mode 0600 if it is missing (SQLite
    gives its -wal and -shm files the database file's mode), and tighten it and its
    companion files to 0600 where they are looser. Whatever is in the way (a directory,
    no permission) is left for SQLite to report when it opens the file."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)  # an empty file: an empty database
    except OSError:
        return
    os.close(fd)
    for candidate in (path, *(Path(f"{path}{suffix}") for suffix in SQLITE_COMPANIONS)):
        try:
            mode = stat.S_IMODE(candidate.stat().st_mode)
        except FileNotFoundError:
            continue
        if mode & 0o077:
            candidate.chmod(0o600)
            log.warning("%s was open to other accounts (mode %04o); made it 0600", candidate, mode)
