"""Map Corral's errors (and request validation) to JSON HTTP responses, in one place."""

from __future__ import annotations

import logging
import math

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DataError, DBAPIError, InterfaceError, OperationalError
from starlette.exceptions import HTTPException

from corral.errors import CorralError, LimitExceededError, UnavailableError, ValidationError

log = logging.getLogger("corral.server")


def _body(code: str, message: str) -> dict[str, str]:
    return {"code": code, "message": message}


def describe_request_errors(exc: RequestValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = [str(p) for p in err.get("loc", ()) if p not in ("body", "query", "path")]
        msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        if err.get("type") == "extra_forbidden":
            msg = "unknown field"
        parts.append(f"{'.'.join(loc) or 'body'}: {msg}")
    return "; ".join(parts)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(CorralError)
    async def _corral(_request: Request, exc: CorralError) -> JSONResponse:
        headers = None
        if isinstance(exc, LimitExceededError) and exc.retry_after is not None:
            headers = {"Retry-After": str(max(1, math.ceil(exc.retry_after)))}
        return JSONResponse(
            _body(exc.code, exc.message), status_code=exc.status_code, headers=headers
        )

    @app.exception_handler(HTTPException)
    async def _http(_request: Request, exc: HTTPException) -> JSONResponse:
        """Framework refusals (unreadable body, unknown path, wrong method) in our shape."""
        code = {400: "invalid", 404: "not_found", 405: "method_not_allowed"}.get(
            exc.status_code, "http_error"
        )
        return JSONResponse(
            _body(code, str(exc.detail)), status_code=exc.status_code, headers=exc.headers
        )

    @app.exception_handler(OverflowError)
    async def _overflow(_request: Request, exc: OverflowError) -> JSONResponse:
        """A number past what the database stores (a safety net behind schema bounds)."""
        return JSONResponse(
            _body(ValidationError.code, f"a number is too large: {exc}"),
            status_code=ValidationError.status_code,
        )

    @app.exception_handler(DataError)
    async def _data(_request: Request, exc: DataError) -> JSONResponse:
        """A value the database refuses (PostgreSQL: a NUL character in a string, a string
        longer than its column): the caller's input, so a 422 that says so."""
        reason = str(exc.orig or exc).splitlines()[0] if str(exc.orig or exc) else "refused"
        error = ValidationError(f"a value was refused by the database: {reason}")
        return JSONResponse(_body(error.code, error.message), status_code=error.status_code)

    @app.exception_handler(DBAPIError)
    async def _database(_request: Request, exc: DBAPIError) -> JSONResponse:
        """The database is down, restarting, or aborted the transaction (a deadlock, a
        serialization failure, SQLite busy): nothing was committed, so retrying is safe."""
        if not transient(exc):
            raise exc
        log.warning("database unavailable: %s", str(exc.orig or exc).splitlines()[0])
        error = UnavailableError("the database is unavailable; nothing was changed, try again")
        return JSONResponse(_body(error.code, error.message), status_code=error.status_code)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(
            _body(ValidationError.code, describe_request_errors(exc)),
            status_code=ValidationError.status_code,
        )


def transient(exc: DBAPIError) -> bool:
    """A failure of the connection or of this transaction's luck, not of the statement:
    operational errors (lost connection, server shutting down, lock timeouts, deadlocks,
    serialization failures) and invalidated connections. SQLite also reports a statement
    that does not fit the schema (``no such column``) as operational: not transient."""
    if exc.connection_invalidated:
        return True
    if not isinstance(exc, OperationalError | InterfaceError):
        return False
    message = str(exc.orig or "")
    return not message.startswith(_SQLITE_STATEMENT_ERRORS)


_SQLITE_STATEMENT_ERRORS = ("no such ", "syntax error", "near ", "table ", "index ")
