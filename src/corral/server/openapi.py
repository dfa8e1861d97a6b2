"""What the OpenAPI document says beyond the routes' signatures: the error answers each
route can give (all in the one shape of ``server/errors.py``), stable operation ids and
the event stream's content.

Routers declare their errors with :func:`errors`; ``tests/integration/test_openapi.py``
checks the document against the rules below and against the server's real answers."""

from __future__ import annotations

from typing import Any

from fastapi.routing import APIRoute

from corral.schemas.api import ErrorOut

ERRORS: dict[int, str] = {
    400: "The body is not readable: not UTF-8 (`invalid`).",
    401: "No API token, or an unknown or revoked one; a job token that is not valid "
    "(`unauthenticated`).",
    403: "The token's role does not allow this (a join, node or job token where a user "
    "token is needed, a user token where an admin's is), a node token of another node, a "
    "job token of another job or of an earlier attempt, or a submission the queue or the "
    "server's policy refuses (`forbidden`).",
    404: "No such job, node, token or step, or another user's job (`not_found`).",
    409: "The object's current state does not allow this: a job already ended or not "
    "held, a node lost, an `Idempotency-Key` reused with another manifest (`conflict`).",
    413: "The request body is larger than the server's `limits.max_request_bytes` (`too_large`).",
    422: "Invalid input: the message names each bad field (`invalid`), or a job that can "
    "never fit the cluster (`unschedulable`).",
    429: "Past a limit: submissions too fast, too many pending jobs or steps; retry after "
    "`Retry-After` seconds when given (`limit_exceeded`).",
    503: "The database is unavailable; nothing was changed, retrying is safe (`unavailable`).",
}
"""Every error status a route may declare, with what it means here."""

AUTH = (401, 403, 503)
"""A route behind a token: no or a bad token (401), a token of the wrong kind (403), and
the token's lookup in the database (503)."""

_RETRY_AFTER = {
    "Retry-After": {
        "description": "seconds to wait before retrying (a rate limit)",
        "schema": {"type": "integer", "minimum": 1},
    }
}


def errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    """The ``responses=`` of a route that can answer these error statuses: each one an
    :class:`ErrorOut` with what it means (``ERRORS``)."""
    responses: dict[int | str, dict[str, Any]] = {}
    for code in sorted(set(codes)):
        responses[code] = {"model": ErrorOut, "description": ERRORS[code]}
        if code == 429:
            responses[code]["headers"] = _RETRY_AFTER
    return responses


def operation_id(route: APIRoute) -> str:
    """The operation id of ``route``: its name (its function's) in camelCase,
    ``submit_job`` -> ``submitJob``; it stays the same when the path changes."""
    first, *rest = route.name.split("_")
    return first + "".join(word[:1].upper() + word[1:] for word in rest)


EVENT_FORMAT = """A server-sent-events stream (`text/event-stream`, UTF-8) that does not end.
It opens with `retry: 2000` (reconnect after 2 s); then each job or node transition, in id
order, is one event:

    id: 41
    data: {"id": 41, "at": 1718000000.0, "entity": "job", "entity_id": "12", ...}

`data` is one `EventItem` as JSON. A comment line (`: keep-alive`) comes when nothing
happened for a while. To resume after a disconnection, send the last id seen as the
`Last-Event-ID` header (or `since_id`): the stream replays every event after it."""


def event_stream_response(item: str) -> dict[str, Any]:
    """The ``responses=`` entry of a 200 that is a server-sent-events stream of ``item``
    (a component schema's name) as JSON, one per event (OpenAPI 3.2's ``itemSchema``)."""
    return {
        "description": EVENT_FORMAT,
        "content": {
            "text/event-stream": {
                "itemSchema": {
                    "type": "object",
                    "required": ["id", "data"],
                    "properties": {
                        "id": {"type": "string", "pattern": "^[0-9]+$"},
                        "data": {
                            "type": "string",
                            "contentMediaType": "application/json",
                            "contentSchema": {"$ref": f"#/components/schemas/{item}"},
                        },
                        "event": {"type": "string"},
                        "retry": {"type": "integer", "minimum": 0},
                    },
                }
            }
        },
    }
