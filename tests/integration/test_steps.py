"""Job steps over the real API and agent protocol (SQLite and PostgreSQL): who may start
them, where, what the agents are told to run, and how their reports end them."""

from __future__ import annotations

from typing import Any

import pytest

from corral.client import Client
from corral.errors import (
    ConflictError,
    LimitExceededError,
    NotFoundError,
    PermissionDeniedError,
    ValidationError,
)
from corral.schemas.api import JobOut
from corral.server.db.models import StepRow
from corral.server.services.auth import job_token
from corral.server.services.steps import MAX_STEPS
from tests.e2e.cluster import wait_for
from tests.integration.conftest import Server
from tests.integration.protocol import (
    FakeHardwareAgent,
    report,
    step_chunk,
    step_report,
)

JOB = {
    "nodes": 2,
    "resources": {"gpus": 2, "cpus": 4, "memory": "8GB"},
    "command": ["main"],
    "env": {"A": "1"},
    "grace_period": "5s",
}


def running(server: Server, manifest: dict[str, Any] | None = None) -> JobOut:
    client = server.client()
    job = client.submit(manifest or JOB)
    wait_for(lambda: client.get(job.id).state == "running", 10, f"job {job.id} placed")
    return client.get(job.id)


def as_job(server: Server, job: JobOut, attempt: int = 0) -> Client:
    """A client holding the job's own token (what ``CORRAL_JOB_TOKEN`` holds)."""
    return Client(server.url, job_token(server.ctx.job_key, job.id, attempt))


def ranks_on(job: JobOut) -> dict[str, int]:
    return {t.node: t.rank for t in job.tasks}


@pytest.fixture
def nodes(server: Server) -> dict[str, FakeHardwareAgent]:
    found = {name: FakeHardwareAgent(server, name, gpus=2) for name in ("node-a", "node-b")}
    for node in found.values():
        node.sync()  # free ports for MASTER_PORT
    return found


def sync_running(node: FakeHardwareAgent, job: JobOut, **more: Any) -> dict[str, Any]:
    """A sync that reports the job's task on ``node`` running (and ``more``)."""
    return node.sync([report(job.id, ranks_on(job)[node.name], "running", pid=10)], **more)


def test_a_job_starts_a_step_on_another_node_and_reads_its_exit_code(
    server: Server, nodes: dict[str, FakeHardwareAgent]
) -> None:
    job = running(server)
    a, b = nodes["node-a"], nodes["node-b"]
    sync_running(a, job)
    sync_running(b, job)
    me = as_job(server, job)
    before = server.ctx.watch.version("node-b")
    step = me.start_step(job.id, ["orted", "-x"], ["node-b"], 2, {"B": "2"})
    assert (step.step, step.state, step.created_by) == (1, "pending", f"job:{job.id}")
    assert [(t.rank, t.node, t.local_rank, t.state) for t in step.tasks] == [
        (0, "node-b", 0, "pending"),
        (1, "node-b", 1, "pending"),
    ]
    assert server.ctx.watch.version("node-b") > before  # its agent syncs at once
    assert sync_running(a, job)["steps"] == []
    sent = sync_running(b, job)["steps"]
    assert [(s["step"], s["rank"], s["command"]) for s in sent] == [
        (1, 0, ["orted", "-x"]),
        (1, 1, ["orted", "-x"]),
    ]
    env = sent[1]["env"]
    assert env["CORRAL_STEP_ID"] == "1" and env["CORRAL_STEP_RANK"] == "1"
    assert env["CORRAL_STEP_WORLD_SIZE"] == "2" and env["CORRAL_STEP_LOCAL_RANK"] == "1"
    assert env["A"] == "1" and env["B"] == "2"  # the job's env, then the caller's
    assert env["RANK"] == str(ranks_on(job)["node-b"]) and env["CORRAL_NODE"] == "node-b"
    assert env["CORRAL_JOB_TOKEN"] == me.token and len(env["CUDA_VISIBLE_DEVICES"]) == 3
    # the step's tasks share the job's per-node CPUs and memory; its grace; its account
    assert sent[0]["cpus"] == 2 and sent[0]["memory"] == 4 * 10**9
    assert sent[0]["grace_period"] == 5 and sent[0]["user"] == job.unix_user

    sync_running(
        b,
        job,
        steps=[step_report(job.id, 1, r, "running", pid=20 + r) for r in (0, 1)],
        step_logs=[step_chunk(job.id, 1, 0, 0, b"hello from step\n")],
    )
    assert me.step(job.id, 1).state == "running"
    answer = sync_running(
        b,
        job,
        steps=[
            step_report(job.id, 1, 0, "exited", exit_code=3, ended_at=5.0),
            step_report(job.id, 1, 1, "exited", exit_code=0, ended_at=4.0),
        ],
    )
    assert answer["steps"] == [] and all(ack["final"] for ack in answer["step_acks"])
    done = me.wait_step(job.id, 1, timeout=5)
    assert (done.state, done.exit_code, [t.exit_code for t in done.tasks]) == ("ended", 3, [3, 0])
    assert me.logs(job.id, task=0, step=1) == "hello from step\n"
    assert server.client().logs(job.id, task=0, step=1) == "hello from step\n"
    assert server.client().logs(job.id, task=0) == ""  # the job's own log stays apart
    assert server.client().get(job.id).state == "running"  # a failed step fails no job
    # numbered within the attempt; by default on every node of the job
    second = server.client().start_step(job.id, "true")
    assert second.step == 2 and [t.node for t in second.tasks] == sorted(ranks_on(job))
    assert [s.step for s in me.steps(job.id)] == [1, 2]


