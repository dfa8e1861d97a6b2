"""What every RPC shares: the caller's token (as ``server/deps.py`` checks it over REST),
request validation with REST's messages, the audit entry of a state-changing call, and
errors answered as gRPC status codes (``corral.api.convert``)."""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import grpc
from fastapi.exceptions import RequestValidationError
from google.protobuf.message import Message
from pydantic import BaseModel
from pydantic import ValidationError as PydanticValidationError
from sqlalchemy.exc import DataError, DBAPIError

from corral.api.convert import CODE_KEY, RETRY_AFTER_KEY, status_of, to_dict
from corral.errors import (
    AuthenticationError,
    CorralError,
    LimitExceededError,
    PermissionDeniedError,
    UnavailableError,
    ValidationError,
)
from corral.server.context import Context
from corral.server.db.models import TokenRow
from corral.server.errors import describe_request_errors, transient
from corral.server.services.auth import JOB_TOKEN_PREFIX, TokenService, parse_job_token

log = logging.getLogger("corral.server.grpc")
M = TypeVar("M", bound=BaseModel)
SERVICE = "corral.v1.Corral"
AUDIT_METHOD = "GRPC"  # the audit log's ``method`` of a gRPC call; ``path``: /SERVICE/RPC


class Call:
    """One RPC as the routes see a request: its context, caller and audit entry."""

    def __init__(self, ctx: Context, context: grpc.ServicerContext, audited: bool) -> None:
        self.ctx = ctx
        self.context = context
        self.audit: dict[str, Any] | None = {"status": 500} if audited else None

    def note(self, **fields: Any) -> None:
        """Record facts for the audit entry (as ``server.audit.note`` does over REST)."""
        if self.audit is not None:
            self.audit.update(fields)

    def secret(self) -> str | None:
        """The bearer token of the ``authorization`` metadata (as FastAPI's HTTPBearer
        reads the header: any other scheme is no token)."""
        for key, value in self.context.invocation_metadata() or ():
            if key == "authorization" and isinstance(value, str):
                scheme, _, credentials = value.strip().partition(" ")
                if scheme.lower() == "bearer" and credentials.strip():
                    return credentials.strip()
        return None

    def any_token(self) -> TokenRow:
        """``deps.any_token``: any live API token (a job token is refused)."""
        secret = self.secret()
        if secret and secret.startswith(JOB_TOKEN_PREFIX):
            raise PermissionDeniedError(
                "a job token can only report its job's checkpoints, read its logs and run its steps"
            )
        service = TokenService(self.ctx)
        row = service.cached(secret) or service.verify(secret)
        self.note(user=row.user, role=row.role, token_id=row.id)
        return row

    def user(self) -> TokenRow:
        """``deps.user``: a user or admin token."""
        token = self.any_token()
        if token.role not in ("admin", "user"):
            raise PermissionDeniedError(f"a {token.role} token cannot use this endpoint")
        return token

    def admin(self) -> TokenRow:
        """``deps.admin``: an admin token."""
        token = self.any_token()
        if token.role != "admin":
            raise PermissionDeniedError("this needs an admin token")
        return token

    def job_caller(self, job_id: int) -> tuple[int, TokenRow | None]:
        """``deps.job_caller``: the job's own token, or a user or admin token."""
        secret = self.secret()
        if secret and secret.startswith(JOB_TOKEN_PREFIX):
            ids = parse_job_token(self.ctx.job_key, secret)
            if ids is None:
                raise AuthenticationError("invalid job token")
            if ids[0] != job_id:
                raise PermissionDeniedError(f"this job token belongs to job {ids[0]}, not {job_id}")
            self.note(user=f"job:{job_id}", role="job", token_id=None)
            return ids[1], None
        return -1, self.user()


def request_fields(request: Message) -> dict[str, Any]:
    """A request's fields, without the absent optional ones (their defaults apply)."""
    return {k: v for k, v in to_dict(request).items() if v is not None}


