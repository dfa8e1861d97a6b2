"""The level-triggered agent protocol against the real server and database."""

from __future__ import annotations

import base64

import pytest

from tests.e2e.cluster import wait_for
from tests.integration.conftest import Server
from tests.integration.protocol import FakeHardwareAgent, chunk, report


def placed(server: Server, job_id: int) -> None:
    wait_for(lambda: server.client().get(job_id).state == "running", 10, f"job {job_id} placed")


def test_sync_hands_out_tasks_with_their_environment(server: Server) -> None:
    node = FakeHardwareAgent(server, "node-a")
    node.sync()  # reports free ports: MASTER_PORT comes from them
    job = server.client().submit(
        {
            "name": "t",
            "tasks_per_node": 2,
            "resources": {"gpus": 4},
            "command": ["run", "x"],
            "env": {"A": "1"},
            "grace_period": "5s",
        }
    )
    placed(server, job.id)
    tasks = sorted(node.sync()["tasks"], key=lambda t: t["rank"])
    assert [t["rank"] for t in tasks] == [0, 1]
    env0, env1 = tasks[0]["env"], tasks[1]["env"]
    assert env0["A"] == "1" and env0["WORLD_SIZE"] == "2" and env0["LOCAL_WORLD_SIZE"] == "2"
    assert env0["MASTER_ADDR"] == "127.0.0.1" and env0["MASTER_PORT"] == "40001"
    assert env0["CORRAL_GRACE_PERIOD"] == "5" and env0["CORRAL_ATTEMPT"] == "0"
    gpus0, gpus1 = (
        set(env0["CUDA_VISIBLE_DEVICES"].split(",")),
        set(env1["CUDA_VISIBLE_DEVICES"].split(",")),
    )
    assert len(gpus0) == len(gpus1) == 2 and not gpus0 & gpus1
    assert tasks[0]["command"] == ["run", "x"] and tasks[0]["grace_period"] == 5.0
    # asking again gives the same answer (level-triggered)
    assert sorted(t["rank"] for t in node.sync()["tasks"]) == [0, 1]


def test_reports_logs_and_exit_drive_the_job(server: Server) -> None:
    node = FakeHardwareAgent(server, "node-a")
    client = server.client()
    job = client.submit({"command": "x", "resources": {"gpus": 1}})
    placed(server, job.id)
    node.sync()
    answer = node.sync(
        [report(job.id, 0, "running", pid=42, started_at=1.0)], [chunk(job.id, 0, 0, b"hello ")]
    )
    assert answer["acks"] == [
        {"job_id": job.id, "attempt": 0, "rank": 0, "log_offset": 6, "final": False}
    ]
    # a chunk at the wrong offset is ignored and the server says where it is
    answer = node.sync([report(job.id, 0, "running", pid=42)], [chunk(job.id, 0, 0, b"dup")])
    assert answer["acks"][0]["log_offset"] == 6
    node.sync([report(job.id, 0, "running", pid=42)], [chunk(job.id, 0, 6, b"world\n")])
    assert client.logs(job.id) == "hello world\n"
    part = client.log_chunk(job.id, offset=6)
    assert (part.data, part.offset, part.complete) == ("world\n", 12, False)
    answer = node.sync([report(job.id, 0, "exited", exit_code=0, ended_at=2.0)])
    assert answer["acks"][0]["final"] is True and answer["tasks"] == []
    done = client.get(job.id)
    assert done.state == "succeeded" and done.tasks[0].pid == 42
    assert client.log_chunk(job.id).complete
    # unknown tasks are acknowledged as final so the agent stops and forgets them
    answer = node.sync([report(999, 0, "running")])
    assert answer["acks"] == [
        {"job_id": 999, "attempt": 0, "rank": 0, "log_offset": -1, "final": True}
    ]


def test_a_task_cancelled_before_its_agent_saw_it_frees_its_devices(server: Server) -> None:
    node = FakeHardwareAgent(server, "node-a")
    client = server.client()
    job = client.submit({"command": "x", "resources": {"gpus": 8}})
    placed(server, job.id)
    assert client.nodes()[0].gpus_used == 8
    client.cancel(job.id)
    node.sync()  # the agent reports nothing: it never ran the task
    assert client.get(job.id).tasks[0].state == "skipped"
    assert client.nodes()[0].gpus_used == 0