def test_who_and_when_a_step_is_refused(
    server: Server, nodes: dict[str, FakeHardwareAgent]
) -> None:
    FakeHardwareAgent(server, "node-c", gpus=2)
    job = running(server)
    other = running(server, {"command": "x", "resources": {"gpus": 1}})
    me = as_job(server, job)
    with pytest.raises(PermissionDeniedError, match=f"belongs to job {other.id}"):
        as_job(server, other).start_step(job.id, "true")
    with pytest.raises(PermissionDeniedError, match="current attempt is 0"):
        as_job(server, job, attempt=1).start_step(job.id, "true")
    bob = server.client(server.client().create_token("bob").token)
    with pytest.raises(NotFoundError):
        bob.start_step(job.id, "true")
    outside = "node-c" if "node-c" not in ranks_on(job) else "node-a"
    with pytest.raises(ValidationError) as refused:
        me.start_step(job.id, "true", [outside])
    assert f"node {outside} not in job {job.id}'s allocation" in refused.value.message
    assert ", ".join(sorted(ranks_on(job))) in refused.value.message
    with pytest.raises(ValidationError, match="more than once"):
        me.start_step(job.id, "true", ["node-a", "node-a"])
    with pytest.raises(ValidationError, match="tasks_per_node"):
        me.start_step(job.id, "true", tasks_per_node=5000)
    with pytest.raises(ValidationError, match="command"):
        me.start_step(job.id, "  ")
    with server.ctx.sessions.begin() as session:  # as if it had started its 10,000th
        session.add(
            StepRow(
                job_id=job.id,
                attempt=0,
                step=MAX_STEPS,
                command="true",
                env={},
                tasks_per_node=1,
                size=0,
                created_by="test",
                created_at=0.0,
            )
        )
    with pytest.raises(LimitExceededError, match="10,000 steps"):
        me.start_step(job.id, "true")
    server.client().cancel(job.id)
    with pytest.raises(ConflictError, match=f"job {job.id} already ended \\(cancelled\\)"):
        server.client().start_step(job.id, "true")


def test_a_pending_job_runs_no_step(server: Server) -> None:
    FakeHardwareAgent(server, "node-a", gpus=2)
    job = server.client().submit({**JOB, "nodes": 1, "resources": {"gpus": 2}})
    blocked = server.client().submit({**JOB, "nodes": 1, "resources": {"gpus": 2}})
    wait_for(lambda: server.client().get(job.id).state == "running", 10, "the first job")
    assert server.client().get(blocked.id).state == "pending"
    with pytest.raises(ConflictError, match=f"job {blocked.id} is pending"):
        server.client().start_step(blocked.id, "true")