def check(model: type[M], fields: dict[str, Any], where: tuple[str, ...] = ()) -> M:
    """``model`` from a request's fields, refused with the message REST gives for the
    same bad query or path value (``where``: a prefix of each error's location)."""
    try:
        return model.model_validate(fields)
    except PydanticValidationError as exc:
        errors = [{**e, "loc": (*where, *e["loc"])} for e in exc.errors()]
        raise ValidationError(describe_request_errors(RequestValidationError(errors))) from None


def as_corral_error(exc: BaseException) -> CorralError | None:
    """The error REST answers for ``exc`` (``server/errors.py``); None: a server bug."""
    if isinstance(exc, CorralError):
        return exc
    if isinstance(exc, OverflowError):
        return ValidationError(f"a number is too large: {exc}")
    if isinstance(exc, DataError):
        text = str(exc.orig or exc)
        reason = text.splitlines()[0] if text else "refused"
        return ValidationError(f"a value was refused by the database: {reason}")
    if isinstance(exc, DBAPIError) and transient(exc):
        log.warning("database unavailable: %s", str(exc.orig or exc).splitlines()[0])
        return UnavailableError("the database is unavailable; nothing was changed, try again")
    return None


def answer_error(context: grpc.ServicerContext, exc: Exception, method: str) -> CorralError:
    """The error to answer for ``exc``, with Corral's code (and a limit's retry-after) set
    as trailing metadata; the caller aborts with it (``abort``)."""
    error = as_corral_error(exc)
    if error is None:
        log.error("gRPC %s failed", method, exc_info=exc)
        error = CorralError("internal server error")
    metadata = [(CODE_KEY, error.code)]
    if isinstance(error, LimitExceededError) and error.retry_after is not None:
        metadata.append((RETRY_AFTER_KEY, str(max(1, math.ceil(error.retry_after)))))
    context.set_trailing_metadata(tuple(metadata))
    return error


def _queue_audit(ctx: Context, call: Call, method: str) -> None:
    entry = call.audit
    if entry is None:
        return
    target = entry.get("target")
    ctx.audit.put(
        {
            "at": ctx.clock(),
            "user": entry.get("user"),
            "role": entry.get("role"),
            "token_id": entry.get("token_id"),
            "method": AUDIT_METHOD,
            "path": f"/{SERVICE}/{method}",
            "target": None if target is None else str(target).replace("\0", "\\x00")[:253],
            "status": entry["status"],
        }
    )


Handler = Callable[..., Any]


def unary(audited: bool = False, status: int = 200) -> Callable[[Handler], Handler]:
    """An RPC answering one message: ``handler(self, request, call)``. Errors become
    status codes; a state-changing (``audited``) call is written to the audit log."""

    def wrap(handler: Handler) -> Handler:
        method = handler.__name__

        @functools.wraps(handler)
        def rpc(self: Any, request: Any, context: grpc.ServicerContext) -> Any:
            call = Call(self.ctx, context, audited)
            try:
                answer = handler(self, request, call)
                if call.audit is not None:
                    call.audit["status"] = call.audit.get("answered", status)
                return answer
            except Exception as exc:  # noqa: BLE001 -- every failure is answered
                error = answer_error(context, exc, method)
                if call.audit is not None:
                    call.audit["status"] = error.status_code
                context.abort(status_of(error), error.message)  # raises
            finally:
                _queue_audit(self.ctx, call, method)

        return rpc

    return wrap


def stream(handler: Handler) -> Handler:
    """A server-streaming RPC: ``handler(self, request, call)`` yields the messages."""
    method = handler.__name__

    @functools.wraps(handler)
    def rpc(self: Any, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        call = Call(self.ctx, context, audited=False)
        try:
            with self.streams.slot():
                yield from handler(self, request, call)
        except Exception as exc:  # noqa: BLE001 -- every failure is answered
            error = answer_error(context, exc, method)
            context.abort(status_of(error), error.message)  # raises

    return rpc
