"""A job in a container image over the real API and agent protocol: what agents are told
(image, mounts, /dev/shm size, the job's GPUs on the node), for its tasks and its steps,
and a /dev/shm larger than any node's memory refused at submission."""

from __future__ import annotations

import pytest

from corral.errors import ValidationError
from tests.e2e.cluster import wait_for
from tests.integration.conftest import Server
from tests.integration.protocol import FakeHardwareAgent, report
from tests.integration.test_steps import as_job

JOB = {
    "command": ["train"],
    "tasks_per_node": 2,
    "resources": {"gpus": 4},
    "image": "oci-archive:/images/pytorch.tar",
    "mounts": ["/datasets/imagenet:/data:ro", "/scratch"],
    "shm_size": "16GB",
}


def test_agents_are_told_the_container_of_each_task_and_step(server: Server) -> None:
    node = FakeHardwareAgent(server, "node-a")
    node.sync()
    client = server.client()
    job = client.submit(JOB)
    wait_for(lambda: client.get(job.id).state == "running", 10, "the job placed")
    tasks = sorted(node.sync()["tasks"], key=lambda t: t["rank"])
    mounts = [
        {"source": "/datasets/imagenet", "target": "/data", "read_only": True},
        {"source": "/scratch", "target": "/scratch", "read_only": False},
    ]
    held = sorted(tasks[0]["gpus"] + tasks[1]["gpus"])
    for task in tasks:
        assert task["image"] == "oci-archive:/images/pytorch.tar"
        assert task["mounts"] == mounts and task["shm_size"] == 16 * 10**9
        assert len(task["gpus"]) == 2 and task["node_gpus"] == held  # the job's on the node
    assert client.get(job.id).manifest["mounts"] == JOB["mounts"]
    # a step runs in the job's image, seeing the GPUs of the job's tasks there
    for task in tasks:
        node.sync([report(job.id, task["rank"], "running", pid=10)])
    as_job(server, client.get(job.id)).start_step(job.id, ["probe"], ["node-a"], 1)
    running = [report(job.id, t["rank"], "running", pid=10) for t in tasks]
    step = node.sync(running)["steps"][0]
    assert step["image"] == JOB["image"] and step["mounts"] == mounts
    assert step["gpus"] == held and step["node_gpus"] == held


def test_a_job_without_an_image_has_no_container(server: Server) -> None:
    node = FakeHardwareAgent(server, "node-a")
    node.sync()
    job = server.client().submit({"command": "x", "resources": {"gpus": 1}})
    wait_for(lambda: server.client().get(job.id).state == "running", 10, "the job placed")
    task = node.sync()["tasks"][0]
    assert (task["image"], task["mounts"], task["shm_size"], task["node_gpus"]) == (
        None,
        [],
        None,
        [],
    )


def test_shm_larger_than_any_node_is_refused_where_nodes_are_known(server: Server) -> None:
    client = server.client()
    manifest = {"command": "x", "image": "/rootfs", "shm_size": "600GB"}
    client.submit(manifest)  # no node registered yet: the node that runs it checks
    FakeHardwareAgent(server, "node-a")  # 512 GB of memory
    with pytest.raises(ValidationError, match="shm_size: 600GB is more than the memory"):
        client.submit(manifest)
    client.submit({**manifest, "shm_size": "500GB"})
