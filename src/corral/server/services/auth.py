"""Credentials: API tokens (stored hashed; roles admin, user, join and node) and job tokens.

A job token (``CORRAL_JOB_TOKEN`` in a task's environment) is not stored: it is an HMAC of
the job id and attempt under a key kept in the database (``server_secrets``), so that every
replica derives and checks the same token, and it stays stable across an agent's syncs.
"""

from __future__ import annotations

import getpass
import hashlib
import hmac
import secrets
from pathlib import Path

from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from corral.errors import AuthenticationError, NotFoundError
from corral.privatefiles import write_private
from corral.server.context import Context
from corral.server.db.models import ServerSecretRow, TokenRow

ADMIN_TOKEN_FILE = "token"
JOIN_TOKEN_FILE = "join-token"
JOB_TOKEN_PREFIX = "crj_"
JOB_KEY = "job-token-key"


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def new_secret(prefix: str = "crl") -> str:
    return f"{prefix}_{secrets.token_urlsafe(32)}"


def write_secret(path: Path, secret: str) -> None:
    write_private(path, secret)


def server_secret(sessions: sessionmaker[Session], name: str, now: float) -> bytes:
    """The secret ``name`` shared by all replicas; the first replica to start creates it."""
    for _ in range(2):
        with sessions() as session:
            row = session.get(ServerSecretRow, name)
            if row is not None:
                return bytes.fromhex(row.value)
        try:
            with sessions.begin() as session:
                session.add(ServerSecretRow(name=name, value=secrets.token_hex(32), created_at=now))
        except IntegrityError:  # another replica created it first: read theirs
            continue
    with sessions() as session:
        row = session.get(ServerSecretRow, name)
        assert row is not None
        return bytes.fromhex(row.value)


def job_token(key: bytes, job_id: int, attempt: int) -> str:
    """The credential of one attempt of one job (``CORRAL_JOB_TOKEN``)."""
    digest = hmac.new(key, f"job:{job_id}:{attempt}".encode(), hashlib.sha256).hexdigest()
    return f"{JOB_TOKEN_PREFIX}{job_id}.{attempt}.{digest}"


def parse_job_token(key: bytes, secret: str) -> tuple[int, int] | None:
    """``(job id, attempt)`` of a genuine job token; None for anything else."""
    try:
        job_id, attempt, _ = secret.removeprefix(JOB_TOKEN_PREFIX).split(".")
        ids = int(job_id), int(attempt)
    except ValueError:
        return None
    expected = job_token(key, *ids)
    return ids if hmac.compare_digest(expected.encode(), secret.encode()) else None


class TokenService:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    def bootstrap(self) -> None:
        """On an empty token table: create an admin and a join token, stored in the home."""
        home = self.ctx.settings.home
        with self.ctx.sessions.begin() as session:
            if session.scalar(select(func.count()).select_from(TokenRow)):
                return
            admin = self._create(session, getpass.getuser(), "admin")
            join = self._create(session, "agents", "join")
        write_secret(home / ADMIN_TOKEN_FILE, admin[1])
        write_secret(home / JOIN_TOKEN_FILE, join[1])

    def create(
        self, user: str, role: str, node: str | None = None, unix_user: str | None = None
    ) -> tuple[TokenRow, str]:
        """A new token (its secret is returned once); ``unix_user``: the account the
        user's jobs run as (default: ``user``); ``node``: a node credential (the node's
        earlier ones are revoked)."""
        with self.ctx.sessions.begin() as session:
            if node is not None:  # one live credential per node
                session.execute(
                    update(TokenRow)
                    .where(TokenRow.node == node, TokenRow.revoked_at.is_(None))
                    .values(revoked_at=self.ctx.clock())
                )
            created = self._create(session, user, role, node, unix_user)
        if node is not None:
            self.ctx.tokens.clear()
        return created

    def _create(
        self,
        session: Session,
        user: str,
        role: str,
        node: str | None = None,
        unix_user: str | None = None,
    ) -> tuple[TokenRow, str]:
        secret = new_secret("crn" if role == "node" else "crl")
        row = TokenRow(
            user=user,
            role=role,
            node=node,
            unix_user=unix_user,
            secret_hash=hash_secret(secret),
            created_at=self.ctx.clock(),
        )
        session.add(row)
        session.flush()
        return row, secret

    def cached(self, secret: str | None) -> TokenRow | None:
        """The live token for ``secret`` if this replica verified it recently (no I/O)."""
        return self.ctx.tokens.get(hash_secret(secret)) if secret else None

    def verify(self, secret: str | None) -> TokenRow:
        """The live token for ``secret``; ``AuthenticationError`` otherwise. Served from
        the token cache (``services/auth_cache.py``) when possible."""
        if not secret:
            raise AuthenticationError(
                "no API token: pass --token, set CORRAL_TOKEN, or run on the host of `corral up`"
            )
        digest = hash_secret(secret)
        row = self.ctx.tokens.get(digest)
        if row is not None:
            return row
        generation = self.ctx.tokens.generation()
        with self.ctx.sessions() as session:
            row = session.scalar(select(TokenRow).where(TokenRow.secret_hash == digest))
        if row is None or row.revoked_at is not None:
            raise AuthenticationError("invalid or revoked API token")
        self.ctx.tokens.put(digest, row, generation)
        return row

    def list(self, user: str | None = None) -> list[TokenRow]:
        """Admin, user and join tokens; only ``user``'s admin and user tokens when given."""
        roles = ("admin", "user") if user is not None else ("admin", "user", "join")
        query = select(TokenRow).where(TokenRow.role.in_(roles))
        if user is not None:
            query = query.where(TokenRow.user == user)
        with self.ctx.sessions() as session:
            return list(session.scalars(query.order_by(TokenRow.id)))

    def revoke(self, token_id: int, user: str | None = None) -> TokenRow:
        """Revoke a token; with ``user``, only one of that user's own (others: not found)."""
        with self.ctx.sessions.begin() as session:
            row = session.get(TokenRow, token_id)
            if row is None or (user is not None and row.user != user):
                raise NotFoundError(f"no token with id {token_id}")
            if row.revoked_at is None:
                row.revoked_at = self.ctx.clock()
        self.ctx.tokens.clear()
        return row
