"""Job steps: a running job starts processes on its own nodes. Callable with the job's own
``CORRAL_JOB_TOKEN`` (its current attempt only) or with its owner's (or an admin's) token;
other users' jobs are answered as not found."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Request

from corral.schemas.steps import StepIn, StepList, StepOut
from corral.server.audit import note
from corral.server.context import Context
from corral.server.db.models import TokenRow
from corral.server.deps import context, job_caller, owner_of
from corral.server.openapi import AUTH, errors
from corral.server.services.jobs import JobService
from corral.server.services.steps import MAX_STEPS, StepService

router = APIRouter(prefix="/jobs", tags=["steps"])
MAX_INT = 2**63 - 1
JobId = Annotated[int, Path(ge=1, le=MAX_INT, description="the job's id")]
StepNumber = Annotated[int, Path(ge=1, le=2**31 - 1, description="the step's number")]
Attempt = Annotated[
    int | None,
    Query(ge=0, le=2**31 - 1, description="the attempt (default: the current one)"),
]
Caller = tuple[int, TokenRow | None]


def step_caller(
    job_id: JobId, ctx: Context = Depends(context), caller: Caller = Depends(job_caller)
) -> Caller:
    """The caller, once allowed to act on the job's steps: a job token of the job's current
    attempt, or a token of the job's owner or an admin (others: not found). A dependency, so
    that it answers before the body is validated."""
    attempt, token = caller
    if token is None:
        StepService(ctx).check_current(job_id, attempt)
    else:
        JobService(ctx).owner_check(job_id, owner_of(token))
    return caller


def _attempt(caller: Caller, asked: int | None) -> int | None:
    """The attempt to act on: a job token's own (it may name no other), else ``asked``."""
    attempt, token = caller
    return attempt if token is None else asked


@router.post(
    "/{job_id}/steps",
    status_code=201,
    response_model=StepOut,
    responses=errors(*AUTH, 400, 404, 409, 413, 422, 429),
)
def create_step(
    job_id: JobId,
    body: StepIn,
    request: Request,
    ctx: Context = Depends(context),
    caller: Caller = Depends(step_caller),
) -> StepOut:
    """Start a step: ``tasks_per_node`` processes on each of ``nodes`` (default: every node
    where the job still runs a task), as the job's tasks run there. Only while the job
    runs; at most 10,000 steps per attempt."""
    _, token = caller
    who = token.user if token is not None else f"job:{job_id}"
    step = StepService(ctx).create(job_id, body, who, _attempt(caller, None))
    note(request, target=f"{job_id}.{step.step}")
    return step


@router.get("/{job_id}/steps", response_model=StepList, responses=errors(*AUTH, 404, 422))
def list_steps(
    job_id: JobId,
    attempt: Attempt = None,
    limit: int = Query(1000, ge=1, le=MAX_STEPS, description="the latest this many"),
    ctx: Context = Depends(context),
    caller: Caller = Depends(step_caller),
) -> StepList:
    """The steps of an attempt (default: the current one), oldest first."""
    return StepList(steps=StepService(ctx).list(job_id, _attempt(caller, attempt), limit))


@router.get("/{job_id}/steps/{step}", response_model=StepOut, responses=errors(*AUTH, 404, 422))
def get_step(
    job_id: JobId,
    step: StepNumber,
    attempt: Attempt = None,
    ctx: Context = Depends(context),
    caller: Caller = Depends(step_caller),
) -> StepOut:
    """One step: the state, exit code and reason of each of its tasks."""
    return StepService(ctx).get(job_id, step, _attempt(caller, attempt))


@router.post(
    "/{job_id}/steps/{step}/cancel",
    response_model=StepOut,
    responses=errors(*AUTH, 404, 413, 422),
)
def cancel_step(
    job_id: JobId,
    step: StepNumber,
    attempt: Attempt = None,
    ctx: Context = Depends(context),
    caller: Caller = Depends(step_caller),
) -> StepOut:
    """Stop the step's tasks: SIGTERM, then SIGKILL after the job's grace period."""
    return StepService(ctx).cancel(job_id, step, _attempt(caller, attempt))