def test_a_task_sent_and_started_is_kept_until_it_exits(server: Server) -> None:
    node = FakeHardwareAgent(server, "node-a")
    client = server.client()
    job = client.submit({"command": "x", "resources": {"gpus": 8}})
    placed(server, job.id)
    assert node.sync()["tasks"]  # handed out
    client.cancel(job.id)
    answer = node.sync([report(job.id, 0, "terminating", pid=7)])
    assert answer["tasks"] == []  # the agent must stop it
    assert client.nodes()[0].gpus_used == 8  # still held while the process lives
    node.sync([report(job.id, 0, "exited", exit_code=143)])
    assert client.nodes()[0].gpus_used == 0
    assert client.get(job.id).state == "cancelled"


def test_preempted_job_requeues_with_the_next_attempt(server: Server) -> None:
    node = FakeHardwareAgent(server, "node-a")
    client = server.client()
    job = client.submit({"command": "x", "resources": {"gpus": 8}})
    placed(server, job.id)
    node.sync()
    node.sync([report(job.id, 0, "running", pid=7)])
    assert client.preempt(job.id).state == "preempting"
    assert node.sync([report(job.id, 0, "running", pid=7)])["tasks"] == []
    node.sync([report(job.id, 0, "exited", exit_code=0)])
    wait_for(lambda: client.get(job.id).attempt == 1, 10, "the requeue")
    placed(server, job.id)
    again = node.sync()["tasks"]
    assert [(t["attempt"], t["env"]["CORRAL_ATTEMPT"]) for t in again] == [(1, "1")]
    events = [(e.from_state, e.to_state) for e in client.get(job.id).events]
    assert ("preempting", "pending") in events


def test_a_restarted_agent_loses_its_old_tasks(server: Server) -> None:
    node = FakeHardwareAgent(server, "node-a")
    client = server.client()
    job = client.submit({"command": "x", "resources": {"gpus": 8}})
    placed(server, job.id)
    node.sync()
    node.sync([report(job.id, 0, "running", pid=7)])
    node.register(agent_id="a-new-incarnation")
    shown = client.get(job.id)
    assert shown.attempt == 1
    assert "agent on node-a restarted" in " ".join(e.reason for e in shown.events)
    # the old incarnation is refused
    node.agent_id = "the-old-one"
    refused = node.http.post(
        "/agent/sync", json={"node": "node-a", "agent_id": "the-old-one", "tasks": [], "logs": []}
    )
    assert refused.status_code in (401, 409)


def test_logs_are_binary_safe(server: Server) -> None:
    node = FakeHardwareAgent(server, "node-a")
    client = server.client()
    job = client.submit({"command": "x"})
    placed(server, job.id)
    node.sync()
    raw = "naïve ✓\n".encode() + b"\xff\n"
    node.sync([report(job.id, 0, "exited", exit_code=0)], [chunk(job.id, 0, 0, raw)])
    text = client.logs(job.id)
    assert text.startswith("naïve ✓\n") and base64.b64encode(raw)


@pytest.mark.parametrize(
    ("requeue", "exit_code", "state", "attempt"),
    [
        pytest.param(False, 0, "pending", 1, id="exit-0-in-grace-requeues-anyway"),
        pytest.param(False, 143, "failed", 0, id="killed-without-requeue-fails"),
        pytest.param(True, 137, "pending", 1, id="killed-with-requeue-requeues"),
    ],
)
def test_how_a_preempted_job_ends(
    server: Server, requeue: bool, exit_code: int, state: str, attempt: int
) -> None:
    node = FakeHardwareAgent(server, "node-a")
    client = server.client()
    job = client.submit({"command": "x", "resources": {"gpus": 8}, "requeue": requeue})
    placed(server, job.id)
    node.sync()
    node.sync([report(job.id, 0, "running", pid=7)])
    client.preempt(job.id)
    node.sync([report(job.id, 0, "exited", exit_code=exit_code)])
    after = client.get(job.id)
    if state == "pending":  # it may already be placed again by the next cycle
        assert after.attempt == attempt and after.state in ("pending", "running")
    else:
        assert (after.state, after.attempt) == (state, attempt)
        assert "requeue is false" in (after.reason or "")


