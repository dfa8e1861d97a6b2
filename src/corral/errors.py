"""One error hierarchy for Corral.

The server maps each class to an HTTP status in one place (``server/errors.py``) and the SDK
maps the status and ``code`` back into the same class, so callers catch one type whether
they run in-process or over HTTP.
"""

from __future__ import annotations


class CorralError(Exception):
    """Base class: a user-facing error with a one-line message."""

    status_code: int = 500
    code: str = "internal"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ValidationError(CorralError):
    """Bad input: a manifest, a flag or a request body that does not make sense."""

    status_code = 422
    code = "invalid"


class UnschedulableError(ValidationError):
    """A job that can never fit the cluster (refused at submission)."""

    code = "unschedulable"


class NotFoundError(CorralError):
    status_code = 404
    code = "not_found"


class ConflictError(CorralError):
    """The request is valid but the object's current state does not allow it."""

    status_code = 409
    code = "conflict"


class AuthenticationError(CorralError):
    status_code = 401
    code = "unauthenticated"


class PermissionDeniedError(CorralError):
    status_code = 403
    code = "forbidden"


class FencedError(ConflictError):
    """A replica acted on a leader lease that another replica has since taken over."""

    code = "fenced"


class PayloadTooLargeError(CorralError):
    """A request body (a manifest) past the server's ``limits.max_request_bytes``."""

    status_code = 413
    code = "too_large"


class LimitExceededError(CorralError):
    """An abuse limit: too many pending jobs or submissions too fast (retry later)."""

    status_code = 429
    code = "limit_exceeded"

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ConnectionFailedError(CorralError):
    """The client could not reach any server address."""

    status_code = 503
    code = "unreachable"


class UnavailableError(CorralError):
    """The server is up but cannot serve now (its database is unreachable); retry later."""

    status_code = 503
    code = "unavailable"


class TrainError(CorralError):
    """The training runtime (corral.train) cannot do what was asked: bad environment, no torch."""

    code = "train"


ERRORS_BY_CODE: dict[str, type[CorralError]] = {
    cls.code: cls
    for cls in (
        CorralError,
        ValidationError,
        UnschedulableError,
        NotFoundError,
        ConflictError,
        FencedError,
        AuthenticationError,
        PermissionDeniedError,
        PayloadTooLargeError,
        LimitExceededError,
        ConnectionFailedError,
        UnavailableError,
        TrainError,
    )
}
