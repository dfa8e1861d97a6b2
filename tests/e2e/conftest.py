from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cluster import LocalCluster


@pytest.fixture
def cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    """A server plus two 8-GPU agents (node-a, node-b); options via ``cluster_options``."""
    marker = request.node.get_closest_marker("cluster_options")
    options = dict(marker.kwargs) if marker else {}
    nodes = options.pop("nodes", ["node-a", "node-b"])
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
