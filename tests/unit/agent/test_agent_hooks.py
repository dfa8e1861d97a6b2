"""The agent runs its node hooks once per job attempt: the prolog before the attempt's first
task starts here, the epilog once its last one ended; a failed prolog keeps the tasks from
starting and is reported; a restarted agent runs neither again. Real processes and real
hook scripts, an agent without a server (the test plays the server's answers)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.agent.agent import Agent, AgentSettings
from corral.agent.hooks import HookSettings
from corral.agent.host import describe_host
from corral.agent.supervisor import TaskState
from corral.schemas.agent import DesiredTask, SyncResponse
from tests.unit.agent.test_supervisor import pid_alive, wait_for

pytestmark = [pytest.mark.timeout(60)]


class Node:
    """One node's agent home and hook scripts; the agents of its successive lives."""

    def __init__(self, tmp: Path, prolog: str | None = None, epilog: str | None = None) -> None:
        self.tmp = tmp
        self.log = tmp / "hooks.log"
        self.prolog = self._script("prolog", prolog)
        self.epilog = self._script("epilog", epilog)
        self.agents: list[Agent] = []

    def _script(self, name: str, body: str | None) -> Path | None:
        if body is None:
            return None
        path = self.tmp / name
        record = 'echo "$CORRAL_HOOK $CORRAL_JOB_ID/$CORRAL_ATTEMPT gpus=$CORRAL_JOB_GPUS"'
        path.write_text(f"#!/bin/sh\n{record} >> {self.log}\n{body}\n")
        path.chmod(0o755)
        return path

    def agent(self) -> Agent:
        """A new life of the node's agent (the previous one went away, its tasks stay)."""
        if self.agents:
            self.agents[-1].supervisor.detach()
        settings = AgentSettings(
            servers=["http://127.0.0.1:9"],
            join_token="unused",
            name="hooks-test",
            address="127.0.0.1",
            node=describe_host("2xH100", {}),
            home=self.tmp / "agent",
            checkpoint_root=self.tmp / "checkpoints",
            contain=False,
            hooks=HookSettings(prolog=self.prolog, epilog=self.epilog, timeout=20),
        )
        self.agents.append(Agent(settings))
        self.agents[-1].recover()
        return self.agents[-1]

    def runs(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []

    def stop(self) -> None:
        for agent in self.agents:
            agent.hooks.close()
        if self.agents:
            self.agents[-1].supervisor.stop_all(grace_period=0)


@pytest.fixture
def make_node(tmp_path: Path) -> Iterator:
    made: list[Node] = []

    def make(prolog: str | None = None, epilog: str | None = None) -> Node:
        made.append(Node(tmp_path, prolog, epilog))
        return made[-1]

    yield make
    for node in made:
        node.stop()


def task(command: str, rank: int = 0, job_id: int = 1) -> DesiredTask:
    return DesiredTask(
        job_id=job_id,
        attempt=0,
        rank=rank,
        command=command,
        env={"CORRAL_JOB_NAME": "t"},
        workdir=None,
        grace_period=1.0,
        gpus=[rank],
    )


def answer(*tasks: DesiredTask) -> SyncResponse:
    return SyncResponse(tasks=list(tasks), acks=[], sync_interval=1.0, log_cap=0)


def started(agent: Agent, response: SyncResponse, count: int) -> None:
    """Apply ``response`` (as each sync would) until ``count`` tasks were started."""
    wait_for(lambda: agent._apply(response) or len(agent.tasks) >= count, 10, "tasks to start")


def ended(agent: Agent) -> None:
    def done() -> bool:
        return all(s.state is TaskState.EXITED for s in agent.supervisor.poll())

    wait_for(done, 10, "the tasks to end")


def test_the_prolog_runs_once_before_the_tasks_and_the_epilog_once_after(
    make_node, tmp_path: Path
) -> None:
    go = tmp_path / "go"  # the prolog waits for it: the tasks must not start meanwhile
    node = make_node(prolog=f"while [ ! -e {go} ]; do sleep 0.01; done", epilog="")
    agent = node.agent()
    wanted = answer(task("exit 0", 0), task("exit 0", 1))
    agent._apply(wanted)
    agent._apply(wanted)
    assert agent.tasks == {} and agent._build_request().tasks == []  # nothing reported yet
    wait_for(lambda: node.runs() == ["prolog 1/0 gpus=0,1"], 10, "the prolog to start")
    go.touch()
    started(agent, wanted, 2)
    ended(agent)
    assert node.runs() == ["prolog 1/0 gpus=0,1"]  # no epilog while the server wants them
    agent._apply(answer())  # the server recorded both exits
    wait_for(lambda: len(node.runs()) == 2, 10, "the epilog")
    assert node.runs()[1] == "epilog 1/0 gpus=0,1"
    wait_for(lambda: not _hook_threads(), 10, "the epilog to end")
    for _ in range(3):
        agent._apply(answer())
    assert len(node.runs()) == 2 and list((node.tmp / "agent/state/hooks").iterdir()) == []


def test_a_failed_prolog_keeps_the_tasks_back_and_is_reported_until_taken(make_node) -> None:
    node = make_node(prolog="echo 'GPU 1 ECC errors' >&2; exit 1", epilog="")
    agent = node.agent()
    wanted = answer(task("exit 0"))

    def failures() -> list:
        agent._apply(wanted)
        return agent._build_request().hook_failures

    (failure,) = wait_for(failures, 10, "the prolog to fail")
    assert (failure.job_id, failure.attempt, failure.hook, failure.exit_code) == (1, 0, "prolog", 1)
    assert failure.reason == "prolog failed (exit 1): GPU 1 ECC errors"
    assert agent.tasks == {}
    again = node.agent()  # a restart before the report: still reported, not run again
    assert again.hooks.failures() == [failure]
    again._apply(wanted)
    again.hooks.reported([failure])
    assert again._build_request().hook_failures == [] and again.tasks == {}
    again._apply(answer())  # the server requeued the job: no epilog (nothing ran here)
    assert node.runs() == ["prolog 1/0 gpus=0"]
    assert list((node.tmp / "agent/state/hooks").iterdir()) == []


def test_a_restarted_agent_runs_neither_hook_again(make_node) -> None:
    node = make_node(prolog="", epilog="sleep 0.2")
    first = node.agent()
    wanted = answer(task("sleep 30"))
    started(first, wanted, 1)
    second = node.agent()  # re-adopts the running task: no second prolog
    second._apply(wanted)
    assert list(second.tasks) == [(1, 0, 0)] and node.runs() == ["prolog 1/0 gpus=0"]
    second._apply(answer())  # cancelled: the task is stopped, then the epilog runs
    ended(second)
    second._apply(answer())
    wait_for(lambda: len(node.runs()) == 2, 10, "the epilog")
    wait_for(lambda: not _hook_threads(), 10, "the epilog to end")
    third = node.agent()  # its exited task is still tracked (the server has not acked it)
    third._apply(answer())
    assert not _hook_threads() and node.runs() == ["prolog 1/0 gpus=0", "epilog 1/0 gpus=0"]


def test_a_new_job_waits_for_the_epilog_of_the_last_one(make_node, tmp_path: Path) -> None:
    go = tmp_path / "go"
    node = make_node(epilog=f"while [ ! -e {go} ]; do sleep 0.01; done")
    agent = node.agent()
    started(agent, answer(task("exit 0")), 1)
    ended(agent)
    agent._apply(answer())  # the epilog of job 1 starts
    wait_for(lambda: node.runs() == ["epilog 1/0 gpus=0"], 10, "the epilog")
    next_job = answer(task("exit 0", job_id=2))
    agent._apply(next_job)
    assert (2, 0, 0) not in agent.tasks
    go.touch()
    wait_for(lambda: agent._apply(next_job) or (2, 0, 0) in agent.tasks, 10, "job 2 to start")


def _hook_threads() -> list[threading.Thread]:
    return [
        t for t in threading.enumerate() if t.name.startswith(("corral-prolog", "corral-epilog"))
    ]


def test_a_stopping_agent_kills_its_running_hooks_and_reports_nothing(
    make_node, tmp_path: Path
) -> None:
    pid_file = tmp_path / "pid"
    node = make_node(prolog=f"echo $$ > {pid_file}; sleep 300")
    agent = node.agent()
    agent._apply(answer(task("exit 0")))
    pid = int(wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(), 10, "the pid"))
    agent.hooks.close()
    assert not _hook_threads() and not pid_alive(pid)
    assert agent.hooks.failures() == [] and agent.tasks == {}
    assert list((node.tmp / "agent/state/hooks").iterdir()) == []  # it runs again at start