def test_a_cancelled_step_stops_and_one_never_sent_never_starts(
    server: Server, nodes: dict[str, FakeHardwareAgent]
) -> None:
    job = running(server)
    b = nodes["node-b"]
    me = as_job(server, job)
    me.start_step(job.id, "sleep 1000", ["node-b"])
    assert sync_running(b, job)["steps"]
    sync_running(b, job, steps=[step_report(job.id, 1, 0, "running", pid=30)])
    assert me.cancel_step(job.id, 1).cancelled
    assert sync_running(b, job, steps=[step_report(job.id, 1, 0, "terminating")])["steps"] == []
    sync_running(b, job, steps=[step_report(job.id, 1, 0, "exited", exit_code=143)])
    stopped = me.step(job.id, 1)
    assert (stopped.state, stopped.exit_code) == ("ended", 143)
    assert stopped.tasks[0].reason == "the step was cancelled"

    me.start_step(job.id, "true", ["node-b"])
    me.cancel_step(job.id, 2)
    assert sync_running(b, job)["steps"] == []  # it never reached the agent
    never = me.step(job.id, 2)
    assert (never.tasks[0].state, never.exit_code) == ("cancelled", 143)


def test_steps_end_with_their_job_and_with_their_agent(
    server: Server, nodes: dict[str, FakeHardwareAgent]
) -> None:
    job = running(server)
    a, b = nodes["node-a"], nodes["node-b"]
    me = as_job(server, job)
    me.start_step(job.id, "sleep 1000", ["node-b"])
    me.start_step(job.id, "sleep 1000", ["node-a"])
    sync_running(b, job)
    sync_running(b, job, steps=[step_report(job.id, 1, 0, "running", pid=30)])
    server.client().cancel(job.id)
    rank = ranks_on(job)["node-b"]
    answer = b.sync(
        [report(job.id, rank, "terminating")],
        steps=[step_report(job.id, 1, 0, "terminating", pid=30)],
    )
    assert answer["tasks"] == answer["steps"] == []  # both must stop
    b.sync(
        [report(job.id, rank, "exited", exit_code=143)],
        steps=[step_report(job.id, 1, 0, "exited", exit_code=143)],
    )
    a.sync()  # neither the job's task nor the step reached node-a's agent
    shown = {s.step: s.tasks[0] for s in server.client().steps(job.id)}
    stopped = ("exited", f"job {job.id} stopped running (cancelled)")
    assert (shown[1].state, shown[1].reason) == stopped
    assert shown[2].state == "lost"
    assert shown[2].reason == f"never started: job {job.id} stopped running (cancelled)"

    second = running(server)
    me = as_job(server, second)
    me.start_step(second.id, "sleep 1000", ["node-b"])
    sync_running(b, second)
    sync_running(b, second, steps=[step_report(second.id, 1, 0, "running", pid=31)])
    b.register(agent_id="a-new-incarnation")  # forgets what it ran
    b.sync()
    lost = server.client().step(second.id, 1, attempt=0).tasks[0]
    assert (lost.state, lost.reason) == ("lost", "the agent of node node-b no longer runs it")


def test_a_step_stops_when_the_jobs_tasks_on_its_node_end(
    server: Server, nodes: dict[str, FakeHardwareAgent]
) -> None:
    job = running(server)
    a, b = nodes["node-a"], nodes["node-b"]
    sync_running(a, job)
    me = as_job(server, job)
    me.start_step(job.id, "sleep 1000", ["node-b"])
    assert sync_running(b, job)["steps"]
    sync_running(b, job, steps=[step_report(job.id, 1, 0, "running", pid=40)])
    rank = ranks_on(job)["node-b"]
    answer = b.sync(
        [report(job.id, rank, "exited", exit_code=0)],
        steps=[step_report(job.id, 1, 0, "running", pid=40)],
    )
    assert answer["steps"] == []  # the job's task there ended: its step must stop too
    assert server.client().get(job.id).state == "running"  # node-a's task still runs
    b.sync(steps=[step_report(job.id, 1, 0, "exited", exit_code=143)])
    stopped = me.step(job.id, 1).tasks[0]
    assert (stopped.state, stopped.reason) == ("exited", "the job's tasks on node node-b ended")
    with pytest.raises(ConflictError, match="tasks on node node-b have ended"):
        me.start_step(job.id, "true", ["node-b"])
    assert [t.node for t in me.start_step(job.id, "true").tasks] == ["node-a"]


def test_concurrent_steps_of_one_job_all_start_numbered_apart(
    server: Server, nodes: dict[str, FakeHardwareAgent]
) -> None:
    """Launchers start steps at once (mpirun's agents, one per node): none is refused."""
    from concurrent.futures import ThreadPoolExecutor

    job = running(server)
    with ThreadPoolExecutor(8) as pool:
        started = list(
            pool.map(lambda i: as_job(server, job).start_step(job.id, ["echo", str(i)]), range(8))
        )
    assert sorted(s.step for s in started) == list(range(1, 9))
