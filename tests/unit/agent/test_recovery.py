"""Tests for re-adopting tasks after an agent restart: a second supervisor over the same
state directory. The first one is detached (an agent that went away without stopping its
tasks); its shims remain children of this test process, which recovery must not rely on."""

from __future__ import annotations

import json
import logging
import os
import signal
import stat
import subprocess
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from corral.agent.cgroups import CgroupManager, Limits
from corral.agent.identity import current_account
from corral.agent.supervisor import ProcessSupervisor, TaskLaunch, TaskState
from corral.agent.taskstate import TaskStore, process_alive
from tests.unit.agent.helpers import MODES, cgroups_for
from tests.unit.agent.test_supervisor import GRACEFUL, STUBBORN, pid_alive, py, read_pids, wait_for

pytestmark = [pytest.mark.timeout(120)]

# Waits for argv[1] to appear, then exits with code argv[2].
WAIT_THEN_EXIT = """
import os, sys, time
while not os.path.exists(sys.argv[1]):
    time.sleep(0.02)
sys.exit(int(sys.argv[2]))
"""


class Node:
    """One node's state directory and cgroups, and the supervisors of its agent's lives."""

    def __init__(self, tmp: Path, cgroups: CgroupManager | None) -> None:
        self.tmp = tmp
        self.state_dir = tmp / "state" / "tasks"
        self.cgroups = cgroups
        self.exits: list[str] = []
        self.sup = self.new()

    def new(self) -> ProcessSupervisor:
        return ProcessSupervisor(
            on_exit=self.exits.append, state_dir=self.state_dir, cgroups=self.cgroups
        )

    def restart(self) -> ProcessSupervisor:
        """The agent goes away without stopping its tasks, and a new one starts."""
        self.sup.detach()
        self.sup = self.new()
        return self.sup

    def launch(self, key: str, command: list[str] | str, grace: float = 5.0) -> TaskLaunch:
        return TaskLaunch(
            key=key,
            command=command,
            env={"K": key},
            workdir=None,
            log_path=self.tmp / "logs" / f"{key}.log",
            grace_period=grace,
            limits=Limits(memory=512 << 20, pids=100),
            meta={"job_id": 7, "gpus": [0, 1], "note": key},
        )

    def wait_exited(self, key: str, timeout: float = 30.0) -> None:
        def exited() -> bool:
            status = self.sup.status(key)
            return status is not None and status.state is TaskState.EXITED

        wait_for(exited, timeout, what=f"task {key} to exit")


@pytest.fixture(params=MODES)
def node(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Node]:
    cgroups = cgroups_for(request.param)
    node = Node(tmp_path, cgroups)
    yield node
    node.sup.stop_all(grace_period=0, wait=True)
    if cgroups is not None:
        for name in cgroups.list_tasks():
            cgroups.get(name).kill(timeout=10)
            cgroups.get(name).remove()
        assert cgroups.remove_root()


def shim_gone(pid: int) -> bool:
    return not pid_alive(pid)


def test_running_task_is_readopted_and_can_be_stopped(node: Node) -> None:
    ready = node.tmp / "ready"
    launch = node.launch("run", py(GRACEFUL, ready))
    started = node.sup.start(launch)
    wait_for(ready.exists, what="task ready")

    sup = node.restart()
    [(recovered, status)] = sup.recover()
    assert recovered == launch  # meta, limits and all
    assert status.state is TaskState.RUNNING
    assert status.adopted
    assert status.pid == started.pid
    assert status.started_at == started.started_at

    sup.stop("run")
    node.wait_exited("run")
    final = sup.status("run")
    assert final is not None
    assert (final.exit_code, final.stop_requested, final.adopted) == (0, True, True)
    wait_for(lambda: node.exits == ["run"], what="on_exit for the adopted task")
    assert started.pid is not None
    wait_for(lambda: shim_gone(started.pid), what="shim gone")  # type: ignore[arg-type]

    sup.forget("run")
    assert list(node.state_dir.iterdir()) == []  # record and exit-status file gone
    if node.cgroups is not None:
        assert node.cgroups.list_tasks() == []


def test_adopted_task_killed_at_its_deadline(node: Node) -> None:
    ready = node.tmp / "ready"
    node.sup.start(node.launch("s", py(STUBBORN, ready), grace=0.3))
    wait_for(ready.exists, what="task ready")
    sup = node.restart()
    sup.recover()
    sup.stop("s")
    node.wait_exited("s")
    assert sup.status("s").exit_code == 137  # type: ignore[union-attr]


def test_exit_code_of_a_task_that_ended_while_the_agent_was_down(node: Node) -> None:
    go = node.tmp / "go"
    started = node.sup.start(node.launch("e", py(WAIT_THEN_EXIT, go, 7)))
    assert started.pid is not None
    node.sup.detach()
    go.touch()
    wait_for(lambda: shim_gone(started.pid), what="the task to end")  # type: ignore[arg-type]

    node.sup = node.new()
    [(launch, status)] = node.sup.recover()
    assert launch.key == "e"
    assert (status.state, status.exit_code, status.reason) == (TaskState.EXITED, 7, None)
    assert status.ended_at is not None
    assert node.exits == []  # recover() returns these; on_exit is not called for them
    node.sup.forget("e")
    assert list(node.state_dir.iterdir()) == []


