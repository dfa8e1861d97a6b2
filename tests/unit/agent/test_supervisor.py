"""Tests for ProcessSupervisor with real child processes and real signals.

Tests taking the ``h`` fixture run twice: with tasks as bare process groups (the fallback)
and, where this host allows (root, a writable cgroupfs), with a cgroup per task.
"""

from __future__ import annotations

import os
import signal
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from corral.agent.cgroups import CgroupManager
from corral.agent.supervisor import (
    MAX_GRACE,
    ProcessSupervisor,
    TaskLaunch,
    TaskState,
    TaskStatus,
)
from tests.unit.agent.helpers import MODES, cgroups_for

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc"),
]

T = TypeVar("T")

# A child that exits 0 on SIGTERM; touches argv[1] once the handler is installed.
GRACEFUL = """
import pathlib, signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
pathlib.Path(sys.argv[1]).touch()
while True:
    time.sleep(0.05)
"""

# A child that ignores SIGTERM; touches argv[1] once it does.
STUBBORN = """
import pathlib, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
pathlib.Path(sys.argv[1]).touch()
while True:
    time.sleep(0.05)
"""


def py(code: str, *args: str | Path) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(code), *map(str, args)]


def wait_for(check: Callable[[], T], timeout: float = 5.0, what: str = "condition") -> T:
    """Poll ``check`` every 10 ms until it returns something truthy; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.01)


def pid_alive(pid: int) -> bool:
    """True if ``pid`` exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    state = next((line.split()[1] for line in status.splitlines() if line.startswith("State:")), "")
    return state not in ("Z", "X")


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) pids in process group ``pgid``."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_bytes()
        except OSError:
            continue
        state, _ppid, pgrp = stat[stat.rfind(b")") + 2 :].split()[:3]
        if int(pgrp) == pgid and state not in (b"Z", b"X"):
            members.append(int(entry.name))
    return members


def read_pids(path: Path, count: int) -> list[int]:
    def ready() -> list[int] | None:
        lines = path.read_text().split() if path.exists() else []
        return [int(x) for x in lines] if len(lines) >= count else None

    return wait_for(ready, what=f"{count} pids in {path}")


class Harness:
    """A supervisor plus helpers to build launches and wait on tasks."""

    def __init__(self, tmp_path: Path, cgroups: CgroupManager | None = None) -> None:
        self.tmp = tmp_path
        self.exits: list[str] = []
        self.cgroups = cgroups
        self.sup = ProcessSupervisor(on_exit=self.exits.append, cgroups=cgroups)

    def launch(
        self,
        key: str,
        command: list[str] | str,
        *,
        env: dict[str, str] | None = None,
        workdir: str | None = None,
        grace: float = 5.0,
        log_path: Path | None = None,
    ) -> TaskLaunch:
        return TaskLaunch(
            key=key,
            command=command,
            env=env or {},
            workdir=workdir,
            log_path=log_path or self.tmp / "logs" / f"{key.replace('/', '_')}.log",
            grace_period=grace,
        )

    def start(self, key: str, command: list[str] | str, **kwargs: object) -> TaskStatus:
        return self.sup.start(self.launch(key, command, **kwargs))  # type: ignore[arg-type]

    def wait_exited(self, key: str, timeout: float = 5.0) -> TaskStatus:
        # status() does not reap: this relies on the background reaper thread.
        def exited() -> TaskStatus | None:
            status = self.sup.status(key)
            return status if status and status.state is TaskState.EXITED else None

        return wait_for(exited, timeout, what=f"task {key} to exit")

    def log(self, key: str) -> str:
        return (self.tmp / "logs" / f"{key.replace('/', '_')}.log").read_text()


@pytest.fixture(params=MODES)
def h(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Harness]:
    cgroups = cgroups_for(request.param)
    harness = Harness(tmp_path, cgroups)
    yield harness
    pgids = [s.pid for s in harness.sup.poll() if s.pid is not None]
    harness.sup.stop_all(grace_period=0, wait=True)
    assert all(s.state is TaskState.EXITED for s in harness.sup.poll())
    wait_for(lambda: not any(group_members(p) for p in pgids), what="no stray processes")
    if cgroups is not None:
        assert cgroups.list_tasks() == []  # an EXITED task's cgroup is removed
        assert cgroups.remove_root()


@pytest.mark.parametrize("code", [0, 3])
def test_exit_code_reported(h: Harness, code: int) -> None:
    started = h.start("job-1/0/0", py(f"import sys; sys.exit({code})"))
    assert started.state is TaskState.RUNNING
    assert started.pid is not None

    status = h.wait_exited("job-1/0/0")
    assert status.exit_code == code
    assert status.pid == started.pid
    assert not status.stop_requested
    assert status.ended_at is not None
    assert status.ended_at >= status.started_at


