"""The agent's side of log shipping, with a real task process and a real log file: an exit
is reported at once (the rest of the log follows), the log cap skips the oldest part, and
what the server acknowledged is freed on disk and finally deleted."""

from __future__ import annotations

import base64
import sys
import time
from pathlib import Path

import pytest

from corral.agent import logship
from corral.agent.agent import Agent, foreign_env, task_base_env
from corral.agent.supervisor import TaskState
from corral.schemas.agent import DesiredTask, SyncRequest, SyncResponse, TaskAck
from tests.unit.agent.helpers import offline_agent

LINE = b"y" * 99 + b"\n"
LOUD = "import sys\nfor _ in range(100_000):\n    sys.stdout.write('y' * 99 + '\\n')\n"


@pytest.fixture
def agent(tmp_path: Path) -> Agent:
    made = offline_agent(tmp_path, "logs-test")
    yield made
    made.supervisor.stop_all(grace_period=0)


def answer(tasks: list[DesiredTask], acks: list[TaskAck] = (), cap: int = 0) -> SyncResponse:
    return SyncResponse(tasks=tasks, acks=list(acks), sync_interval=1.0, log_cap=cap)


def loud_task() -> DesiredTask:
    return DesiredTask(
        job_id=1,
        attempt=0,
        rank=0,
        command=[sys.executable, "-c", LOUD],
        env={},
        workdir=None,
        grace_period=1.0,
    )


def exited_request(agent: Agent) -> SyncRequest:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if all(s.state is TaskState.EXITED for s in agent.supervisor.poll()):
            return agent._build_request()
        time.sleep(0.05)
    raise AssertionError("the task did not exit")


def test_an_exit_is_reported_at_once_and_the_rest_of_the_log_follows(agent: Agent) -> None:
    agent._apply(answer([loud_task()]))
    request = exited_request(agent)  # 10 MB of log, more than one sync carries
    (report,) = request.tasks
    assert report.state == "exited" and report.exit_code == 0
    (chunk,) = request.logs
    assert chunk.offset == 0
    assert len(base64.b64decode(chunk.data)) == logship.FINAL_CHUNK
    path = agent.tasks[(1, 0, 0)].launch.log_path
    assert path.stat().st_size == 100_000 * len(LINE)

    # The server holds the first piece: its blocks are freed, the next piece follows.
    held = logship.FINAL_CHUNK
    blocks = path.stat().st_blocks
    agent._apply(answer([], [TaskAck(job_id=1, attempt=0, rank=0, log_offset=held, final=True)]))
    assert path.stat().st_blocks < blocks
    assert path.exists()  # not drained yet: kept
    (chunk,) = agent._build_request().logs
    assert chunk.offset == held
    # Once the server holds everything, the agent forgets the task and deletes its log.
    size = path.stat().st_size
    agent._apply(answer([], [TaskAck(job_id=1, attempt=0, rank=0, log_offset=size, final=True)]))
    agent._apply(answer([]))
    assert not path.exists() and (1, 0, 0) not in agent.tasks


def test_past_the_log_cap_the_oldest_part_is_skipped(agent: Agent) -> None:
    cap = 1_000_000
    agent._apply(answer([loud_task()], cap=cap))
    request = exited_request(agent)
    (chunk,) = request.logs
    size = 100_000 * len(LINE)
    assert chunk.offset == size - cap  # the server records the bytes before as dropped
    assert len(base64.b64decode(chunk.data)) == cap


def test_tasks_never_inherit_corral_settings() -> None:
    environ = {
        "PATH": "/usr/bin",
        "CORRAL_TOKEN": "crl_secret",
        "CORRAL_JOIN_TOKEN": "crl_join",
        "CORRAL_HOME": "/srv/corral",
        "CORRAL_SERVER": "http://x",
        "LC_ALL": "C.UTF-8",
        "AWS_SECRET_ACCESS_KEY": "agent's own",
        "NCCL_DEBUG": "INFO",
    }
    assert not any(k.startswith("CORRAL_") for k in task_base_env(environ))
    assert foreign_env(environ) == {"PATH": "/usr/bin", "LC_ALL": "C.UTF-8", "NCCL_DEBUG": "INFO"}


def quiet_task() -> DesiredTask:
    return DesiredTask(
        job_id=2,
        attempt=0,
        rank=0,
        command=["sleep", "30"],
        env={},
        workdir=None,
        grace_period=1.0,
    )


def test_an_agent_whose_tasks_run_quietly_syncs_at_the_heartbeat(agent: Agent) -> None:
    """Issue 21: a node whose tasks print nothing costs the server a sync per heartbeat,
    not one per interval; log bytes the server lacks, or a wake, bring the sync at once."""
    agent._apply(answer([quiet_task()]))
    agent._wake.clear()
    agent.interval, agent.heartbeat = 0.02, 0.6
    began = time.monotonic()
    agent._pause()
    assert time.monotonic() - began >= 0.6  # not at the interval: nothing new to say
    path = agent.tasks[(2, 0, 0)].launch.log_path
    path.write_bytes(b"news\n")  # as the task would: bytes the server lacks
    agent.heartbeat = 60.0
    began = time.monotonic()
    agent._pause()
    assert time.monotonic() - began < 30  # at the next interval, not the heartbeat
    path.write_bytes(b"")
    agent._wake.set()  # new work, a start or an exit
    began = time.monotonic()
    agent._pause()
    assert time.monotonic() - began < 30 and not agent._wake.is_set()
