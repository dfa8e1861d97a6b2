"""GPU telemetry, accounting and Prometheus metrics."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Path, Query
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST

from corral.schemas.api import TelemetryOut, UsageOut
from corral.schemas.common import SafeStr
from corral.server.context import Context
from corral.server.db.models import TokenRow
from corral.server.deps import context, owner_of, user
from corral.server.openapi import AUTH, errors
from corral.server.services.jobs import JobService
from corral.server.services.nodes import NodeService
from corral.server.services.telemetry import job_telemetry, node_telemetry
from corral.server.services.usage import usage as usage_report

router = APIRouter()
metrics_router = APIRouter()
PROMETHEUS_TEXT = {
    "description": "The Prometheus text exposition format.",
    "content": {"text/plain": {"schema": {"type": "string"}}},
}


@router.get(
    "/nodes/{name}/telemetry",
    response_model=TelemetryOut,
    tags=["nodes"],
    responses=errors(*AUTH, 404, 422),
)
def get_node_telemetry(
    name: Annotated[SafeStr, Path(max_length=253)],
    since: float = Query(0.0, description="samples taken after this time (epoch seconds)"),
    ctx: Context = Depends(context),
    token: TokenRow = Depends(user),
) -> TelemetryOut:
    """Recent per-GPU samples of a node (the server keeps a bounded history); the jobs
    on its GPUs are named to their owners (and admins) only."""
    NodeService(ctx).get(name)  # 404 for an unknown node
    return TelemetryOut(samples=node_telemetry(ctx, name, since, owner_of(token)))


@router.get(
    "/jobs/{job_id}/telemetry",
    response_model=TelemetryOut,
    tags=["jobs"],
    responses=errors(*AUTH, 404, 422),
)
def get_job_telemetry(
    job_id: int,
    since: float = Query(0.0, description="samples taken after this time (epoch seconds)"),
    ctx: Context = Depends(context),
    token: TokenRow = Depends(user),
) -> TelemetryOut:
    """Recent samples of the GPUs while this job held them (the caller's own job)."""
    JobService(ctx).owner_check(job_id, owner_of(token))  # 404: unknown or another's
    return TelemetryOut(samples=job_telemetry(ctx, job_id, since))


@router.get("/usage", response_model=UsageOut, tags=["accounting"], responses=errors(*AUTH, 422))
def get_usage(
    by: Literal["queue", "user", "job"] = "queue",
    since: float | None = Query(None, description="window start (epoch seconds); default: all"),
    until: float | None = Query(None, description="window end (epoch seconds); default: now"),
    ctx: Context = Depends(context),
    token: TokenRow = Depends(user),
) -> UsageOut:
    """GPU-hours allocated and used, waits, preemptions and job counts in a window; a
    user's own jobs only, an admin's every job."""
    return usage_report(ctx, by, since, until, owner_of(token))


@metrics_router.get(
    "/metrics",
    tags=["monitoring"],
    response_class=Response,
    responses={200: PROMETHEUS_TEXT, **errors(*AUTH)},
)
def get_metrics(ctx: Context = Depends(context), _: TokenRow = Depends(user)) -> Response:
    """Prometheus text format (scrape with a bearer token). Aggregates only (per queue,
    node, GPU model and GPU), so any user or admin token may read them."""
    return Response(ctx.metrics.render(), media_type=CONTENT_TYPE_LATEST)
