"""``kind: ray`` end to end: three real agents (one simulated GPU each) on loopback form
one Ray cluster; the driver's ``ray.init()`` joins it; nothing of Ray outlives the job,
whether its driver ends or it is cancelled."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cluster import LocalCluster, wait_for

pytest.importorskip("ray", reason="kind ray's end-to-end tests need Ray (pip install 'ray>=2.9')")

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

NODES = ("ray-a", "ray-b", "ray-c")
DRIVER = """
import os, ray
ray.init()
alive = [n for n in ray.nodes() if n["Alive"]]
gpus = ray.cluster_resources().get("GPU", 0)

@ray.remote(num_gpus=1)
def device():
    return os.environ.get("CUDA_VISIBLE_DEVICES")

seen = ray.get([device.remote() for _ in range(3)])
print(f"nodes={len(alive)} gpus={gpus:g} tasks={len(seen)}", flush=True)
assert len(alive) == 3 and gpus == 3, (alive, gpus)
"""
WAIT = """
import sys, time, ray
ray.init()
print(f"READY nodes={len(ray.nodes())}", flush=True)
time.sleep(300)
"""


@pytest.fixture
def ray_cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    """A server and three agents of one simulated GPU each (the tasks run Corral's Ray
    runtime on the agents' interpreter, which has Ray: no ``ray.python`` needed)."""
    c = LocalCluster(tmp_path / "home")
    try:
        c.start_server()
        for name in NODES:
            c.start_agent(name, "1xH100")
        c.wait_nodes(*NODES)
        yield c
    finally:
        c.stop()


def ray_job(script: str) -> dict:
    return {
        "kind": "ray",
        "nodes": 3,
        "resources": {"gpus": 1, "cpus": 1},
        "grace_period": "10s",
        "command": [sys.executable, "-c", script],
        "ray": {"wait_for_nodes": "60s"},
    }


def job_processes(cluster: LocalCluster, job_id: int) -> dict[int, str]:
    """Live processes started for ``job_id`` of ``cluster`` (Ray's included: they inherit
    the task's environment), pid -> command line."""
    marks = {f"CORRAL_SERVER={cluster.url}".encode(), f"CORRAL_JOB_ID={job_id}".encode()}
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = set((entry / "environ").read_bytes().split(b"\0"))
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marks <= environ and cmdline:
            found[int(entry.name)] = cmdline
    return found


def assert_all_gone(cluster: LocalCluster, job_id: int, timeout: float = 30) -> None:
    try:
        wait_for(lambda: not job_processes(cluster, job_id), timeout, "the job's processes to end")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {job_processes(cluster, job_id)}") from None


def is_ray(cmdline: str) -> bool:
    return any(word in cmdline for word in ("raylet", "gcs_server", "ray start", "ray::"))


def test_a_ray_job_forms_one_cluster_and_leaves_nothing_behind(ray_cluster: LocalCluster) -> None:
    client = ray_cluster.client()
    job = client.submit(ray_job(DRIVER))
    done = client.wait(job.id, timeout=120)[0]
    log = client.logs(job.id, task=0)
    assert done.state == "succeeded", f"{done.reason}\n{log[-3000:]}"
    assert "nodes=3 gpus=3 tasks=3" in log
    shown = client.get(job.id)
    assert sorted({t.node for t in shown.tasks}) == sorted(NODES)
    assert_all_gone(ray_cluster, job.id)


def test_cancelling_a_ray_job_stops_every_ray_process(ray_cluster: LocalCluster) -> None:
    client = ray_cluster.client()
    job = client.submit(ray_job(WAIT))
    wait_for(lambda: "READY nodes=3" in client.logs(job.id, task=0), 120, "the driver to join")
    running = job_processes(ray_cluster, job.id)
    assert sum(is_ray(cmd) for cmd in running.values()) >= 3, running  # one raylet per node
    client.cancel(job.id)
    wait_for(lambda: client.get(job.id).state == "cancelled", 30, "the job to be cancelled")
    assert_all_gone(ray_cluster, job.id)
