"""Monitoring and accounting RPCs of ``corral.v1.Corral``: GPU telemetry, usage and the
audit log, as ``server/routers/monitoring.py`` and ``routers/cluster.py`` answer them
(the same services, authorization and limits on their inputs)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from corral.api.convert import to_message
from corral.api.v1 import corral_pb2 as pb
from corral.schemas.api import TelemetryOut
from corral.schemas.common import SafeStr
from corral.server.context import Context
from corral.server.deps import owner_of
from corral.server.grpc_api.calls import Call, check, unary
from corral.server.grpc_api.calls import request_fields as _fields
from corral.server.services.audit import audit_page
from corral.server.services.jobs import JobService
from corral.server.services.nodes import NodeService
from corral.server.services.telemetry import job_telemetry, node_telemetry
from corral.server.services.usage import usage as usage_report

MAX_INT = 2**63 - 1


class _NodeTelemetryQuery(BaseModel):
    name: SafeStr = Field(max_length=253)
    since: float = 0.0


class _JobTelemetryQuery(BaseModel):
    job_id: int
    since: float = 0.0


class _UsageQuery(BaseModel):
    by: Literal["queue", "user", "job"] = "queue"
    since: float | None = None
    until: float | None = None


class _AuditQuery(BaseModel):
    user: SafeStr | None = Field(None, max_length=128)
    since: float | None = None
    limit: int = Field(100, ge=1, le=10_000)
    before: int | None = Field(None, ge=1, le=MAX_INT)


def _telemetry(answer: TelemetryOut) -> pb.Telemetry:
    return to_message(answer.model_dump(mode="json"), pb.Telemetry)


class AdminCalls:
    """``GetNodeTelemetry``, ``GetJobTelemetry``, ``GetUsage`` and ``ListAudit`` (a mixin
    of ``CorralServicer``)."""

    ctx: Context

    @unary()
    def GetNodeTelemetry(  # noqa: N802
        self, request: pb.NodeTelemetryRequest, call: Call
    ) -> pb.Telemetry:
        owner = owner_of(call.user())  # as REST: the credential first, then the parameters
        q = check(_NodeTelemetryQuery, _fields(request))
        NodeService(self.ctx).get(q.name)  # not found: an unknown node
        return _telemetry(TelemetryOut(samples=node_telemetry(self.ctx, q.name, q.since, owner)))

    @unary()
    def GetJobTelemetry(  # noqa: N802
        self, request: pb.JobTelemetryRequest, call: Call
    ) -> pb.Telemetry:
        owner = owner_of(call.user())
        q = check(_JobTelemetryQuery, _fields(request))
        JobService(self.ctx).owner_check(q.job_id, owner)  # unknown or another's: not found
        return _telemetry(TelemetryOut(samples=job_telemetry(self.ctx, q.job_id, q.since)))

    @unary()
    def GetUsage(self, request: pb.UsageRequest, call: Call) -> pb.Usage:  # noqa: N802
        owner = owner_of(call.user())
        q = check(_UsageQuery, _fields(request))
        report = usage_report(self.ctx, q.by, q.since, q.until, owner)
        return to_message(report.model_dump(mode="json"), pb.Usage)

    @unary()
    def ListAudit(self, request: pb.ListAuditRequest, call: Call) -> pb.AuditList:  # noqa: N802
        call.admin()
        q = check(_AuditQuery, _fields(request))
        page = audit_page(self.ctx, q.user, q.since, q.limit, q.before)
        return to_message(page.model_dump(mode="json"), pb.AuditList)
