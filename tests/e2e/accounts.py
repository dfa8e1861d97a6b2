"""Throw-away Unix accounts for end-to-end tests (``useradd``; needs root)."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

CAN_ADD_USERS = os.geteuid() == 0 and shutil.which("useradd") is not None


@contextmanager
def unix_accounts(*stems: str) -> Iterator[list[str]]:
    """Create one account per stem (``crl-<stem>-<random>``, with a home directory);
    remove them and their homes afterwards."""
    suffix = secrets.token_hex(3)
    names = [f"crl-{stem}-{suffix}" for stem in stems]
    made = []
    try:
        for name in names:
            subprocess.run(
                ["useradd", "--create-home", "--shell", "/bin/sh", name],
                check=True,
                capture_output=True,
            )
            made.append(name)
        yield names
    finally:
        for name in made:
            subprocess.run(["pkill", "-KILL", "-u", name], capture_output=True)
            subprocess.run(["userdel", "--remove", name], capture_output=True)