def test_unknown_exit_when_the_shim_died_without_reporting(node: Node) -> None:
    pid_file = node.tmp / "pid"
    code = "import os, sys, time; open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(1000)"
    started = node.sup.start(node.launch("k", py(code, pid_file)))
    assert started.pid is not None
    [command] = read_pids(pid_file, 1)
    node.sup.detach()
    os.kill(started.pid, signal.SIGKILL)  # the shim, before it could write a status
    wait_for(lambda: shim_gone(started.pid), what="the shim to die")  # type: ignore[arg-type]

    node.sup = node.new()
    [(_, status)] = node.sup.recover()
    assert (status.state, status.exit_code) == (TaskState.EXITED, 137)
    assert status.reason == "exit status unknown: the task ended while the agent was down"
    wait_for(lambda: not pid_alive(command), what="what was left of the task to be killed")


def test_outcome_recorded_before_the_restart_is_reported(node: Node) -> None:
    node.sup.start(node.launch("o", py("import sys; sys.exit(3)")))
    node.wait_exited("o")
    before = node.sup.status("o")
    [(_, status)] = node.restart().recover()
    assert before is not None
    assert (status.state, status.exit_code, status.ended_at) == (
        TaskState.EXITED,
        3,
        before.ended_at,
    )
    assert status.peak_memory == before.peak_memory
    assert status.cpu_seconds == before.cpu_seconds


def test_stragglers_of_a_task_that_ended_while_down_are_killed(node: Node) -> None:
    if node.cgroups is None:
        pytest.skip("without cgroups a daemon that left the group is not the task's")
    pids_file = node.tmp / "pids"
    code = """
    import subprocess, sys
    kid = subprocess.Popen(["sleep", "1000"], start_new_session=True)
    open(sys.argv[1], "w").write(str(kid.pid))
    """
    node.sup.start(node.launch("d", py(code, pids_file)))
    node.sup.detach()
    [daemon] = read_pids(pids_file, 1)
    node.sup = node.new()
    wait_for(lambda: not process_alive(_record(node, "d")["pid"], None), what="the shim to end")
    [(_, status)] = node.sup.recover()
    assert (status.state, status.exit_code) == (TaskState.EXITED, 0)
    assert not pid_alive(daemon)
    assert node.cgroups.list_tasks() == []


def test_reused_pid_is_not_mistaken_for_the_shim(node: Node) -> None:
    ready = node.tmp / "ready"
    started = node.sup.start(node.launch("r", py(GRACEFUL, ready)))
    wait_for(ready.exists, what="task ready")
    node.sup.detach()
    path = next(node.state_dir.glob("*.json"))
    record = json.loads(path.read_text())
    record["pid_start"] += 1  # as if the pid now belonged to another process
    path.write_text(json.dumps(record))

    node.sup = node.new()
    [(_, status)] = node.sup.recover()
    assert status.state is TaskState.EXITED
    assert started.pid is not None
    if node.cgroups is not None:  # its cgroup is the task's: killed with everything in it
        wait_for(lambda: shim_gone(started.pid), what="the task killed")  # type: ignore[arg-type]
    else:  # a process that is not the task's is left alone
        assert pid_alive(started.pid)
        os.killpg(started.pid, signal.SIGKILL)


def test_cgroup_without_a_record_is_killed(node: Node, caplog: pytest.LogCaptureFixture) -> None:
    if node.cgroups is None:
        pytest.skip("needs cgroups")
    stray = node.cgroups.create("stray-1", Limits())
    proc = subprocess.Popen(["sleep", "1000"], start_new_session=True)
    stray.add(proc.pid)
    node.sup.start(node.launch("keep", py("import time; time.sleep(1000)")))
    node.sup.detach()

    node.sup = node.new()
    with caplog.at_level(logging.WARNING, logger="corral.agent.supervisor"):
        [(_, status)] = node.sup.recover()
    assert status.state is TaskState.RUNNING  # the recorded task is kept
    assert proc.wait(timeout=10) == -signal.SIGKILL
    assert node.cgroups.list_tasks() == [_record(node, "keep")["cgroup"]]
    assert any("stray-1" in r.getMessage() for r in caplog.records)


def test_state_is_private(node: Node) -> None:
    node.sup.start(node.launch("p", py("pass")))
    node.wait_exited("p")
    assert stat.S_IMODE(node.state_dir.stat().st_mode) == 0o700
    files = list(node.state_dir.iterdir())
    assert sorted(p.suffix for p in files) == [".exit", ".json"]
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in files)


def test_records_round_trip_accounts(tmp_path: Path) -> None:
    store = TaskStore(tmp_path / "s")
    launch = TaskLaunch(
        "a/0/1", "true", {}, "/w", tmp_path / "x.log", 2.0, account=current_account()
    )
    sup = ProcessSupervisor(state_dir=tmp_path / "s")
    sup.start(replace(launch, workdir=None))
    [record] = store.load_all()
    assert record.launch == replace(launch, workdir=None)
    assert record.meta == {}
    sup.stop_all()


def _record(node: Node, key: str) -> dict:  # type: ignore[type-arg]
    for path in node.state_dir.glob("*.json"):
        record = json.loads(path.read_text())
        if record["launch"]["key"] == key:
            return record
    raise AssertionError(f"no record of {key}")