def test_killed_by_signal_reports_128_plus_signal(h: Harness) -> None:
    pid = h.start("k", py("import time; time.sleep(1000)")).pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    status = h.wait_exited("k")
    assert status.exit_code == 128 + signal.SIGKILL == 137
    assert not status.stop_requested


def test_stop_graceful_task_exits_with_its_own_code(h: Harness) -> None:
    ready = h.tmp / "ready"
    h.start("g", py(GRACEFUL, ready), grace=10.0)
    wait_for(ready.exists, what="child ready")

    started = time.monotonic()
    h.sup.stop("g")
    assert h.sup.status("g").state is TaskState.TERMINATING  # type: ignore[union-attr]
    status = h.wait_exited("g")
    assert status.exit_code == 0
    assert status.stop_requested
    assert time.monotonic() - started < 5.0


def test_stop_task_ignoring_sigterm_is_killed_after_grace(h: Harness) -> None:
    ready = h.tmp / "ready"
    h.start("s", py(STUBBORN, ready), grace=0.5)
    wait_for(ready.exists, what="child ready")

    started = time.monotonic()
    h.sup.stop("s")
    assert h.sup.poll()[0].state is TaskState.TERMINATING
    status = h.wait_exited("s")
    assert time.monotonic() - started >= 0.5
    assert status.exit_code == 137
    assert status.stop_requested


def test_stop_with_grace_override_and_repeated_stop_shortens_deadline(h: Harness) -> None:
    ready = h.tmp / "ready"
    h.start("s", py(STUBBORN, ready), grace=60.0)
    wait_for(ready.exists, what="child ready")

    h.sup.stop("s")  # launch grace: 60 s
    h.sup.stop("s", grace_period=0.2)  # idempotent, but may bring the deadline forward
    status = h.wait_exited("s")
    assert status.exit_code == 137


def test_stop_kills_whole_shell_tree(h: Harness) -> None:
    pid = h.start("sh", "sleep 1000 & sleep 1000; wait", grace=2.0).pid
    assert pid is not None
    # the shim (pid), the shell running the command, its two sleeps
    members = wait_for(lambda: len(group_members(pid)) == 4 and group_members(pid), what="tree")

    h.sup.stop("sh")
    status = h.wait_exited("sh")
    assert status.exit_code == 128 + signal.SIGTERM
    wait_for(lambda: not any(pid_alive(p) for p in members), what="tree to die")


def test_stop_kills_grandchildren(h: Harness) -> None:
    pids_file = h.tmp / "pids"
    child = """
    import subprocess, sys, time
    kids = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1000)"])
            for _ in range(2)]
    with open(sys.argv[1], "w") as f:
        f.write(" ".join(str(k.pid) for k in kids))
    time.sleep(1000)
    """
    h.start("t", py(child, pids_file), grace=2.0)
    grandchildren = read_pids(pids_file, 2)
    assert all(pid_alive(p) for p in grandchildren)

    h.sup.stop("t")
    h.wait_exited("t")
    wait_for(lambda: not any(pid_alive(p) for p in grandchildren), what="grandchildren to die")


def test_leftover_grandchild_killed_when_leader_exits_on_its_own(h: Harness) -> None:
    pids_file = h.tmp / "pids"
    child = """
    import subprocess, sys
    kid = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1000)"])
    open(sys.argv[1], "w").write(str(kid.pid))
    """
    h.start("t", py(child, pids_file))
    [grandchild] = read_pids(pids_file, 1)
    status = h.wait_exited("t")
    assert status.exit_code == 0
    assert not status.stop_requested
    wait_for(lambda: not pid_alive(grandchild), timeout=2.0, what="grandchild to die")


def test_grandchild_ignoring_sigterm_is_killed_at_deadline(h: Harness) -> None:
    pids_file = h.tmp / "pids"
    ready = h.tmp / "ready"
    grace = 1.5
    child = """
    import subprocess, sys, time
    kid = subprocess.Popen([sys.executable, "-c", sys.argv[3], sys.argv[2]])
    open(sys.argv[1], "w").write(str(kid.pid))
    time.sleep(1000)  # the leader itself dies on SIGTERM
    """
    leader = h.start("t", py(child, pids_file, ready, textwrap.dedent(STUBBORN)), grace=grace).pid
    assert leader is not None
    [grandchild] = read_pids(pids_file, 1)
    wait_for(ready.exists, what="grandchild ready")

    started = time.monotonic()
    h.sup.stop("t")
    wait_for(lambda: not pid_alive(leader), what="leader to die")  # an unreaped zombie
    if time.monotonic() - started < grace - 0.3:
        # The leader is gone but a group member lives on: not EXITED until the deadline.
        assert h.sup.poll()[0].state is TaskState.TERMINATING
        assert pid_alive(grandchild)

    status = h.wait_exited("t")
    assert time.monotonic() - started >= grace
    assert status.exit_code == 128 + signal.SIGTERM
    wait_for(lambda: not pid_alive(grandchild), timeout=2.0, what="grandchild to die")


