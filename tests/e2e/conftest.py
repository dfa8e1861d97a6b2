from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cluster import LocalCluster


@pytest.fixture
def cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    """A server plus two 8-GPU agents (node-a, node-b); options via ``cluster_options``.

    A test parametrized over ``backend`` (``sqlite``, ``postgresql``) runs its server on that
    database (a fresh PostgreSQL database for ``postgresql``; default SQLite in the home);
    other options go to ``LocalCluster``."""
    marker = request.node.get_closest_marker("cluster_options")
    options = dict(marker.kwargs) if marker else {}
    nodes = options.pop("nodes", ["node-a", "node-b"])
    callspec = getattr(request.node, "callspec", None)
    if callspec is not None and callspec.params.get("backend") == "postgresql":
        options["db"] = request.getfixturevalue("postgres_server").new_database()
    home = tmp_path / "home"
    c = LocalCluster(home, **options)
    try:
        c.start_server()
        for name in nodes:
            c.start_agent(name)
        c.wait_nodes(*nodes)
        yield c
    finally:
        c.stop()
