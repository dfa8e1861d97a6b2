"""TPU slices through the real server: sizing at submission, refusals, the task variables."""

from __future__ import annotations

import uuid
from typing import Any

from corral.schemas.cluster import TpuPodDecl
from tests.e2e.cluster import wait_for
from tests.integration.conftest import Server

POD = TpuPodDecl(name="pod-a", generation="v5p", shape=[4, 2, 2], chips_per_host=[2, 2, 1])


def register_pod(server: Server) -> dict[str, Any]:
    """Register the pod's hosts as their agents would (from a ``corral up`` node file);
    returns an HTTP client per host, with its agent id, for syncing."""
    hosts = {}
    for node in POD.hosts():
        agent_id = uuid.uuid4().hex
        body = {
            "name": node.name,
            "agent_id": agent_id,
            "address": "127.0.0.1",
            "devices": [
                {"index": d.index, "model": d.model, "memory": d.memory, "kind": d.kind}
                for d in node.devices
            ],
            "cpus": node.cpus,
            "memory": node.memory,
            "labels": dict(node.labels),
        }
        with server.http(server.join_token) as http:
            answer = http.post("/agent/register", json=body)
        answer.raise_for_status()
        hosts[node.name] = (server.http(answer.json()["node_token"]), agent_id)
    return hosts


def sync(hosts: dict[str, Any], name: str) -> list[dict[str, Any]]:
    http, agent_id = hosts[name]
    answer = http.post("/agent/sync", json={"node": name, "agent_id": agent_id})
    answer.raise_for_status()
    return answer.json()["tasks"]


def test_a_slice_is_sized_placed_and_told_its_tpu_variables(server: Server) -> None:
    hosts = register_pod(server)
    client = server.client()
    job = client.submit({"command": "x", "resources": {"tpu": "v5p:2x2x2"}})
    assert (job.nodes, job.tasks_per_node, job.manifest["nodes"]) == (2, 1, 2)
    running = wait_for(
        lambda: (j := client.get(job.id)).state == "running" and j, 10, "the slice placed"
    )
    placed = [t.node for t in running.tasks]
    assert len(placed) == 2 and all(t.gpus == [0, 1, 2, 3] for t in running.tasks)
    envs = {}
    for name in placed:
        (task,) = sync(hosts, name)
        envs[task["rank"]] = task["env"]
    for rank, env in envs.items():
        assert env["TPU_WORKER_ID"] == str(rank) == env["RANK"]
        assert env["TPU_WORKER_HOSTNAMES"] == ",".join(placed)
        assert env["TPU_ACCELERATOR_TYPE"] == "v5p-16"
        assert env["TPU_TOPOLOGY"] == "2x2x2"
        assert env["WORLD_SIZE"] == "2" and env["NNODES"] == "2"
        assert env["CUDA_VISIBLE_DEVICES"] == ""
    listed = {n.name: n for n in client.nodes()}
    host = listed[placed[0]]
    assert (host.gpus, host.tpu_chips, host.tpu_chips_used, host.models) == (0, 4, 4, ["v5p"])
    assert {d.kind for d in host.devices} == {"tpu"}


def test_slices_no_pod_holds_and_gpu_jobs_on_a_tpu_only_cluster_are_refused(
    server: Server,
) -> None:
    register_pod(server)
    http = server.http(server.admin_token)
    for body, words in [
        ({"resources": {"tpu": "v5p:3x2x2"}}, "not a whole number of hosts"),
        ({"resources": {"tpu": "v5p:2x2x2"}, "nodes": 3}, "2 hosts (the job asks for nodes: 3)"),
        ({"resources": {"tpu": "v4:2x2x1"}}, "no v4 TPU pod is in the cluster"),
        ({"resources": {"gpus": 1}}, "is a TPU host (takes TPU slices only)"),
    ]:
        answer = http.post("/jobs", json={"command": "x", **body})
        assert answer.status_code >= 400 and words in answer.text, answer.text
    assert server.client().list(all=True) == []