def test_graceful_tree_exits_before_deadline(h: Harness) -> None:
    # Leader and grandchild both honour SIGTERM: EXITED well before a long grace period.
    pids_file = h.tmp / "pids"
    child = """
    import subprocess, sys, time
    kid = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1000)"])
    open(sys.argv[1], "w").write(str(kid.pid))
    time.sleep(1000)
    """
    h.start("t", py(child, pids_file), grace=30.0)
    [grandchild] = read_pids(pids_file, 1)
    h.sup.stop("t")
    status = h.wait_exited("t", timeout=10.0)
    assert status.exit_code == 128 + signal.SIGTERM
    assert not pid_alive(grandchild)


def test_env_and_workdir_reach_child(h: Harness) -> None:
    workdir = h.tmp / "work dir"
    workdir.mkdir()
    code = "import os; print(os.environ['CORRAL_TEST_VAR'], os.getcwd(), 'PATH' in os.environ)"
    h.start("e", py(code), env={"CORRAL_TEST_VAR": "hello"}, workdir=str(workdir))
    assert h.wait_exited("e").exit_code == 0
    assert h.log("e").strip() == f"hello {workdir} True"


def test_log_receives_stdout_and_stderr_and_is_appended(h: Harness) -> None:
    log_path = h.tmp / "nested" / "dirs" / "task.log"
    code = """
    import sys
    print("to stdout", flush=True)
    print("to stderr", file=sys.stderr, flush=True)
    """
    h.start("a", py(code), log_path=log_path)
    h.wait_exited("a")
    h.start("b", "echo second run", log_path=log_path)
    h.wait_exited("b")
    assert log_path.read_text() == "to stdout\nto stderr\nsecond run\n"


def test_missing_command_exits_127_with_reason(h: Harness) -> None:
    status = h.start("m", ["corral-no-such-command-xyz", "arg"])
    assert status.state is TaskState.EXITED
    assert status.exit_code == 127
    assert status.pid is None
    assert status.ended_at is not None
    assert h.log("m") == (
        "corral: cannot start task: [Errno 2] No such file or directory: "
        "'corral-no-such-command-xyz'\n"
    )
    wait_for(lambda: h.exits == ["m"], what="on_exit for a failed start")


def test_empty_command_exits_127(h: Harness) -> None:
    status = h.start("m", [])
    assert (status.state, status.exit_code) == (TaskState.EXITED, 127)
    assert h.log("m") == "corral: cannot start task: empty command\n"


def test_missing_command_under_shell_exits_127(h: Harness) -> None:
    h.start("m", "corral-no-such-command-xyz")
    assert h.wait_exited("m").exit_code == 127
    assert "not found" in h.log("m")


def test_missing_workdir_exits_127_with_reason(h: Harness) -> None:
    missing = h.tmp / "no" / "such" / "dir"
    status = h.start("w", py("pass"), workdir=str(missing))
    assert (status.state, status.exit_code) == (TaskState.EXITED, 127)
    assert h.log("w").startswith("corral: cannot start task: ")
    assert str(missing) in h.log("w")


def test_start_is_idempotent_on_key(h: Harness) -> None:
    runs = h.tmp / "runs"
    code = "import sys, time; open(sys.argv[1], 'a').write('x'); time.sleep(0.3)"
    first = h.start("i", py(code, runs))
    again = h.start("i", py(code, runs))
    assert again == first
    h.wait_exited("i")
    assert h.start("i", py(code, runs)).state is TaskState.EXITED  # known key: not re-run
    assert runs.read_text() == "x"
    assert len(h.sup.poll()) == 1


def test_on_exit_fires_once_without_polling(h: Harness) -> None:
    h.start("cb", py("pass"))
    wait_for(lambda: h.exits, what="on_exit")
    assert h.exits == ["cb"]
    assert h.sup.status("cb").state is TaskState.EXITED  # type: ignore[union-attr]
    h.sup.poll()
    h.sup.stop_all()
    assert h.exits == ["cb"]


def test_on_exit_may_call_back_into_supervisor(tmp_path: Path) -> None:
    seen: list[TaskStatus | None] = []
    sup = ProcessSupervisor(on_exit=lambda key: seen.append(sup.status(key)))
    sup.start(
        TaskLaunch(
            key="cb",
            command=py("pass"),
            env={},
            workdir=None,
            log_path=tmp_path / "cb.log",
            grace_period=1.0,
        )
    )
    wait_for(lambda: seen, what="on_exit")
    assert seen[0] is not None
    assert seen[0].state is TaskState.EXITED


