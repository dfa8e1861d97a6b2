from __future__ import annotations

from fastapi import APIRouter, Depends, Query

from corral.schemas.api import AdviceOut, CheckpointIn, JobList, JobOut, LogOut
from corral.schemas.manifest import JobManifest
from corral.server.context import Context
from corral.server.db.models import TokenRow
from corral.server.deps import context, user
from corral.server.services.advice import job_advice
from corral.server.services.jobs import JobService

router = APIRouter(prefix="/jobs", tags=["jobs"])


@router.post("", status_code=201, response_model=JobOut)
def submit(
    manifest: JobManifest, ctx: Context = Depends(context), token: TokenRow = Depends(user)
) -> JobOut:
    """Submit a job (the manifest of SPEC section 2). Refused if it can never fit."""
    return JobService(ctx).submit(manifest, token.user)


@router.get("", response_model=JobList)
def list_jobs(
    all: bool = Query(False, description="include ended jobs"),
    queue: str | None = None,
    state: str | None = None,
    limit: int = Query(1000, ge=1, le=100_000),
    ctx: Context = Depends(context),
    _: TokenRow = Depends(user),
) -> JobList:
    return JobList(jobs=JobService(ctx).list(all, queue, state, limit))


@router.get("/{job_id}", response_model=JobOut)
def get_job(job_id: int, ctx: Context = Depends(context), _: TokenRow = Depends(user)) -> JobOut:
    return JobService(ctx).get(job_id)


@router.get("/{job_id}/advice", response_model=AdviceOut)
def advice(job_id: int, ctx: Context = Depends(context), _: TokenRow = Depends(user)) -> AdviceOut:
    """What would let a pending job start sooner, from the cluster's state now."""
    return job_advice(ctx, job_id)


@router.post("/{job_id}/cancel", response_model=JobOut)
def cancel(job_id: int, ctx: Context = Depends(context), _: TokenRow = Depends(user)) -> JobOut:
    return JobService(ctx).cancel(job_id)


@router.post("/{job_id}/preempt", response_model=JobOut)
def preempt(job_id: int, ctx: Context = Depends(context), _: TokenRow = Depends(user)) -> JobOut:
    return JobService(ctx).preempt(job_id)


@router.post("/{job_id}/checkpoint", response_model=JobOut)
def checkpoint(
    job_id: int,
    body: CheckpointIn,
    ctx: Context = Depends(context),
    _: TokenRow = Depends(user),
) -> JobOut:
    return JobService(ctx).checkpoint(job_id, body.step, body.path)


@router.get("/{job_id}/logs", response_model=LogOut)
def logs(
    job_id: int,
    task: int = Query(0, ge=0),
    attempt: int | None = Query(None, ge=0),
    offset: int = Query(0, ge=0),
    ctx: Context = Depends(context),
    _: TokenRow = Depends(user),
) -> LogOut:
    return JobService(ctx).logs(job_id, task, attempt, offset)
