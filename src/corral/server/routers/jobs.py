"""Jobs: users see and act on their own jobs only (admins on all); other users' jobs are
answered as not found.

The routes a user calls take a job's name (``JobRef``): its id, or ``ARRAYID_INDEX`` for
an element of a job array (``12_3``). Cancel, hold and release by an array's id act on
every element of it, as Slurm's ``scancel 12`` does. The routes a job calls itself
(checkpoint, logs, steps) take its id."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Header, Path, Query, Request, Response

from corral.errors import PermissionDeniedError
from corral.schemas.api import MAX_JOB_PAGE, AdviceOut, CheckpointIn, JobList, JobOut, LogOut
from corral.schemas.common import SafeStr
from corral.schemas.manifest import JobManifest
from corral.server.audit import note
from corral.server.context import Context
from corral.server.db.models import TokenRow
from corral.server.deps import context, job_caller, owner_of, user
from corral.server.openapi import AUTH, errors
from corral.server.services.advice import job_advice
from corral.server.services.jobs import JobService

router = APIRouter(prefix="/jobs", tags=["jobs"])
MAX_INT = 2**63 - 1  # what the database stores
JobId = Annotated[int, Path(ge=1, le=MAX_INT, description="the job's id")]
JobRef = Annotated[
    str,
    Path(
        pattern=r"^[0-9]{1,19}(_[0-9]{1,9})?$",
        description="the job's id, or ARRAYID_INDEX for an element of a job array (12_3)",
    ),
]
IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        min_length=1,
        max_length=255,
        description="a retried POST with the same key returns the same job",
    ),
]


def _own(ctx: Context, job_id: JobId, token: TokenRow) -> JobService:
    service = JobService(ctx)
    service.owner_check(job_id, owner_of(token))
    return service


def _named(ctx: Context, ref: str, token: TokenRow) -> tuple[JobService, int]:
    """The service and the job id for a job named by the caller (theirs, or an admin)."""
    service = JobService(ctx)
    job_id = service.resolve(ref)
    service.owner_check(job_id, owner_of(token))
    return service, job_id


def _as_job(ctx: Context, job_id: int, caller: tuple[int, TokenRow | None]) -> JobService:
    """The service for a route the job calls itself: with its own job token only for its
    current attempt, else for its owner or an admin."""
    attempt, token = caller
    if token is not None:
        return _own(ctx, job_id, token)
    service = JobService(ctx)
    current = service.current_attempt(job_id)
    if attempt != current:
        raise PermissionDeniedError(
            f"this job token is for attempt {attempt} of job {job_id}; "
            f"its current attempt is {current}"
        )
    return service


@router.post(
    "",
    status_code=201,
    response_model=JobOut,
    responses={
        200: {"model": JobOut, "description": "A replayed `Idempotency-Key`: the job it created."},
        **errors(*AUTH, 400, 409, 413, 422, 429),
    },
)
async def submit_job(
    manifest: JobManifest,
    request: Request,
    response: Response,
    idempotency_key: IdempotencyKey = None,
    ctx: Context = Depends(context),
    token: TokenRow = Depends(user),
) -> JobOut:
    """Submit a job (the manifest of SPEC section 2). Refused if it can never fit, if the
    queue does not admit the caller, or past a limit. A replayed ``Idempotency-Key``
    answers 200 with the job the first submission created. Stored by the batched writer
    (``services.intake``): the event loop only waits."""
    job, created = await ctx.intake.submit_async(
        manifest,
        token.user,
        admin=token.role == "admin",
        key=idempotency_key,
        unix_user=token.unix_user or token.user,
    )
    note(request, target=job.id)
    if not created:
        response.status_code = 200
    return job


@router.get("", response_model=JobList, responses=errors(*AUTH, 422))
def list_jobs(
    all: bool = Query(False, description="include ended jobs"),
    queue: SafeStr | None = Query(None, max_length=253),
    state: SafeStr | None = Query(None, max_length=16),
    limit: int = Query(1000, ge=1, le=MAX_JOB_PAGE, description="page size: the newest this many"),
    group_arrays: bool = Query(
        False, description="one row per job array (its elements counted by state)"
    ),
    before: int | None = Query(
        None, ge=1, le=MAX_INT, description="the cursor: only jobs (arrays) with a lower id"
    ),
    count: bool = Query(False, description="also count the older matching rows (remaining)"),
    ctx: Context = Depends(context),
    token: TokenRow = Depends(user),
) -> JobList:
    """The caller's jobs (an admin's: everyone's), one row per job; with ``group_arrays``,
    one row per job array (``ArrayOut`` in ``array``) instead of one per element.

    A page: the newest ``limit`` rows below ``before``, oldest first. While ``has_more``,
    pass ``next`` as ``before`` for the next (older) page; new jobs never shift a page."""
    service = JobService(ctx)
    owner = owner_of(token)
    return service.page(all, queue, state, limit, owner, group_arrays, before, count)


@router.get("/{job_id}", response_model=JobOut, responses=errors(*AUTH, 404, 422))
def get_job(
    job_id: JobRef, ctx: Context = Depends(context), token: TokenRow = Depends(user)
) -> JobOut:
    """One job (an element of an array: with the array's summary in ``array``)."""
    service, number = _named(ctx, job_id, token)
    return service.get(number)


@router.get("/{job_id}/advice", response_model=AdviceOut, responses=errors(*AUTH, 404, 422))
def get_job_advice(
    job_id: JobRef, ctx: Context = Depends(context), token: TokenRow = Depends(user)
) -> AdviceOut:
    """What would let a pending job start sooner, from the cluster's state now."""
    _, number = _named(ctx, job_id, token)
    return job_advice(ctx, number)


@router.post("/{job_id}/cancel", response_model=JobOut, responses=errors(*AUTH, 404, 409, 413, 422))
def cancel_job(
    job_id: JobRef, ctx: Context = Depends(context), token: TokenRow = Depends(user)
) -> JobOut:
    """Cancel a job; an array's id cancels every element not ended yet."""
    service, number = _named(ctx, job_id, token)
    return service.act(job_id, number, "cancel")


@router.post("/{job_id}/hold", response_model=JobOut, responses=errors(*AUTH, 404, 409, 413, 422))
def hold_job(
    job_id: JobRef, ctx: Context = Depends(context), token: TokenRow = Depends(user)
) -> JobOut:
    """Keep a pending job from being scheduled (reason ``held``) until released; an
    array's id holds every pending element."""
    service, number = _named(ctx, job_id, token)
    return service.act(job_id, number, "hold")


@router.post(
    "/{job_id}/release", response_model=JobOut, responses=errors(*AUTH, 404, 409, 413, 422)
)
def release_job(
    job_id: JobRef, ctx: Context = Depends(context), token: TokenRow = Depends(user)
) -> JobOut:
    """Let a held job be scheduled again; an array's id releases every held element."""
    service, number = _named(ctx, job_id, token)
    return service.act(job_id, number, "release")


@router.post(
    "/{job_id}/preempt", response_model=JobOut, responses=errors(*AUTH, 404, 409, 413, 422)
)
def preempt_job(
    job_id: JobRef, ctx: Context = Depends(context), token: TokenRow = Depends(user)
) -> JobOut:
    service, number = _named(ctx, job_id, token)
    return service.preempt(number)


@router.post(
    "/{job_id}/checkpoint",
    response_model=JobOut,
    responses=errors(*AUTH, 400, 404, 409, 413, 422),
)
def report_checkpoint(
    job_id: JobId,
    body: CheckpointIn,
    ctx: Context = Depends(context),
    caller: tuple[int, TokenRow | None] = Depends(job_caller),
) -> JobOut:
    """The job reports a checkpoint: with its own ``CORRAL_JOB_TOKEN`` (current attempt
    only), or with its owner's (or an admin's) token."""
    return _as_job(ctx, job_id, caller).checkpoint(job_id, body.step, body.path)


@router.get("/{job_id}/logs", response_model=LogOut, responses=errors(*AUTH, 404, 422))
def get_job_logs(
    job_id: JobId,
    task: int = Query(0, ge=0, le=MAX_INT),
    attempt: int | None = Query(None, ge=0, le=MAX_INT),
    offset: int = Query(0, ge=0, le=MAX_INT),
    step: int = Query(0, ge=0, le=2**31 - 1, description="a step's task log (0: the job's)"),
    ctx: Context = Depends(context),
    caller: tuple[int, TokenRow | None] = Depends(job_caller),
) -> LogOut:
    """A task's log; with ``step``, the log of that step's task of rank ``task``. The job's
    own token reads its current attempt's logs (``corral step run`` relays its output)."""
    service = _as_job(ctx, job_id, caller)
    if caller[1] is None:
        attempt = caller[0]
    return service.logs(job_id, task, attempt, offset, step)