def test_forget_drops_only_exited_tasks(h: Harness) -> None:
    ready = h.tmp / "ready"
    h.start("f", py(GRACEFUL, ready))
    h.sup.forget("f")
    assert h.sup.status("f") is not None  # still running: kept

    h.sup.stop("f")
    h.wait_exited("f")
    h.sup.forget("f")
    assert h.sup.status("f") is None
    assert h.sup.poll() == []
    h.sup.forget("f")  # unknown: no-op

    restarted = h.start("f", py("pass"))  # a forgotten key can run again
    assert restarted.state is TaskState.RUNNING


def test_stop_is_noop_for_unknown_and_exited_tasks(h: Harness) -> None:
    h.sup.stop("nope")
    h.start("done", py("pass"))
    h.wait_exited("done")
    h.sup.stop("done")
    status = h.sup.status("done")
    assert status is not None
    assert not status.stop_requested
    assert status.exit_code == 0


def test_stop_all_waits_for_every_task(h: Harness) -> None:
    for i in range(3):
        ready = h.tmp / f"ready{i}"
        h.start(f"s{i}", py(STUBBORN if i else GRACEFUL, ready), grace=30.0)
        wait_for(ready.exists, what="child ready")

    h.sup.stop_all(grace_period=0.3, wait=True)
    codes = {s.key: s.exit_code for s in h.sup.poll()}
    assert codes == {"s0": 0, "s1": 137, "s2": 137}
    assert all(s.state is TaskState.EXITED for s in h.sup.poll())
    wait_for(lambda: sorted(h.exits) == ["s0", "s1", "s2"], what="on_exit for all")


def test_failing_on_exit_does_not_stop_the_reaper(tmp_path: Path) -> None:
    seen: list[str] = []

    def on_exit(key: str) -> None:
        seen.append(key)
        raise RuntimeError("callback bug")

    sup = ProcessSupervisor(on_exit=on_exit)
    for key in ("a", "b"):
        sup.start(TaskLaunch(key, py("pass"), {}, None, tmp_path / f"{key}.log", grace_period=1.0))
    wait_for(lambda: sorted(seen) == ["a", "b"], what="both callbacks")


def test_tasks_start_from_the_given_base_environment(tmp_path: Path) -> None:
    from corral.agent.agent import task_base_env

    base = task_base_env({"PATH": os.environ["PATH"], "CORRAL_JOIN_TOKEN": "s3", "KEEP": "1"})
    assert base == {"PATH": os.environ["PATH"], "KEEP": "1"}
    supervisor = ProcessSupervisor(base_env=base)
    script = (
        "import os; print(sorted(k for k in os.environ if k in ('KEEP', 'CORRAL_JOIN_TOKEN', 'X')))"
    )
    log = tmp_path / "t.log"
    supervisor.start(TaskLaunch("k", [sys.executable, "-c", script], {"X": "2"}, None, log, 1.0))
    deadline = time.monotonic() + 10
    while supervisor.status("k").state is not TaskState.EXITED:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert log.read_text().strip() == "['KEEP', 'X']"


def test_grace_period_is_capped(h: Harness) -> None:
    ready = h.tmp / "ready"
    h.start("g", py(STUBBORN, ready), grace=10**9)
    wait_for(ready.exists, what="child ready")
    h.sup.stop("g")
    task = h.sup._tasks["g"]  # the deadline is internal: there is no clock to wait on
    assert task.kill_deadline is not None
    assert task.kill_deadline - time.monotonic() <= MAX_GRACE
    h.sup.stop("g", grace_period=0)
    assert h.wait_exited("g").exit_code == 137


def test_stop_right_after_start_is_not_lost(h: Harness) -> None:
    # A SIGTERM that reaches the task while its shim is still starting the command (or a
    # fork of the shim not yet exec'd) must still end it, not wait for the deadline.
    for i in range(10):
        key = f"early{i}"
        h.start(key, py(GRACEFUL, h.tmp / key), grace=60.0)
        h.sup.stop(key)
        status = h.wait_exited(key, timeout=20)
        assert status.exit_code in (0, 128 + signal.SIGTERM)


def test_usage_is_reported(h: Harness) -> None:
    code = """
    import time
    data = b"x" * (64 << 20)
    start = time.process_time()
    while time.process_time() - start < 0.2:
        pass
    """
    h.start("u", py(code))
    status = h.wait_exited("u", timeout=30)
    assert status.exit_code == 0
    assert status.peak_memory is not None and status.peak_memory >= 64 << 20
    assert status.cpu_seconds is not None and status.cpu_seconds >= 0.2
