"""Node hook failures reported by agents (``hook_failures`` in a sync), against the real
server and database: the node drains; a failed prolog requeues the job elsewhere without
counting as its failure; a failed epilog leaves the job's outcome alone."""

from __future__ import annotations

from tests.e2e.cluster import wait_for
from tests.integration.conftest import Server
from tests.integration.protocol import FakeHardwareAgent, report


def failure(job_id: int, hook: str, reason: str, attempt: int = 0) -> dict:
    return {"job_id": job_id, "attempt": attempt, "hook": hook, "exit_code": 1, "reason": reason}


def placed(server: Server, job_id: int, attempt: int = 0) -> list[str]:
    """The nodes of the job's ``attempt`` once it runs."""

    def running() -> list[str]:
        job = server.client().get(job_id)
        ok = job.state == "running" and job.attempt == attempt
        return sorted({t.node for t in job.tasks}) if ok else []

    return wait_for(running, 10, f"job {job_id} attempt {attempt} to be placed")


def test_a_failed_prolog_drains_the_node_and_requeues_the_job_elsewhere(server: Server) -> None:
    nodes = {name: FakeHardwareAgent(server, name) for name in ("node-a", "node-b")}
    client = server.client()
    job = client.submit({"command": "x", "resources": {"gpus": 8}, "requeue": False})
    (bad,) = placed(server, job.id)
    (good,) = set(nodes) - {bad}
    reason = "prolog failed (exit 1): GPU 3 ECC errors"
    nodes[bad].sync(hook_failures=[failure(job.id, "prolog", reason)])
    node = next(n for n in client.nodes() if n.name == bad)
    assert (node.state, node.reason) == ("draining", f"{reason} (job {job.id})")
    assert placed(server, job.id, attempt=1) == [good]  # requeue: false does not matter
    shown = client.get(job.id)
    assert any(e.reason == f"node {bad} drained: {reason}; requeued" for e in shown.events)
    assert nodes[bad].sync()["tasks"] == []  # the drained node runs nothing of it
    nodes[bad].sync(hook_failures=[failure(job.id, "prolog", reason)])  # a repeated report
    assert client.get(job.id).attempt == 1 and client.get(job.id).state == "running"


def test_a_failed_prolog_fails_a_job_that_started_elsewhere_and_may_not_requeue(
    server: Server,
) -> None:
    nodes = {name: FakeHardwareAgent(server, name) for name in ("node-a", "node-b")}
    client = server.client()
    job = client.submit({"nodes": 2, "command": "x", "resources": {"gpus": 8}, "requeue": False})
    placed(server, job.id)
    ranks = {t.node: t.rank for t in client.get(job.id).tasks}
    nodes["node-a"].sync([report(job.id, ranks["node-a"], "running", pid=7, started_at=1.0)])
    nodes["node-b"].sync(hook_failures=[failure(job.id, "prolog", "prolog timed out after 5s")])
    done = client.get(job.id)
    assert done.state == "failed"
    assert done.reason == "node node-b drained: prolog timed out after 5s; requeue is false"
    skipped = next(t for t in done.tasks if t.node == "node-b")
    assert (skipped.state, skipped.reason) == (
        "skipped",
        "never started: prolog timed out after 5s",
    )


def test_a_failed_epilog_drains_the_node_and_leaves_the_job_alone(server: Server) -> None:
    node = FakeHardwareAgent(server, "node-a")
    client = server.client()
    job = client.submit({"command": "x", "resources": {"gpus": 1}})
    placed(server, job.id)
    node.sync([report(job.id, 0, "exited", exit_code=0, started_at=1.0, ended_at=2.0)])
    assert client.get(job.id).state == "succeeded"
    reason = "epilog failed (exit 2): cannot unmount /scratch"
    node.sync(hook_failures=[failure(job.id, "epilog", reason)])
    assert client.get(job.id).state == "succeeded"
    (drained,) = client.nodes()
    assert (drained.state, drained.reason) == ("draining", f"{reason} (job {job.id})")
