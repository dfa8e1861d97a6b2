"""A real control plane (uvicorn on loopback, control loop) in a thread, on SQLite and on
PostgreSQL: the ``server`` fixture is parametrized ``sqlite``/``postgresql``, so
``pytest -k postgresql`` selects the PostgreSQL runs."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from corral.client import Client
from corral.server.app import build_context, create_app
from corral.server.context import Context, ServerSettings
from tests.e2e.cluster import free_port


@dataclass
class Server:
    url: str
    ctx: Context
    home: Path
    admin_token: str
    join_token: str
    grpc_url: str | None = None  # grpc(s)://127.0.0.1:PORT when started with grpc=True
    grpc_server: Any = None

    def stop_grpc(self) -> None:
        if self.grpc_server is not None:
            self.grpc_server.stop(grace=None)

    def client(self, token: str | None = None) -> Client:
        return Client(self.url, token or self.admin_token)

    def http(self, token: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=f"{self.url}/api/v1", headers=headers, timeout=10)


def start_server(
    home: Path,
    config: str | None = None,
    db_url: str | None = None,
    grpc: bool = False,
    **settings: object,
) -> tuple:
    """Start a server on ``db_url`` (default: SQLite under ``home``); (handle, uvicorn, thread).
    With ``grpc``, the gRPC API too, on a port of its own (``handle.grpc_url``; stop it with
    ``handle.stop_grpc()``)."""
    config_path = None
    if config is not None:
        config_path = home / "scheduler.yaml"
        home.mkdir(parents=True, exist_ok=True)
        config_path.write_text(config)
    port = free_port()
    # The bootstrap admin token is this account's; test runners often run as root.
    settings.setdefault("allow_root_jobs", True)
    if grpc:
        settings["grpc_port"] = free_port()
    ctx = build_context(
        ServerSettings(
            db_url=db_url or f"sqlite:///{home / 'corral.db'}",
            home=home,
            port=port,
            config_path=config_path,
            **settings,  # type: ignore[arg-type]
        )
    )
    tls = ctx.settings.tls_cert is not None
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(ctx),
            host="127.0.0.1",
            port=port,
            log_level="warning",
            ssl_certfile=ctx.settings.tls_cert,
            ssl_keyfile=ctx.settings.tls_key,
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline, "server did not start"
        time.sleep(0.02)
    handle = Server(
        url=f"{'https' if tls else 'http'}://127.0.0.1:{port}",
        ctx=ctx,
        home=home,
        admin_token=(home / "token").read_text().strip(),
        join_token=(home / "join-token").read_text().strip(),
    )
    if grpc:
        from corral.server.grpc_api.server import start_grpc

        handle.grpc_server = start_grpc(ctx)
        handle.grpc_url = f"{'grpcs' if tls else 'grpc'}://127.0.0.1:{ctx.settings.grpc_port}"
    return handle, server, thread


BACKENDS = ["sqlite", "postgresql"]


def database_url(backend: str, request: pytest.FixtureRequest, home: Path) -> str:
    """A fresh database of ``backend``: a SQLite file under ``home`` or a new PostgreSQL
    database on the session's server."""
    if backend == "postgresql":
        return request.getfixturevalue("postgres_server").new_database()
    return f"sqlite:///{home / 'corral.db'}"


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """The database backend under test: ``sqlite`` or ``postgresql``."""
    return request.param


@pytest.fixture
def server(tmp_path: Path, request: pytest.FixtureRequest, backend: str) -> Iterator[Server]:
    marker = request.node.get_closest_marker("server_options")
    options = dict(marker.kwargs) if marker else {}
    home = tmp_path / "home"
    db_url = database_url(backend, request, home)
    handle, srv, thread = start_server(home, db_url=db_url, **options)
    try:
        yield handle
    finally:
        handle.stop_grpc()
        srv.should_exit = True
        thread.join(timeout=10)
