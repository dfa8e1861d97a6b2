"""Agents report node attributes; a configured scoring plugin uses them."""

from __future__ import annotations

import pytest

from tests.e2e.cluster import wait_for
from tests.integration.conftest import Server
from tests.integration.protocol import FakeHardwareAgent


@pytest.mark.server_options(config="plugins:\n  - {name: cool-healthy, weight: 5}\n")
def test_the_cooler_node_gets_the_job(server: Server) -> None:
    FakeHardwareAgent(server, "aaa-hot", attributes={"gpu_temperature_c": 88.0})
    cool = FakeHardwareAgent(server, "zzz-cool", attributes={"gpu_temperature_c": 41.0})
    client = server.client()
    assert {n.name: n.attributes for n in client.nodes()} == {
        "aaa-hot": {"gpu_temperature_c": 88.0},
        "zzz-cool": {"gpu_temperature_c": 41.0},
    }
    job = client.submit({"command": "x", "resources": {"gpus": 2}})
    wait_for(lambda: client.get(job.id).state == "running", 10, "placement")
    assert client.get(job.id).tasks[0].node == "zzz-cool"
    # fresh readings come with syncs
    cool.http.post(
        "/agent/sync",
        json={
            "node": "zzz-cool",
            "agent_id": cool.agent_id,
            "attributes": {"gpu_temperature_c": 95.0},
        },
    ).raise_for_status()
    assert next(n for n in client.nodes() if n.name == "zzz-cool").attributes == {
        "gpu_temperature_c": 95.0
    }
