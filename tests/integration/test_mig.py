"""MIG instances through the real server: placement, persistence and the environment."""

from __future__ import annotations

from tests.e2e.cluster import wait_for
from tests.integration.conftest import Server
from tests.integration.protocol import FakeHardwareAgent

A100 = {"model": "A100", "memory": 80 * 10**9}


def test_two_mig_jobs_take_distinct_instances_of_one_device(server: Server) -> None:
    node = FakeHardwareAgent(
        server,
        "node-m",
        devices=[
            {"index": 0, **A100, "mig": ["3g.40gb", "3g.40gb"]},
            {"index": 1, **A100},
        ],
    )
    node.sync()
    client = server.client()
    jobs = [client.submit({"command": "x", "resources": {"gpus": "3g.40gb"}}) for _ in range(2)]
    wait_for(lambda: all(client.get(j.id).state == "running" for j in jobs), 10, "both jobs placed")
    tasks = {t["job_id"]: t for t in node.sync()["tasks"]}
    visible = {job_id: t["env"]["CUDA_VISIBLE_DEVICES"] for job_id, t in tasks.items()}
    assert sorted(visible.values()) == ["MIG-node-m-0-0", "MIG-node-m-0-1"]
    shown = [client.get(j.id).tasks[0] for j in jobs]
    assert [t.gpus for t in shown] == [[0], [0]]
    assert sorted(t.mig[0] for t in shown) == sorted(visible.values())
    (listed,) = client.nodes()
    assert [d.share_used for d in listed.devices] == [1.0, 0.0]  # two of two instances
    # a whole GPU takes the device not in MIG mode; a third instance waits for one to free
    whole = client.submit({"command": "x", "resources": {"gpus": 1}})
    wait_for(lambda: client.get(whole.id).state == "running", 10, "whole GPU placed")
    assert client.get(whole.id).tasks[0].gpus == [1]
    third = client.submit({"command": "x", "resources": {"gpus": "3g.40gb"}})
    waiting = wait_for(
        lambda: "MIG" in (client.get(third.id).reason or "") and client.get(third.id),
        10,
        "the reason it waits",
    )
    assert waiting.state == "pending" and "no free 3g.40gb MIG instance" in (waiting.reason or "")


def test_a_mig_profile_no_node_declares_is_refused(server: Server) -> None:
    FakeHardwareAgent(server, "node-m", devices=[{"index": 0, **A100, "mig": ["1g.10gb"]}])
    answer = server.http(server.admin_token).post(
        "/jobs", json={"command": "x", "resources": {"gpus": "3g.40gb"}}
    )
    assert answer.status_code >= 400 and "declares no 3g.40gb MIG instance" in answer.text
