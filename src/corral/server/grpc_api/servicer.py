"""``corral.v1.Corral``: each RPC does what its REST route does, through the same services
and authorization helpers (``server/routers``, ``server/deps.py``), with the same limits
on its inputs (the models below mirror the routes' query and path parameters)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Literal

import yaml
from fastapi import APIRouter
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from google.protobuf.empty_pb2 import Empty
from pydantic import BaseModel, Field
from pydantic import ValidationError as PydanticValidationError

from corral.api.convert import to_message
from corral.api.v1 import corral_pb2 as pb
from corral.api.v1 import corral_pb2_grpc as pb_grpc
from corral.errors import LimitExceededError, PayloadTooLargeError, ValidationError
from corral.schemas.api import MAX_JOB_PAGE, JobOut, NoticeIn, NoticeOut, TokenCreate
from corral.schemas.common import SafeStr
from corral.schemas.manifest import JobManifest
from corral.server.context import Context
from corral.server.deps import owner_of
from corral.server.errors import describe_request_errors
from corral.server.grpc_api.admin_calls import AdminCalls
from corral.server.grpc_api.calls import Call, check, stream, unary
from corral.server.grpc_api.calls import request_fields as _fields
from corral.server.grpc_api.step_calls import StepCalls
from corral.server.routers import cluster as cluster_routes
from corral.server.routers.jobs import _as_job, _named
from corral.server.services.advice import job_advice
from corral.server.services.auth import TokenService
from corral.server.services.events import (
    POLL_SECONDS,
    IdHoles,
    event_page,
    last_event_id,
    next_events,
)
from corral.server.services.jobs import JobService
from corral.server.services.nodes import NodeService
from corral.server.services.notices import give_notice
from corral.server.services.pools import list_pools
from corral.server.services.queues import list_queues

MAX_INT = 2**63 - 1  # what the database stores
LOG_POLL = 0.5  # seconds between reads of a followed log that has not grown


class _JobRef(BaseModel):
    job_id: str = Field(pattern=r"^[0-9]{1,19}(_[0-9]{1,9})?$")


class _JobQuery(BaseModel):
    all: bool = False
    queue: SafeStr | None = Field(None, max_length=253)
    state: SafeStr | None = Field(None, max_length=16)
    limit: int = Field(1000, ge=1, le=MAX_JOB_PAGE)
    group_arrays: bool = False
    before: int | None = Field(None, ge=1, le=MAX_INT)
    count: bool = False


class _LogQuery(BaseModel):
    job_id: int = Field(ge=1, le=MAX_INT)
    task: int = Field(0, ge=0, le=MAX_INT)
    attempt: int | None = Field(None, ge=0, le=MAX_INT)
    offset: int = Field(0, ge=0, le=MAX_INT)
    step: int = Field(0, ge=0, le=2**31 - 1)
    follow: bool = False


class _NodeName(BaseModel):
    name: SafeStr = Field(max_length=253)


class _TokenRef(BaseModel):
    token_id: int = Field(ge=1, le=MAX_INT)


class _EventQuery(BaseModel):
    since_id: int | None = Field(None, ge=0, le=MAX_INT)
    limit: int = Field(100, ge=1, le=10_000)
    entity: Literal["job", "node"] | None = None
    entity_id: SafeStr | None = Field(None, max_length=253)


class _IdempotencyKey(BaseModel):
    key: str | None = Field(None, alias="Idempotency-Key", min_length=1, max_length=255)


def _route(router: APIRouter, path: str) -> Callable[..., Any]:
    """The function of ``router``'s GET route at ``path`` (found by path: route functions
    are named for their OpenAPI operation ids)."""
    for route in router.routes:
        if isinstance(route, APIRoute) and route.path == path and "GET" in route.methods:
            return route.endpoint
    raise LookupError(f"no GET {path} route")


def _job(job: JobOut) -> pb.Job:
    return to_message(job.model_dump(mode="json"), pb.Job)


def _token(token: BaseModel) -> pb.Token:
    return to_message(token.model_dump(mode="json"), pb.Token)


def parse_manifest_text(text: str) -> JobManifest:
    """The manifest of a ``SubmitJob``: JSON text, validated as the REST body is (the same
    messages), or else YAML text."""
    if not text.strip():
        raise ValidationError("body: Field required")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError:
            raise ValidationError(f"{exc.pos}: JSON decode error") from None
    try:
        return JobManifest.model_validate(data, from_attributes=True)
    except PydanticValidationError as exc:
        raise ValidationError(
            describe_request_errors(RequestValidationError(exc.errors()))
        ) from None


class StreamSlots:
    """At most ``limit`` open streams: each holds one of the server's threads."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._open = 0
        self._lock = threading.Lock()

    @contextmanager
    def slot(self) -> Iterator[None]:
        with self._lock:
            if self._open >= self.limit:
                raise LimitExceededError(
                    f"{self.limit} streams are open on this server (the most it serves); "
                    "try again later",
                    retry_after=5,
                )
            self._open += 1
        try:
            yield
        finally:
            with self._lock:
                self._open -= 1


