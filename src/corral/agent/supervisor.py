"""Supervision of task processes: start, stop with a grace period, reap, report.

Each task runs as the leader of its own session and process group (pgid == pid), so the
whole tree it spawns can be signalled at once. The leader is observed with ``waitid(WNOWAIT)``
and only reaped after the group has been dealt with: while the leader is an unreaped zombie
its pid, and so the group id, cannot be reused, which makes every ``killpg`` safe.

A task becomes EXITED when its leader is reaped. Before that, any processes left in its group
are killed: at once if ``stop()`` was never called, or at the grace deadline if it was (a
stopped task whose leader has exited stays TERMINATING while other group members live, until
they exit or the deadline passes). Processes that leave the group (``setsid``) escape.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

log = logging.getLogger(__name__)

POLL_INTERVAL = 0.1
"""Seconds between background reaper passes."""

START_FAILED_EXIT_CODE = 127


@dataclass(frozen=True)
class TaskLaunch:
    """How to run one task.

    ``command``: a list is exec'd directly, a str runs under ``/bin/sh -c``. ``env`` is added
    on top of the agent's environment. ``workdir`` None means the agent's cwd. stdout and
    stderr are both appended to ``log_path`` (parent directories are created).
    ``grace_period``: seconds between SIGTERM and SIGKILL when the task is stopped.
    """

    key: str
    command: list[str] | str
    env: dict[str, str]
    workdir: str | None
    log_path: Path
    grace_period: float


class TaskState(StrEnum):
    RUNNING = "running"
    TERMINATING = "terminating"
    EXITED = "exited"


@dataclass(frozen=True)
class TaskStatus:
    """Snapshot of one task.

    ``exit_code`` is set once EXITED: the leader's exit code, 128+N if it died from signal N,
    or 127 if it could not be started (then ``pid`` is None and the reason is in the log).
    ``started_at``/``ended_at`` are ``time.time()`` values.
    """

    key: str
    pid: int | None
    state: TaskState
    exit_code: int | None
    started_at: float
    ended_at: float | None
    stop_requested: bool


@dataclass
class _Task:
    launch: TaskLaunch
    proc: subprocess.Popen[bytes] | None
    started_at: float
    state: TaskState = TaskState.RUNNING
    exit_code: int | None = None
    ended_at: float | None = None
    stop_requested: bool = False
    kill_deadline: float | None = field(default=None, repr=False)  # time.monotonic()
    killed: bool = False  # SIGKILL already sent to the group at the deadline

    def status(self) -> TaskStatus:
        return TaskStatus(
            key=self.launch.key,
            pid=self.proc.pid if self.proc is not None else None,
            state=self.state,
            exit_code=self.exit_code,
            started_at=self.started_at,
            ended_at=self.ended_at,
            stop_requested=self.stop_requested,
        )


class ProcessSupervisor:
    """Runs tasks as process groups and tracks them until they are forgotten.

    Thread-safe. A daemon thread reaps tasks every ``POLL_INTERVAL`` while any task is not
    EXITED; ``on_exit(key)`` is called from that thread, without the supervisor's lock held,
    exactly once per task that becomes EXITED (including tasks that failed to start).
    Exceptions from ``on_exit`` are logged and swallowed.
    """

    def __init__(
        self,
        on_exit: Callable[[str], None] | None = None,
        base_env: Mapping[str, str] | None = None,
    ) -> None:
        """``base_env``: the environment tasks start from (default: this process's)."""
        self._on_exit = on_exit
        self._base_env = dict(os.environ if base_env is None else base_env)
        self._lock = threading.Lock()
        self._tasks: dict[str, _Task] = {}
        self._exited: list[str] = []  # keys whose on_exit is still due
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, launch: TaskLaunch) -> TaskStatus:
        """Start ``launch`` unless its key is already known; return the key's status.

        Never raises for a task that cannot be started (missing command, bad workdir,
        unwritable log): it is recorded as EXITED with code 127.
        """
        with self._lock:
            task = self._tasks.get(launch.key)
            if task is None:
                task = self._spawn(launch)
                self._tasks[launch.key] = task
                if task.state is TaskState.EXITED:
                    self._exited.append(launch.key)
                    self._wake.set()  # deliver on_exit without waiting a poll interval
                self._ensure_thread()
            return task.status()

    def stop(self, key: str, grace_period: float | None = None) -> None:
        """SIGTERM the task's process group; SIGKILL it once the grace period (the launch's
        unless given) has passed. Idempotent: a repeated call sends no new SIGTERM but may
        shorten the deadline. No-op for unknown or already EXITED tasks."""
        with self._lock:
            task = self._tasks.get(key)
            if task is None or task.state is TaskState.EXITED or task.proc is None:
                return
            grace = task.launch.grace_period if grace_period is None else grace_period
            deadline = time.monotonic() + max(0.0, grace)
            pgid = task.proc.pid
            if not task.stop_requested:
                task.stop_requested = True
                task.state = TaskState.TERMINATING
                task.kill_deadline = deadline
                _killpg(pgid, signal.SIGTERM)
            elif task.kill_deadline is None or deadline < task.kill_deadline:
                task.kill_deadline = deadline
            if grace <= 0 and not task.killed:
                _killpg(pgid, signal.SIGKILL)
                task.killed = True
        self._wake.set()

    def poll(self) -> list[TaskStatus]:
        """Reap exited leaders, kill groups past their deadline; status of every known task."""
        with self._lock:
            self._tick()
            return [task.status() for task in self._tasks.values()]

    def status(self, key: str) -> TaskStatus | None:
        """Last known status of ``key`` (None if unknown); does not reap."""
        with self._lock:
            task = self._tasks.get(key)
            return task.status() if task is not None else None

    def forget(self, key: str) -> None:
        """Drop an EXITED task; no-op for unknown or still-running tasks."""
        with self._lock:
            task = self._tasks.get(key)
            if task is not None and task.state is TaskState.EXITED:
                del self._tasks[key]

    def stop_all(self, grace_period: float | None = None, wait: bool = True) -> None:
        """``stop()`` every task; with ``wait``, block until all of them are EXITED."""
        with self._lock:
            keys = list(self._tasks)
        for key in keys:
            self.stop(key, grace_period)
        while wait:
            with self._lock:
                self._tick()
                wait = any(t.state is not TaskState.EXITED for t in self._tasks.values())
            if wait:
                time.sleep(POLL_INTERVAL / 4)

    # -- internals (called with self._lock held unless noted) ---------------------------------

    def _spawn(self, launch: TaskLaunch) -> _Task:
        started_at = time.time()
        argv = (
            ["/bin/sh", "-c", launch.command]
            if isinstance(launch.command, str)
            else list(launch.command)
        )
        try:
            if not argv:
                raise ValueError("empty command")
            launch.log_path.parent.mkdir(parents=True, exist_ok=True)
            with open(launch.log_path, "ab") as logfile:
                proc = subprocess.Popen(
                    argv,
                    cwd=launch.workdir,
                    env={**self._base_env, **launch.env},
                    stdin=subprocess.DEVNULL,
                    stdout=logfile,
                    stderr=subprocess.STDOUT,
                    close_fds=True,
                    start_new_session=True,
                )
        except (OSError, ValueError, TypeError, subprocess.SubprocessError) as exc:
            _report_start_failure(launch, exc)
            return _Task(
                launch=launch,
                proc=None,
                started_at=started_at,
                state=TaskState.EXITED,
                exit_code=START_FAILED_EXIT_CODE,
                ended_at=time.time(),
            )
        return _Task(launch=launch, proc=proc, started_at=started_at)

    def _tick(self) -> None:
        now = time.monotonic()
        for task in self._tasks.values():
            if task.state is not TaskState.EXITED and self._advance(task, now):
                self._exited.append(task.launch.key)

    def _advance(self, task: _Task, now: float) -> bool:
        """Move ``task`` along; True if it just became EXITED."""
        proc = task.proc
        assert proc is not None
        past_deadline = task.kill_deadline is not None and now >= task.kill_deadline
        if not _leader_exited(proc):
            if past_deadline and not task.killed:
                _killpg(proc.pid, signal.SIGKILL)
                task.killed = True
            return False
        if (
            task.stop_requested
            and not task.killed
            and not past_deadline
            and _group_has_live_members(proc.pid)
        ):
            return False  # stragglers get until the grace deadline
        _killpg(proc.pid, signal.SIGKILL)  # safe: the unreaped leader keeps the pgid reserved
        returncode = proc.wait()
        task.killed = True
        task.state = TaskState.EXITED
        task.exit_code = 128 - returncode if returncode < 0 else returncode
        task.ended_at = time.time()
        return True

    def _ensure_thread(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name="corral-supervisor-reaper", daemon=True
            )
            self._thread.start()

    def _run(self) -> None:
        """Background reaper; exits when no task is live and no on_exit is due (lock not held)."""
        while True:
            self._wake.wait(POLL_INTERVAL)
            self._wake.clear()
            with self._lock:
                self._tick()
                due, self._exited = self._exited, []
                done = not due and all(t.state is TaskState.EXITED for t in self._tasks.values())
                if done:
                    self._thread = None
            for key in due:
                self._notify(key)
            if done:
                return

    def _notify(self, key: str) -> None:
        if self._on_exit is None:
            return
        try:
            self._on_exit(key)
        except Exception:
            log.exception("on_exit callback failed for task %s", key)


def _killpg(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _leader_exited(proc: subprocess.Popen[bytes]) -> bool:
    """True if the leader has exited, without reaping it."""
    if proc.returncode is not None:
        return True
    try:
        info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True  # already reaped elsewhere; proc.wait() reports what it can
    return info is not None and info.si_pid == proc.pid


def _group_has_live_members(pgid: int) -> bool:
    """True if a non-zombie process is in group ``pgid``. Without /proc, assume so."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return True
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        # fields: state, ppid, pgrp, ...
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            return True
    return False


def _report_start_failure(launch: TaskLaunch, exc: BaseException) -> None:
    message = f"corral: cannot start task: {exc}\n"
    log.warning("task %s: %s", launch.key, message.strip())
    try:
        launch.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(launch.log_path, "a", encoding="utf-8") as f:
            f.write(message)
    except OSError:
        pass
