"""Queues, quotas, fair share and preemption through the real server and database."""

from __future__ import annotations

import pytest

from corral.errors import ConflictError
from tests.e2e.cluster import wait_for
from tests.integration.conftest import Server
from tests.integration.protocol import FakeHardwareAgent, report

PREEMPTION = """
queues:
  - {name: a, quota: {gpus: 8}, cohort: lab}
  - {name: b, quota: {gpus: 8}, cohort: lab, borrowing_limit: {gpus: 8}}
policy: {preemption: true, interval: 1s}
"""


def state(server: Server, job_id: int) -> str:
    return server.client().get(job_id).state


def wait_state(server: Server, job_id: int, want: str) -> None:
    wait_for(lambda: state(server, job_id) == want, 10, f"job {job_id} {want}")


def test_a_job_reports_checkpoints_and_they_show(server: Server) -> None:
    node = FakeHardwareAgent(server, "node-a")
    client = server.client()
    job = client.submit({"command": "x", "resources": {"gpus": 8}})
    wait_state(server, job.id, "running")
    node.sync()
    node.sync([report(job.id, 0, "running", pid=7)])
    out = client.checkpoint(job.id, step=120, path="/ckpt/step-120")
    assert out.last_checkpoint_at is not None
    assert any("checkpoint saved at step 120" in e.reason for e in client.get(job.id).events)
    client.cancel(job.id)
    with pytest.raises(ConflictError, match="only running jobs"):
        client.checkpoint(job.id, step=121)


@pytest.mark.server_options(config=PREEMPTION)
def test_reclaim_preempts_a_borrower_and_the_owner_starts_when_it_exits(server: Server) -> None:
    node = FakeHardwareAgent(server, "node-a", gpus=16)
    client = server.client()
    borrower = client.submit({"queue": "b", "command": "x", "resources": {"gpus": 16}})
    wait_state(server, borrower.id, "running")  # b borrows a's unused quota
    node.sync()
    node.sync([report(borrower.id, 0, "running", pid=7)])
    queues = {q.name: q for q in client.queues()}
    assert queues["b"].borrowed == {"gpus": 8.0} and queues["b"].gpus_used == 16
    client.checkpoint(borrower.id, step=1)
    owner = client.submit({"queue": "a", "command": "y", "resources": {"gpus": 8}})
    wait_state(server, borrower.id, "preempting")  # reclaim: a is below its quota
    assert "preempted for job" in (client.get(borrower.id).reason or "")
    assert "preempting job" in (client.get(owner.id).reason or "")
    # next cycles: it waits for the victim to exit, and preempts nothing more
    wait_for(lambda: "exit" in (client.get(owner.id).reason or ""), 10, "the owner waits")
    assert node.sync([report(borrower.id, 0, "running", pid=7)])["tasks"] == []  # SIGTERM
    node.sync([report(borrower.id, 0, "exited", exit_code=0)])  # it saved and left
    wait_state(server, owner.id, "running")
    after = client.get(borrower.id)
    assert after.attempt == 1 and after.state in ("pending", "running")