@pytest.mark.server_options(node_timeout=1.0)
def test_a_lost_node_that_returns_keeps_its_old_tasks_devices_until_they_end(
    server: Server,
) -> None:
    node = FakeHardwareAgent(server, "node-a")
    client = server.client()
    job = client.submit({"command": "x", "resources": {"gpus": 8}})
    placed(server, job.id)
    node.sync()
    node.sync([report(job.id, 0, "running", pid=7)])
    # the agent goes silent: the node is lost and the job requeued...
    wait_for(lambda: client.nodes()[0].state == "lost", 10, "the node to be lost")
    requeued = client.get(job.id)
    assert requeued.attempt == 1 and requeued.state == "pending"
    # ...but its devices stay held: the old process may still run there
    assert client.nodes()[0].gpus_used == 8
    # the agent comes back, still running the old task: it must stop it
    answer = node.sync([report(job.id, 0, "running", pid=7)])
    assert answer["tasks"] == [] and answer["acks"][0]["final"] is True
    assert client.nodes()[0].state == "ready" and client.nodes()[0].gpus_used == 8
    assert client.get(job.id).state == "pending"  # nothing new lands beside the old process
    node.sync([report(job.id, 0, "exited", exit_code=143)])
    placed(server, job.id)
    assert [(t["attempt"], t["rank"]) for t in node.sync()["tasks"]] == [(1, 0)]


@pytest.mark.server_options(node_timeout=1.0)
def test_a_returning_agent_that_lost_the_process_frees_the_devices(server: Server) -> None:
    node = FakeHardwareAgent(server, "node-a")
    client = server.client()
    job = client.submit({"command": "x", "resources": {"gpus": 8}})
    # the node syncs while it waits (a 1 s timeout: a loaded machine may take longer to place)
    wait_for(lambda: node.sync() and client.get(job.id).state == "running", 10, "placed")
    node.sync()
    node.sync([report(job.id, 0, "running", pid=7)])
    wait_for(lambda: client.nodes()[0].state == "lost", 10, "the node to be lost")
    node.sync()  # it reports nothing: the old task is not running there
    wait_for(lambda: node.sync() and client.get(job.id).state == "running", 10, "placed again")
    assert client.get(job.id).attempt == 1


def test_fractional_jobs_share_one_device_and_whole_jobs_avoid_it(server: Server) -> None:
    node = FakeHardwareAgent(server, "node-a", gpus=2)
    client = server.client()
    halves = [client.submit({"command": "x", "resources": {"gpus": 0.5}}).id for _ in range(2)]
    whole = client.submit({"command": "x", "resources": {"gpus": 1}}).id
    for job_id in [*halves, whole]:
        placed(server, job_id)
    tasks = {t["job_id"]: t["env"]["CUDA_VISIBLE_DEVICES"] for t in node.sync()["tasks"]}
    assert tasks[halves[0]] == tasks[halves[1]] != tasks[whole]
    shared = client.get(halves[0]).tasks[0]
    assert shared.gpu_share == 0.5
    assert client.nodes()[0].gpus_used == 2


def test_a_share_is_told_its_fraction_and_memory(server: Server) -> None:
    node = FakeHardwareAgent(server, "node-a", gpus=2)
    client = server.client()
    share = client.submit({"command": "x", "resources": {"gpus": 0.25, "gpu_memory": "2GiB"}}).id
    whole = client.submit({"command": "x", "resources": {"gpus": 1}}).id
    for job_id in (share, whole):
        placed(server, job_id)
    env = {t["job_id"]: t["env"] for t in node.sync()["tasks"]}
    assert env[share]["CORRAL_GPU_FRACTION"] == "0.25"
    assert env[share]["CORRAL_GPU_MEMORY"] == str(2 * 1024**3)
    assert env[share]["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
    assert not {"CORRAL_GPU_FRACTION", "CORRAL_GPU_MEMORY"} & set(env[whole])
