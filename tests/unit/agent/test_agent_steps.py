"""The agent runs a job step's tasks beside the job's own: tracked and reported apart
(``steps``, ``step_logs``), logged apart, forgotten once the server holds their exit and
log, and re-adopted by a restarted agent. Real processes, an agent without a server."""

from __future__ import annotations

import base64
import time
from pathlib import Path

import pytest

from corral.agent.agent import Agent
from corral.agent.supervisor import TaskState
from corral.schemas.agent import (
    DesiredStepTask,
    DesiredTask,
    StepAck,
    SyncRequest,
    SyncResponse,
)
from tests.unit.agent.helpers import offline_agent

pytestmark = [pytest.mark.timeout(60)]


@pytest.fixture
def agent(tmp_path: Path) -> Agent:
    made = offline_agent(tmp_path, "steps-test")
    yield made
    made.supervisor.stop_all(grace_period=0)


def task(command: str) -> DesiredTask:
    return DesiredTask(
        job_id=1, attempt=0, rank=0, command=command, env={}, workdir=None, grace_period=1.0
    )


def step_task(command: str, step: int = 1, rank: int = 0) -> DesiredStepTask:
    return DesiredStepTask(
        job_id=1,
        attempt=0,
        step=step,
        rank=rank,
        command=command,
        env={"CORRAL_STEP_ID": str(step)},
        workdir=None,
        grace_period=1.0,
    )


def answer(
    tasks: list[DesiredTask], steps: list[DesiredStepTask], acks: list[StepAck] = ()
) -> SyncResponse:
    return SyncResponse(
        tasks=tasks, acks=[], steps=steps, step_acks=list(acks), sync_interval=1.0, log_cap=0
    )


def settled(agent: Agent, exited: int) -> SyncRequest:
    """The next request once ``exited`` of the agent's processes have exited."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        statuses = agent.supervisor.poll()
        if sum(s.state is TaskState.EXITED for s in statuses) >= exited:
            return agent._build_request()
        time.sleep(0.05)
    raise AssertionError("the processes did not exit")


def test_a_step_task_runs_and_reports_apart_from_the_jobs_task(agent: Agent) -> None:
    agent._apply(answer([task("sleep 30")], [step_task('echo "step $CORRAL_STEP_ID"; exit 4')]))
    request = settled(agent, exited=1)
    assert [(r.job_id, r.rank, r.state) for r in request.tasks] == [(1, 0, "running")]
    (report,) = request.steps
    assert (report.step, report.rank, report.state, report.exit_code) == (1, 0, "exited", 4)
    (chunk,) = request.step_logs
    assert (chunk.step, base64.b64decode(chunk.data)) == (1, b"step 1\n")
    assert request.logs == []  # the job's task said nothing
    path = agent.steps[(1, 0, 1, 0)].launch.log_path
    assert path.parent.name == "step-1" and path.parent.parent == (
        agent.tasks[(1, 0, 0)].launch.log_path.parent
    )
    # still wanted by nobody, and the server holds it all: forgotten, its log deleted
    ack = StepAck(job_id=1, attempt=0, step=1, rank=0, log_offset=7, final=True)
    agent._apply(answer([task("sleep 30")], [], [ack]))
    assert (1, 0, 1, 0) not in agent.steps and not path.exists()
    assert (1, 0, 0) in agent.tasks


def test_a_step_task_no_longer_wanted_is_stopped(agent: Agent) -> None:
    agent._apply(answer([task("sleep 30")], [step_task("sleep 30", step=2, rank=3)]))
    agent._apply(answer([task("sleep 30")], []))
    request = settled(agent, exited=1)
    (report,) = request.steps
    assert (report.step, report.rank, report.state) == (2, 3, "exited")
    assert report.exit_code == 143  # SIGTERM
    assert [r.state for r in request.tasks] == ["running"]


def test_a_restarted_agent_readopts_its_step_tasks(tmp_path: Path) -> None:
    first = offline_agent(tmp_path, "steps-restart")
    first._apply(answer([], [step_task("sleep 30", step=5, rank=1)]))
    first.supervisor.detach()  # the agent goes away, its processes stay
    second = offline_agent(tmp_path, "steps-restart")
    try:
        second.recover()
        assert list(second.steps) == [(1, 0, 5, 1)] and second.tasks == {}
        (report,) = second._build_request().steps
        assert (report.step, report.rank, report.state) == (5, 1, "running")
    finally:
        second.supervisor.stop_all(grace_period=0)
