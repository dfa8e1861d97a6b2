"""Where the server is and which credential to use (SPEC section 1).

Server: ``--server``, else ``$CORRAL_SERVER``, else the address ``corral up`` recorded in
``$CORRAL_HOME/server``, else ``http://127.0.0.1:7733``. A comma-separated list means
replicas. Token: ``--token``, else ``$CORRAL_TOKEN``, else ``$CORRAL_HOME/token``.
"""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_PORT = 7733
DEFAULT_SERVER = f"http://127.0.0.1:{DEFAULT_PORT}"
SERVER_FILE = "server"
TOKEN_FILE = "token"
JOIN_TOKEN_FILE = "join-token"


def corral_home() -> Path:
    return Path(os.environ.get("CORRAL_HOME") or "~/.corral").expanduser()


def _read(path: Path) -> str | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return text or None


def resolve_servers(server: str | None = None) -> list[str]:
    value = server or os.environ.get("CORRAL_SERVER") or _read(corral_home() / SERVER_FILE)
    value = value or DEFAULT_SERVER
    return [_normalize(s) for s in value.split(",") if s.strip()]


def resolve_token(token: str | None = None) -> str | None:
    return token or os.environ.get("CORRAL_TOKEN") or _read(corral_home() / TOKEN_FILE)


def resolve_join_token(token: str | None = None) -> str | None:
    return token or os.environ.get("CORRAL_JOIN_TOKEN") or _read(corral_home() / JOIN_TOKEN_FILE)


def _normalize(address: str) -> str:
    address = address.strip().rstrip("/")
    if "://" not in address:
        address = "http://" + address
    return address
