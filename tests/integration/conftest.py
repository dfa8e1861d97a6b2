"""A real control plane (uvicorn on loopback, SQLite, control loop) in a thread."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

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

    def client(self, token: str | None = None) -> Client:
        return Client(self.url, token or self.admin_token)

    def http(self, token: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=f"{self.url}/api/v1", headers=headers, timeout=10)


def start_server(home: Path, config: str | None = None, **settings: object) -> tuple:
    config_path = None
    if config is not None:
        config_path = home / "scheduler.yaml"
        home.mkdir(parents=True, exist_ok=True)
        config_path.write_text(config)
    port = free_port()
    ctx = build_context(
        ServerSettings(
            db_url=f"sqlite:///{home / 'corral.db'}",
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
    return handle, server, thread


@pytest.fixture
def server(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Server]:
    marker = request.node.get_closest_marker("server_options")
    options = dict(marker.kwargs) if marker else {}
    handle, srv, thread = start_server(tmp_path / "home", **options)
    try:
        yield handle
    finally:
        srv.should_exit = True
        thread.join(timeout=10)