class CorralServicer(AdminCalls, StepCalls, pb_grpc.CorralServicer):
    """Every RPC: jobs, logs, the cluster, tokens and events here; telemetry, usage and
    the audit log in ``admin_calls.py``; checkpoints and steps in ``step_calls.py``."""

    def __init__(self, ctx: Context, max_streams: int) -> None:
        self.ctx = ctx
        self.streams = StreamSlots(max_streams)

    # -- jobs --------------------------------------------------------------------

    @unary(audited=True, status=201)
    def SubmitJob(self, request: pb.SubmitJobRequest, call: Call) -> pb.Job:  # noqa: N802
        limit = self.ctx.config.limits.max_request_bytes
        if len(request.manifest.encode()) > limit:
            raise PayloadTooLargeError(f"request body larger than {limit} bytes")
        token = call.user()
        key = request.idempotency_key if request.HasField("idempotency_key") else None
        check(_IdempotencyKey, {"Idempotency-Key": key}, ("header",))
        manifest = parse_manifest_text(request.manifest)
        job, created = self.ctx.intake.submit(
            manifest,
            token.user,
            admin=token.role == "admin",
            key=key,
            unix_user=token.unix_user or token.user,
        )
        call.note(target=job.id, answered=201 if created else 200)
        return _job(job)

    @unary()
    def GetJob(self, request: pb.JobRequest, call: Call) -> pb.Job:  # noqa: N802
        token = call.user()  # as REST: the credential first, then the parameters
        ref = check(_JobRef, _fields(request)).job_id
        service, number = _named(self.ctx, ref, token)
        return _job(service.get(number))

    @unary()
    def ListJobs(self, request: pb.ListJobsRequest, call: Call) -> pb.JobList:  # noqa: N802
        owner = owner_of(call.user())
        query = check(_JobQuery, _fields(request))
        page = JobService(self.ctx).page(
            query.all,
            query.queue,
            query.state,
            query.limit,
            owner,
            query.group_arrays,
            query.before,
            query.count,
        )
        return pb.JobList(
            jobs=[_job(j) for j in page.jobs],
            has_more=page.has_more,
            next=page.next,
            remaining=page.remaining,
        )

    def _act(self, request: pb.JobRequest, call: Call, action: str) -> pb.Job:
        token = call.user()
        call.note(target=request.job_id)
        ref = check(_JobRef, _fields(request)).job_id
        service, number = _named(self.ctx, ref, token)
        if action == "preempt":
            return _job(service.preempt(number))
        return _job(service.act(ref, number, action))

    @unary(audited=True)
    def CancelJob(self, request: pb.JobRequest, call: Call) -> pb.Job:  # noqa: N802
        return self._act(request, call, "cancel")

    @unary(audited=True)
    def PreemptJob(self, request: pb.JobRequest, call: Call) -> pb.Job:  # noqa: N802
        return self._act(request, call, "preempt")

    @unary(audited=True)
    def HoldJob(self, request: pb.JobRequest, call: Call) -> pb.Job:  # noqa: N802
        return self._act(request, call, "hold")

    @unary(audited=True)
    def ReleaseJob(self, request: pb.JobRequest, call: Call) -> pb.Job:  # noqa: N802
        return self._act(request, call, "release")

    @unary()
    def GetJobAdvice(self, request: pb.JobRequest, call: Call) -> pb.Advice:  # noqa: N802
        token = call.user()
        ref = check(_JobRef, _fields(request)).job_id
        _, number = _named(self.ctx, ref, token)
        return pb.Advice(hints=job_advice(self.ctx, number).hints)

    # -- logs --------------------------------------------------------------------

    def _log_reader(self, request: pb.LogsRequest, call: Call) -> tuple[JobService, _LogQuery]:
        query = check(_LogQuery, _fields(request))
        caller = call.job_caller(query.job_id)
        service = _as_job(self.ctx, query.job_id, caller)
        if caller[1] is None:
            query.attempt = caller[0]  # a job token reads its current attempt
        return service, query

    @unary()
    def GetLogs(self, request: pb.LogsRequest, call: Call) -> pb.LogChunk:  # noqa: N802
        service, q = self._log_reader(request, call)
        chunk = service.logs(q.job_id, q.task, q.attempt, q.offset, q.step)
        return to_message(chunk.model_dump(mode="json"), pb.LogChunk)

    @stream
    def StreamLogs(self, request: pb.LogsRequest, call: Call) -> Iterator[pb.LogChunk]:  # noqa: N802
        """Every piece with data; the last piece sent says where it stopped (``offset``)
        and whether the task's log is ``complete``."""
        service, q = self._log_reader(request, call)
        offset, attempt = q.offset, q.attempt
        while call.context.is_active() and not self.ctx.watch.closed:
            chunk = service.logs(q.job_id, q.task, attempt, offset, q.step)
            moved = chunk.offset > offset
            offset, attempt = chunk.offset, chunk.attempt
            ending = chunk.complete or (not moved and not q.follow)
            if chunk.data or ending:
                yield to_message(chunk.model_dump(mode="json"), pb.LogChunk)
            if ending:
                return
            if not moved:
                time.sleep(LOG_POLL)

    # -- cluster -----------------------------------------------------------------

    @unary()
    def ListNodes(self, request: Empty, call: Call) -> pb.NodeList:  # noqa: N802
        found = NodeService(self.ctx).list(owner_of(call.user()))
        return pb.NodeList(nodes=[to_message(n.model_dump(mode="json"), pb.Node) for n in found])

    @unary()
    def GetNode(self, request: pb.NodeRequest, call: Call) -> pb.Node:  # noqa: N802
        owner = owner_of(call.user())
        name = check(_NodeName, _fields(request)).name
        node = NodeService(self.ctx).get(name, owner)
        return to_message(node.model_dump(mode="json"), pb.Node)

    def _drain(self, request: pb.NodeRequest, call: Call, draining: bool) -> pb.Node:
        call.note(target=request.name)  # as REST's: the path's, whatever the outcome
        call.admin()
        name = check(_NodeName, _fields(request)).name
        node = NodeService(self.ctx).set_draining(name, draining)
        return to_message(node.model_dump(mode="json"), pb.Node)

    @unary(audited=True)
    def DrainNode(self, request: pb.NodeRequest, call: Call) -> pb.Node:  # noqa: N802
        return self._drain(request, call, True)

    @unary(audited=True)
    def UndrainNode(self, request: pb.NodeRequest, call: Call) -> pb.Node:  # noqa: N802
        return self._drain(request, call, False)

    @unary(audited=True)
    def NoticeNode(self, request: pb.NoticeRequest, call: Call) -> pb.Notice:  # noqa: N802
        call.note(target=request.name)  # as REST's: the path's, whatever the outcome
        call.admin()
        name = check(_NodeName, {"name": request.name}).name
        fields = _fields(request)
        fields.pop("name")
        body = check(NoticeIn, fields, ("body",))
        leave_at = self.ctx.clock() + body.deadline
        notice = NoticeOut(nodes=give_notice(self.ctx, name, body.deadline), leave_at=leave_at)
        return to_message(notice.model_dump(mode="json"), pb.Notice)

    @unary(audited=True)
    def ResetNode(self, request: pb.NodeRequest, call: Call) -> pb.Node:  # noqa: N802
        call.note(target=request.name)  # as REST's: the path's, whatever the outcome
        call.admin()
        name = check(_NodeName, _fields(request)).name
        node = NodeService(self.ctx).reset(name)
        return to_message(node.model_dump(mode="json"), pb.Node)

    @unary()
    def ListQueues(self, request: Empty, call: Call) -> pb.QueueList:  # noqa: N802
        call.user()
        found = list_queues(self.ctx)
        return pb.QueueList(queues=[to_message(q.model_dump(mode="json"), pb.Queue) for q in found])

    @unary()
    def ListPools(self, request: Empty, call: Call) -> pb.PoolList:  # noqa: N802
        call.user()
        found = list_pools(self.ctx)
        return pb.PoolList(pools=[to_message(p.model_dump(mode="json"), pb.Pool) for p in found])

    # -- tokens ------------------------------------------------------------------

    @unary(audited=True, status=201)
    def CreateToken(self, request: pb.CreateTokenRequest, call: Call) -> pb.Token:  # noqa: N802
        call.admin()
        body = check(TokenCreate, _fields(request), ("body",))
        row, secret = TokenService(self.ctx).create(body.user, body.role, unix_user=body.unix_user)
        call.note(target=row.id)
        return _token(cluster_routes._token_out(row, secret))

    @unary()
    def ListTokens(self, request: Empty, call: Call) -> pb.TokenList:  # noqa: N802
        token = call.user()
        owner = None if token.role == "admin" else token.user
        rows = TokenService(self.ctx).list(owner)
        return pb.TokenList(tokens=[_token(cluster_routes._token_out(r)) for r in rows])

    @unary(audited=True)
    def RevokeToken(self, request: pb.TokenRequest, call: Call) -> pb.Token:  # noqa: N802
        call.note(target=request.token_id)
        token = call.user()
        token_id = check(_TokenRef, _fields(request)).token_id
        owner = None if token.role == "admin" else token.user
        return _token(cluster_routes._token_out(TokenService(self.ctx).revoke(token_id, owner)))

    @unary()
    def WhoAmI(self, request: Empty, call: Call) -> pb.WhoAmIResponse:  # noqa: N802
        token = call.any_token()
        return pb.WhoAmIResponse(
            user=token.user, role=token.role, token_id=token.id, node=token.node
        )

    @unary()
    def Health(self, request: Empty, call: Call) -> pb.HealthResponse:  # noqa: N802
        answer = _route(cluster_routes.router, "/health")(self.ctx)
        return to_message(answer.model_dump(mode="json"), pb.HealthResponse)

    # -- events ------------------------------------------------------------------

    @unary()
    def ListEvents(self, request: pb.ListEventsRequest, call: Call) -> pb.EventList:  # noqa: N802
        owner = owner_of(call.user())
        q = check(_EventQuery, _fields(request))
        latest = q.since_id is None
        page = event_page(self.ctx, q.since_id or 0, q.limit, q.entity, q.entity_id, latest, owner)
        return pb.EventList(
            events=[to_message(e.model_dump(mode="json"), pb.Event) for e in page.events],
            has_more=page.has_more,
        )

    @stream
    def WatchEvents(  # noqa: N802
        self, request: pb.WatchEventsRequest, call: Call
    ) -> Iterator[pb.Event]:
        """Every event after ``since_id`` (default: from now on), in id order, none
        twice (``services.events.next_events``, as the REST stream reads them)."""
        owner = owner_of(call.user())
        q = check(_EventQuery, _fields(request))
        last = last_event_id(self.ctx) if q.since_id is None else q.since_id
        holes = IdHoles(self.ctx.settings.event_gap_wait)
        while call.context.is_active() and not self.ctx.watch.closed:
            events, last, more = next_events(self.ctx, last, holes, q.entity, q.entity_id, owner)
            for event in events:
                yield to_message(event.model_dump(mode="json"), pb.Event)
            if not more:
                time.sleep(POLL_SECONDS)
