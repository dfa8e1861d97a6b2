"""API tokens: stored hashed; roles admin, user, join (agents joining) and node."""

from __future__ import annotations

import getpass
import hashlib
import os
import secrets
from pathlib import Path

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from corral.errors import AuthenticationError, NotFoundError
from corral.server.context import Context
from corral.server.db.models import TokenRow

ADMIN_TOKEN_FILE = "token"
JOIN_TOKEN_FILE = "join-token"


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def new_secret(prefix: str = "crl") -> str:
    return f"{prefix}_{secrets.token_urlsafe(32)}"


def write_secret(path: Path, secret: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(secret + "\n")


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

    def create(self, user: str, role: str, node: str | None = None) -> tuple[TokenRow, str]:
        with self.ctx.sessions.begin() as session:
            if node is not None:  # one live credential per node
                session.execute(
                    update(TokenRow)
                    .where(TokenRow.node == node, TokenRow.revoked_at.is_(None))
                    .values(revoked_at=self.ctx.clock())
                )
            return self._create(session, user, role, node)

    def _create(
        self, session: Session, user: str, role: str, node: str | None = None
    ) -> tuple[TokenRow, str]:
        secret = new_secret("crn" if role == "node" else "crl")
        row = TokenRow(
            user=user,
            role=role,
            node=node,
            secret_hash=hash_secret(secret),
            created_at=self.ctx.clock(),
        )
        session.add(row)
        session.flush()
        return row, secret

    def verify(self, secret: str | None) -> TokenRow:
        """The live token for ``secret``; ``AuthenticationError`` otherwise."""
        if not secret:
            raise AuthenticationError(
                "no API token: pass --token, set CORRAL_TOKEN, or run on the host of `corral up`"
            )
        with self.ctx.sessions() as session:
            row = session.scalar(
                select(TokenRow).where(TokenRow.secret_hash == hash_secret(secret))
            )
        if row is None or row.revoked_at is not None:
            raise AuthenticationError("invalid or revoked API token")
        return row

    def list(self) -> list[TokenRow]:
        with self.ctx.sessions() as session:
            return list(
                session.scalars(
                    select(TokenRow)
                    .where(TokenRow.role.in_(("admin", "user")))
                    .order_by(TokenRow.id)
                )
            )

    def revoke(self, token_id: int) -> TokenRow:
        with self.ctx.sessions.begin() as session:
            row = session.get(TokenRow, token_id)
            if row is None:
                raise NotFoundError(f"no token with id {token_id}")
            if row.revoked_at is None:
                row.revoked_at = self.ctx.clock()
            return row
