"""The RPCs a job calls itself, with its own ``CORRAL_JOB_TOKEN`` or its owner's (an
admin's) token: checkpoint reports and job steps, as ``server/routers/jobs.py`` and
``routers/steps.py`` answer them (the same services, checks, messages and audit entries).

As over REST, the job's id is checked first, then the caller, then the other inputs."""

from __future__ import annotations

from typing import Any

from google.protobuf.message import Message
from pydantic import BaseModel, Field

from corral.api.convert import to_message
from corral.api.v1 import corral_pb2 as pb
from corral.errors import PayloadTooLargeError
from corral.schemas.api import CheckpointIn
from corral.schemas.steps import StepIn, StepList, StepOut
from corral.server.context import Context
from corral.server.db.models import TokenRow
from corral.server.grpc_api.calls import Call, check, unary
from corral.server.grpc_api.calls import request_fields as _fields
from corral.server.routers import steps as step_routes
from corral.server.routers.jobs import _as_job
from corral.server.services.steps import MAX_STEPS, StepService

MAX_INT = 2**63 - 1
Caller = tuple[int, TokenRow | None]


class _JobId(BaseModel):
    job_id: int = Field(ge=1, le=MAX_INT)


class _StepsQuery(BaseModel):
    attempt: int | None = Field(None, ge=0, le=2**31 - 1)
    limit: int = Field(1000, ge=1, le=MAX_STEPS)


class _StepRef(BaseModel):
    step: int = Field(ge=1, le=2**31 - 1)
    attempt: int | None = Field(None, ge=0, le=2**31 - 1)


def _step(step: StepOut) -> pb.Step:
    return to_message(step.model_dump(mode="json"), pb.Step)


class StepCalls:
    """``ReportCheckpoint``, ``StartStep``, ``ListSteps``, ``GetStep`` and ``CancelStep``
    (a mixin of ``CorralServicer``)."""

    ctx: Context

    def _limit_body(self, request: Message) -> None:
        """A request past ``limits.max_request_bytes`` is refused, as REST's body is."""
        limit = self.ctx.config.limits.max_request_bytes
        if request.ByteSize() > limit:
            raise PayloadTooLargeError(f"request body larger than {limit} bytes")

    def _caller(self, request: Any, call: Call, steps: bool) -> tuple[int, Caller, dict]:
        """The job's id, the caller (``deps.job_caller``; for steps also
        ``routers.steps.step_caller``) and the request's other fields."""
        fields = _fields(request)
        job_id = check(_JobId, {"job_id": fields.pop("job_id")}).job_id
        caller = call.job_caller(job_id)
        if steps:
            caller = step_routes.step_caller(job_id, self.ctx, caller)
        return job_id, caller, fields

    @unary(audited=True)
    def ReportCheckpoint(self, request: pb.CheckpointRequest, call: Call) -> pb.Job:  # noqa: N802
        self._limit_body(request)
        call.note(target=request.job_id)  # as REST's: the path's, whatever the outcome
        job_id, caller, fields = self._caller(request, call, steps=False)
        body = check(CheckpointIn, fields, ("body",))
        job = _as_job(self.ctx, job_id, caller).checkpoint(job_id, body.step, body.path)
        return to_message(job.model_dump(mode="json"), pb.Job)

    @unary(audited=True, status=201)
    def StartStep(self, request: pb.StartStepRequest, call: Call) -> pb.Step:  # noqa: N802
        self._limit_body(request)
        call.note(target=request.job_id)
        job_id, caller, fields = self._caller(request, call, steps=True)
        if not fields.get("nodes"):
            fields.pop("nodes", None)  # none named: every node of the job
        body = check(StepIn, fields, ("body",))
        _, token = caller
        who = token.user if token is not None else f"job:{job_id}"
        step = StepService(self.ctx).create(job_id, body, who, step_routes._attempt(caller, None))
        call.note(target=f"{job_id}.{step.step}")
        return _step(step)

    @unary()
    def ListSteps(self, request: pb.ListStepsRequest, call: Call) -> pb.StepList:  # noqa: N802
        job_id, caller, fields = self._caller(request, call, steps=True)
        q = check(_StepsQuery, fields)
        attempt = step_routes._attempt(caller, q.attempt)
        found = StepList(steps=StepService(self.ctx).list(job_id, attempt, q.limit))
        return to_message(found.model_dump(mode="json"), pb.StepList)

    @unary()
    def GetStep(self, request: pb.StepRequest, call: Call) -> pb.Step:  # noqa: N802
        job_id, caller, fields = self._caller(request, call, steps=True)
        q = check(_StepRef, fields)
        attempt = step_routes._attempt(caller, q.attempt)
        return _step(StepService(self.ctx).get(job_id, q.step, attempt))

    @unary(audited=True)
    def CancelStep(self, request: pb.StepRequest, call: Call) -> pb.Step:  # noqa: N802
        call.note(target=request.job_id)
        job_id, caller, fields = self._caller(request, call, steps=True)
        q = check(_StepRef, fields)
        attempt = step_routes._attempt(caller, q.attempt)
        return _step(StepService(self.ctx).cancel(job_id, q.step, attempt))
