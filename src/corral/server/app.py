"""The FastAPI application and the server process."""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from types import FrameType

import uvicorn
from fastapi import FastAPI

import corral
from corral.logsetup import TEXT
from corral.scheduling.registry import build_profile
from corral.scheduling.scaling_registry import check_policies
from corral.schemas.config import load_config
from corral.server.audit import AuditMiddleware, BodyLimitMiddleware
from corral.server.context import Context, ServerSettings
from corral.server.db.engine import make_engine, migrate, session_factory
from corral.server.errors import install_error_handlers
from corral.server.home import secure_home
from corral.server.leader import Leadership
from corral.server.loop import ControlLoop
from corral.server.openapi import operation_id
from corral.server.routers import agent, cluster, events, jobs, monitoring, steps
from corral.server.services.auth import JOB_KEY, TokenService, server_secret
from corral.server.services.auth_cache import TokenCache
from corral.server.telemetry import TelemetryStore
from corral.server.ui import dashboard_url, mount_dashboard

API_PREFIX = "/api/v1"
log = logging.getLogger("corral.server")


def build_context(settings: ServerSettings) -> Context:
    """Open (and migrate) the database, load the configuration, bootstrap tokens and the
    job-token key (shared by every replica through the database). ``$CORRAL_HOME`` is
    made 0700 and a SQLite database 0600: they hold secrets."""
    secure_home(settings.home)
    text = settings.config_path.read_text() if settings.config_path else None
    config = load_config(text, str(settings.config_path or "scheduler config"))
    if settings.pools:  # an unknown policy or bad arguments: refused at start
        check_policies(config.autoscaling, pools=[p.name for p in settings.pools])
    engine = make_engine(settings.db_url)
    migrate(engine)
    sessions = session_factory(engine)
    ctx = Context(
        sessions=sessions,
        config=config,
        profile=build_profile(config),
        settings=settings,
        telemetry=TelemetryStore(
            settings.telemetry_max_age,
            settings.telemetry_max_samples,
            settings.telemetry_resolution,
        ),
        leadership=Leadership(sessions, settings.url, ttl=settings.lease_ttl),
        tokens=TokenCache(settings.token_cache_ttl),
    )
    ctx.job_key = server_secret(ctx.sessions, JOB_KEY, ctx.clock())
    TokenService(ctx).bootstrap()
    return ctx


def create_app(ctx: Context, run_loop: bool = True) -> FastAPI:
    """The API over ``ctx``; with ``run_loop`` the control loop runs during the lifespan."""

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        ctx.watch.bind(asyncio.get_running_loop())
        loop = ControlLoop(ctx, ctx.leadership) if run_loop and ctx.leadership else None
        if loop:
            loop.start()
        try:
            yield
        finally:
            if loop:
                loop.stop()
            ctx.intake.close()  # store the submissions still queued
            ctx.audit.close()  # store the audit entries still queued

    app = FastAPI(
        title="Corral",
        version=corral.__version__,
        description="Workload manager for GPU and TPU clusters.",
        lifespan=lifespan,
        openapi_url=f"{API_PREFIX}/openapi.json",
        docs_url=f"{API_PREFIX}/docs",
        generate_unique_id_function=operation_id,
    )
    app.state.ctx = ctx
    install_error_handlers(app)
    app.add_middleware(BodyLimitMiddleware, ctx=ctx)
    app.add_middleware(AuditMiddleware, ctx=ctx)  # outermost: it sees refusals too
    for module in (jobs, steps, cluster, agent, monitoring, events):
        app.include_router(module.router, prefix=API_PREFIX)
    mount_dashboard(app)
    ctx.metrics.bind(ctx)
    app.include_router(monitoring.metrics_router)
    return app


def serve(settings: ServerSettings) -> None:
    """Run the control plane in the foreground until SIGINT or SIGTERM (logging as
    configured by the caller, e.g. ``corral server --log-format``; else INFO as text)."""
    logging.basicConfig(level=logging.INFO, format=TEXT)  # (nothing once configured)
    ctx = build_context(settings)
    app = create_app(ctx)
    # Everything loaded so far (modules, schemas, the app) lives as long as the process:
    # keep it out of the collector's full passes, which otherwise stall every request for
    # about 0.1 s every few seconds under load (measured: docs/benchmarks.md).
    gc.collect()
    gc.freeze()
    scheme = "https" if settings.tls_cert else "http"
    log.info("dashboard at %s", dashboard_url(f"{scheme}://{settings.host}:{settings.port}"))
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level="warning",
        log_config=None,  # uvicorn's records go through the root logger's format
        access_log=False,
        timeout_graceful_shutdown=5,
        ssl_certfile=settings.tls_cert,
        ssl_keyfile=settings.tls_key,
    )
    grpc_server = None
    if settings.grpc_port:
        from corral.server.grpc_api.server import start_grpc

        grpc_server = start_grpc(ctx)

    def on_exit() -> None:
        ctx.watch.close()
        if grpc_server is not None:
            grpc_server.stop(grace=2)  # open streams end; unary calls get 2 s to finish

    tune_gc()
    try:
        _Server(config, on_exit=on_exit).run()
    finally:
        if grpc_server is not None:
            grpc_server.stop(grace=None)


# Young-generation allocations between collections (CPython's default: 700). A cycle or a
# burst of syncs allocates tens of thousands of short-lived objects; at the default every
# few thousand set off a collection, and now and then a full one over every long-lived
# object of the server (50-100 ms: a cycle took 180 ms instead of 60).
GC_THRESHOLD = (20_000, 20, 100)


def tune_gc() -> None:
    """Move everything allocated so far (modules, the app, the schemas) out of the
    collector's sight and collect the young generation less often."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLD)


class _Server(uvicorn.Server):
    """Uvicorn that answers the agents' long-polls as soon as shutdown begins (a graceful
    shutdown waits for open requests to finish)."""

    def __init__(self, config: uvicorn.Config, on_exit: Callable[[], None]) -> None:
        super().__init__(config)
        self._on_exit = on_exit

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self._on_exit()
        super().handle_exit(sig, frame)
