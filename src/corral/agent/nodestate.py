"""What an agent keeps across restarts in its state directory (0700): its id, so that a
restarted agent is the same incarnation to the server and keeps its tasks, and the node
credential the server issued at the name's first registration (0600)."""

from __future__ import annotations

import uuid
from pathlib import Path

from corral.privatefiles import private_dir, read_text, write_private

AGENT_ID_FILE = "agent-id"
CREDENTIAL_FILE = "node-credential"


def agent_id(state_dir: Path) -> str:
    """This node's agent id: the stored one, else a new one, stored."""
    private_dir(state_dir)
    stored = read_text(state_dir / AGENT_ID_FILE)
    if stored:
        return stored
    new = uuid.uuid4().hex
    write_private(state_dir / AGENT_ID_FILE, new)
    return new


def credential(state_dir: Path) -> str | None:
    """The node credential from an earlier registration, if any."""
    return read_text(state_dir / CREDENTIAL_FILE)


def save_credential(state_dir: Path, secret: str) -> None:
    write_private(state_dir / CREDENTIAL_FILE, secret)
