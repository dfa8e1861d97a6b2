"""Between the REST JSON bodies and the ``corral.v1`` messages, and between Corral's
errors and gRPC status codes: shared by the server (``server/grpc_api``) and the client
(``client/grpc_transport.py``), so that both transports carry the same values.

A message field is named as the JSON key it stands for (``schemas/api.py``); a proto3
``optional`` field absent means JSON ``null``; a job's ``manifest`` travels as JSON text;
a ``google.protobuf.Value`` field is the JSON value itself (a step's ``command``).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from typing import Any, TypeVar

import grpc
from google.protobuf import json_format
from google.protobuf.message import Message

from corral.errors import (
    ERRORS_BY_CODE,
    AuthenticationError,
    ConflictError,
    ConnectionFailedError,
    CorralError,
    LimitExceededError,
    NotFoundError,
    PayloadTooLargeError,
    PermissionDeniedError,
    UnavailableError,
    ValidationError,
)

M = TypeVar("M", bound=Message)
CODE_KEY = "corral-code"  # trailing metadata: the REST body's ``code``
RETRY_AFTER_KEY = "retry-after"  # trailing metadata of RESOURCE_EXHAUSTED: seconds
JSON_TEXT_FIELDS = {"Job": "manifest"}  # message: its dict that travels as JSON text
JSON_VALUE = "google.protobuf.Value"  # any JSON value (a step's command: a list or a string)

# Most specific first: the first class an error is an instance of decides.
STATUS_OF: tuple[tuple[type[CorralError], grpc.StatusCode], ...] = (
    (ValidationError, grpc.StatusCode.INVALID_ARGUMENT),
    (NotFoundError, grpc.StatusCode.NOT_FOUND),
    (AuthenticationError, grpc.StatusCode.UNAUTHENTICATED),
    (PermissionDeniedError, grpc.StatusCode.PERMISSION_DENIED),
    (ConflictError, grpc.StatusCode.FAILED_PRECONDITION),
    (LimitExceededError, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (PayloadTooLargeError, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (UnavailableError, grpc.StatusCode.UNAVAILABLE),
    (ConnectionFailedError, grpc.StatusCode.UNAVAILABLE),
)
# A status without Corral's code (from a proxy, or grpc itself) maps back to these.
ERROR_OF_STATUS: dict[grpc.StatusCode, type[CorralError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: ValidationError,
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.UNAUTHENTICATED: AuthenticationError,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDeniedError,
    grpc.StatusCode.FAILED_PRECONDITION: ConflictError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: LimitExceededError,
    grpc.StatusCode.UNAVAILABLE: UnavailableError,
}


def status_of(error: CorralError) -> grpc.StatusCode:
    """The gRPC status code that stands for ``error`` (INTERNAL for the rest)."""
    for cls, code in STATUS_OF:
        if isinstance(error, cls):
            return code
    return grpc.StatusCode.INTERNAL


def error_of(code: grpc.StatusCode, message: str, metadata: Mapping[str, str]) -> CorralError:
    """The ``CorralError`` a failed call stands for: by Corral's code when the server sent
    it (the same class the REST client raises), else by the status code."""
    cls = ERRORS_BY_CODE.get(metadata.get(CODE_KEY, ""), ERROR_OF_STATUS.get(code, CorralError))
    error = cls(message)
    if isinstance(error, LimitExceededError) and RETRY_AFTER_KEY in metadata:
        with contextlib.suppress(ValueError):
            error.retry_after = float(metadata[RETRY_AFTER_KEY])
    return error


def to_message(data: Mapping[str, Any], message: type[M]) -> M:
    """A message from a REST JSON body (``model.model_dump(mode="json")``); keys the
    message does not have are left out (``tests/unit/test_grpc_convert.py`` checks that
    there are none)."""
    plain = dict(data)
    key = JSON_TEXT_FIELDS.get(message.DESCRIPTOR.name)
    if key is not None and not isinstance(plain.get(key, ""), str):
        plain[key] = json.dumps(plain[key])
    return json_format.ParseDict(plain, message(), ignore_unknown_fields=True)


def to_dict(message: Message) -> dict[str, Any]:
    """The REST JSON body a message stands for: every field, ``None`` for an absent
    ``optional`` one, int64 as ``int`` (not JSON's strings), JSON-text fields parsed."""
    out: dict[str, Any] = {}
    text_field = JSON_TEXT_FIELDS.get(message.DESCRIPTOR.name)
    for field in message.DESCRIPTOR.fields:
        value = getattr(message, field.name)
        kind = field.message_type
        if kind is not None and kind.GetOptions().map_entry:
            nested = kind.fields_by_name["value"].message_type is not None
            out[field.name] = {k: to_dict(v) if nested else v for k, v in value.items()}
        elif field.is_repeated:
            out[field.name] = [to_dict(v) for v in value] if kind is not None else list(value)
        elif field.has_presence and not message.HasField(field.name):
            out[field.name] = None
        elif kind is not None and kind.full_name == JSON_VALUE:
            out[field.name] = json_format.MessageToDict(value)
        elif kind is not None:
            out[field.name] = to_dict(value)
        elif field.name == text_field:
            out[field.name] = json.loads(value) if value else {}
        else:
            out[field.name] = value
    return out
