"""What every service needs: sessions, configuration, profile, clock and settings."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy.orm import Session, sessionmaker

from corral.core.pools import Pool
from corral.scheduling.config import SchedulerConfig
from corral.scheduling.framework import Profile
from corral.scheduling.mix import MixLearner, learns_mix
from corral.server.leader import Leadership
from corral.server.metrics import ServerMetrics
from corral.server.services.audit import AuditWriter
from corral.server.services.auth_cache import DEFAULT_TTL, TokenCache
from corral.server.services.catalog import NodeCatalog
from corral.server.services.converters import PendingJobs
from corral.server.services.estimates import RunTimeHistory
from corral.server.services.intake import Intake
from corral.server.services.ratelimit import SubmitLimiter
from corral.server.telemetry import (
    DEFAULT_MAX_AGE,
    DEFAULT_MAX_SAMPLES,
    DEFAULT_RESOLUTION,
    TelemetryStore,
)
from corral.server.watch import NodeWatch

HEARTBEAT_FACTOR = 5


@dataclass
class ServerSettings:
    db_url: str
    home: Path
    host: str = "127.0.0.1"
    port: int = 7733
    config_path: Path | None = None
    node_timeout: float = 30.0  # seconds without a sync before a node is lost
    sync_interval: float = 2.0  # how often agents with news sync (see ``heartbeat_interval``)
    log_chunk_limit: int = 1 << 20  # bytes per log response
    telemetry_max_age: float = DEFAULT_MAX_AGE  # seconds of GPU telemetry kept per GPU
    telemetry_max_samples: int = DEFAULT_MAX_SAMPLES  # samples kept per GPU
    telemetry_resolution: float = DEFAULT_RESOLUTION  # seconds between samples kept
    sse_keepalive: float = 15.0  # seconds between keep-alive comments on event streams
    # seconds an event stream waits for a missing event id (a transaction still writing
    # it); far longer than any transaction that writes events
    event_gap_wait: float = 2.0
    lease_ttl: float = 4.0  # seconds the scheduler leader's lease lasts without renewal
    advertise: str | None = None  # the URL other parties reach this replica at
    token_cache_ttl: float = DEFAULT_TTL  # seconds; a revocation elsewhere shows here within
    max_grace_period: float = 600.0  # seconds; a job asking for more is refused (422)
    log_cap: int = 100 * 10**6  # bytes of each task's log kept; past it the oldest go
    allow_root_jobs: bool = False  # run jobs whose Unix account is root (else 403)
    pools: tuple[Pool, ...] = ()  # node pools to autoscale (``corral server --pools``)
    join_token: str | None = None  # for the agents a provider starts (None: $CORRAL_HOME's)

    @property
    def url(self) -> str:
        scheme = "https" if self.tls_cert else "http"
        return self.advertise or f"{scheme}://{self.host}:{self.port}"

    @property
    def heartbeat_interval(self) -> float:
        """The longest an agent goes without syncing: one with nothing new to say (no task
        started or ended, no log bytes, no hook failure) syncs this often, ``HEARTBEAT_FACTOR``
        times less often than ``sync_interval`` and at least three times per node timeout.
        Its watch still wakes it at once for new work. GPU telemetry arrives with each sync,
        so its freshness is judged against this interval."""
        return max(
            self.sync_interval, min(HEARTBEAT_FACTOR * self.sync_interval, self.node_timeout / 3)
        )

    @property
    def heartbeat_period(self) -> float:
        """How often a node's heartbeat is written: a sync that changes nothing else then
        writes nothing (a tenth of the node timeout, at most a second)."""
        return min(1.0, self.node_timeout / 10)

    tls_cert: Path | None = None  # serve HTTPS with this certificate and key
    tls_key: Path | None = None
    grpc_port: int | None = None  # also serve gRPC (corral.v1.Corral) on this port


@dataclass
class Context:
    sessions: sessionmaker[Session]
    config: SchedulerConfig
    profile: Profile
    settings: ServerSettings
    clock: Callable[[], float] = time.time
    started_at: float = field(default_factory=time.time)
    wake_event: threading.Event = field(default_factory=threading.Event)
    catalog: NodeCatalog = field(default_factory=NodeCatalog)
    watch: NodeWatch = field(default_factory=NodeWatch)
    telemetry: TelemetryStore = field(default_factory=TelemetryStore)
    metrics: ServerMetrics = field(default_factory=ServerMetrics)
    leadership: Leadership | None = None  # this replica's side of the leader election
    job_key: bytes = b""  # signs job tokens; loaded from the database at start
    submissions: SubmitLimiter = field(default_factory=SubmitLimiter)
    tokens: TokenCache = field(default_factory=TokenCache)  # verified API tokens
    audit: AuditWriter = field(init=False)  # the audit log's batched writer
    intake: Intake = field(init=False)  # the batched writer of submissions
    pending_jobs: PendingJobs = field(default_factory=PendingJobs)  # the last cycle's
    runtimes: RunTimeHistory = field(default_factory=RunTimeHistory)  # learned run times
    # the request mix of the jobs seen, for the corral sharing policy (None: not needed)
    mixes: MixLearner | None = field(init=False)
    estimated_at: float | None = None  # time.monotonic() of the last cycle with estimates

    def __post_init__(self) -> None:
        self.audit = AuditWriter(self.sessions)
        self.intake = Intake(self)
        self.mixes = MixLearner() if learns_mix(self.config) else None
        self.catalog.pools = self.settings.pools

    def wake(self) -> None:
        """Ask the control loop for a scheduling cycle soon."""
        self.wake_event.set()
