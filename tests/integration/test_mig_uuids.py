"""MIG instances an agent found through NVML: their UUIDs name them in the task's
environment (simulated and declared instances keep deterministic names)."""

from __future__ import annotations

from tests.e2e.cluster import wait_for
from tests.integration.conftest import Server
from tests.integration.protocol import FakeHardwareAgent

A100 = {"model": "A100-SXM4-80GB", "memory": 80 * 10**9}
UUIDS = ["MIG-1a2b3c4d-0000-5000-8000-000000000001", "MIG-1a2b3c4d-0000-5000-8000-000000000002"]


def test_mig_tasks_see_the_registered_instance_uuids(server: Server) -> None:
    node = FakeHardwareAgent(
        server,
        "node-m",
        devices=[
            {
                "index": 0,
                **A100,
                "uuid": "GPU-0",
                "mig": ["3g.40gb", "3g.40gb"],
                "mig_uuids": UUIDS,
            },
            {"index": 1, **A100, "mig": ["1g.10gb"]},  # declared: no UUIDs known
        ],
    )
    client = server.client()
    jobs = [client.submit({"command": "x", "resources": {"gpus": "3g.40gb"}}) for _ in range(2)]
    small = client.submit({"command": "x", "resources": {"gpus": "1g.10gb"}})
    every = [*jobs, small]
    wait_for(lambda: all(client.get(j.id).state == "running" for j in every), 10, "all placed")
    visible = {t["job_id"]: t["env"]["CUDA_VISIBLE_DEVICES"] for t in node.sync()["tasks"]}
    assert sorted(visible[j.id] for j in jobs) == UUIDS
    assert visible[small.id] == "MIG-node-m-1-0"
    # corral show names the instances as the tasks see them
    assert [client.get(j.id).tasks[0].mig for j in every] == [[visible[j.id]] for j in every]


def test_mig_uuids_must_match_the_instances(server: Server) -> None:
    body = {
        "name": "node-m",
        "agent_id": "a",
        "address": "127.0.0.1",
        "devices": [{"index": 0, **A100, "mig": ["3g.40gb"], "mig_uuids": UUIDS}],
        "cpus": 8,
        "memory": 10**9,
    }
    with server.http(server.join_token) as http:
        answer = http.post("/agent/register", json=body)
    assert answer.status_code == 422, answer.text
    assert "mig_uuids: 2 UUIDs for 1 MIG instances" in answer.text
