"""Files and directories readable by their owner only: credentials and state on disk."""

from __future__ import annotations

import os
from pathlib import Path


def private_dir(path: Path, mode: int = 0o700) -> Path:
    """Create ``path`` (and its parents) and set its mode to ``mode`` (0700: owner only)."""
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, mode)
    return path


def write_private(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` atomically, mode 0600 from the first byte; parents are made
    private (0700) when created."""
    if not path.parent.exists():
        private_dir(path.parent)
    temporary = path.with_name(f".{path.name}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text if text.endswith("\n") else text + "\n")
    os.replace(temporary, path)
    return path


def read_text(path: Path) -> str | None:
    """The stripped contents of ``path``; None if it is missing, unreadable or empty."""
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return text or None
