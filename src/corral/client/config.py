"""Where the server is and which credential to use (SPEC section 1).

Server: ``--server``, else ``$CORRAL_SERVER``, else the address ``corral up`` recorded in
``$CORRAL_HOME/server``, else ``http://127.0.0.1:7733``. A comma-separated list means
replicas. Token: ``--token``, else ``$CORRAL_TOKEN``, else ``$CORRAL_HOME/token``. CA
certificate for an HTTPS server: ``--ca-cert``, else ``$CORRAL_CA_CERT``, else
``$CORRAL_HOME/ca.pem`` (``corral login --ca-cert`` copies it there), else the system CAs.
Inside a task, its own job's server and job token come from the task's environment
(``resolve_job``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from corral.privatefiles import write_private

if TYPE_CHECKING:
    import ssl

DEFAULT_PORT = 7733
DEFAULT_SERVER = f"http://127.0.0.1:{DEFAULT_PORT}"
SERVER_FILE = "server"
TOKEN_FILE = "token"
JOIN_TOKEN_FILE = "join-token"
CA_FILE = "ca.pem"


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


def resolve_ca_cert(ca_cert: str | Path | None = None) -> Path | None:
    """The CA bundle to verify the server with; None: the system CAs."""
    value = ca_cert or os.environ.get("CORRAL_CA_CERT")
    if value:
        return Path(value).expanduser()
    stored = corral_home() / CA_FILE
    return stored if stored.is_file() else None


def ssl_verify(ca_cert: Path | None, servers: Sequence[str] = ()) -> ssl.SSLContext | bool:
    """httpx's ``verify``: a context trusting ``ca_cert``, else the system CAs. Without
    ``ca_cert``, when every one of ``servers`` is plain ``http://`` and no proxy is set, no
    TLS is ever made: a context that trusts nothing (were one made, it would fail) rather
    than the system CAs, whose loading costs a cold CLI command 20-30 ms (issue 21)."""
    import ssl

    if ca_cert is None:
        plain = bool(servers) and all(s.startswith("http://") for s in servers)
        if plain and not any(k.lower().endswith("_proxy") for k in os.environ):
            return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        return True

    try:
        return ssl.create_default_context(cafile=str(ca_cert))
    except (OSError, ssl.SSLError) as exc:
        from corral.errors import ValidationError

        raise ValidationError(f"CA certificate {ca_cert}: cannot be loaded ({exc})") from None


def store(name: str, text: str) -> Path:
    """Write ``$CORRAL_HOME/name`` readable by its owner only (0600)."""
    return write_private(corral_home() / name, text)


def _normalize(address: str) -> str:
    address = address.strip().rstrip("/")
    if "://" not in address:
        address = "http://" + address
    return address


@dataclass(frozen=True)
class JobCredentials:
    """What a task knows of its own job: the server, the job's id and its job token."""

    server: str
    job_id: int
    token: str


JOB_VARIABLES = ("CORRAL_SERVER", "CORRAL_JOB_ID", "CORRAL_JOB_TOKEN")


def resolve_job(environ: Mapping[str, str] | None = None) -> JobCredentials:
    """The calling task's job from its environment (``CORRAL_SERVER``, ``CORRAL_JOB_ID``,
    ``CORRAL_JOB_TOKEN``); ``ValidationError`` when it is not inside a Corral job."""
    from corral.errors import ValidationError

    env = os.environ if environ is None else environ
    missing = [name for name in JOB_VARIABLES if not env.get(name)]
    if missing:
        raise ValidationError(
            f"{', '.join(missing)} not set: run it inside a Corral job (a task's environment "
            "has them)"
        )
    try:
        job_id = int(env["CORRAL_JOB_ID"])
    except ValueError:
        raise ValidationError(f"CORRAL_JOB_ID is not a job id: {env['CORRAL_JOB_ID']!r}") from None
    return JobCredentials(env["CORRAL_SERVER"], job_id, env["CORRAL_JOB_TOKEN"])
