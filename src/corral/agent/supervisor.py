"""Supervision of task processes: start, stop with a grace period, reap, account, re-adopt.

Every task starts under a small shell shim (``shim.py``) that leads its own session and
process group, runs the command as the task's account and writes its exit status to a file.
Before the shim may run the command it is placed in the task's cgroup (when the supervisor
has a ``CgroupManager``) and the task is recorded on disk (``taskstate.py``), so that
everything the task ever starts is contained, and a restarted agent can re-adopt it.

With cgroups, ``stop()`` sends SIGTERM to every process in the task's cgroup and kills the
whole cgroup at the grace deadline; when the shim exits on its own the cgroup is killed at
once (setsid'd daemons included). A task is EXITED once its cgroup is empty; its peak
memory, CPU time and OOM kills are read from the cgroup, which is then removed.

Without cgroups (fallback) the shim's process group is the task: it is observed with
``waitid(WNOWAIT)`` and only reaped after the group has been dealt with (the unreaped leader
keeps the group id reserved, which makes every ``killpg`` safe). Processes that leave the
group (``setsid``) escape, and accounting comes from ``wait4``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from corral.agent import shim
from corral.agent.cgroupfs import safe_name
from corral.agent.cgroups import CgroupError, CgroupManager, Limits, TaskCgroup, oom_reason
from corral.agent.identity import Account, AccountError, lookup_account
from corral.agent.taskstate import (
    TaskLaunch,
    TaskOutcome,
    TaskRecord,
    TaskStore,
    group_has_live_members,
    group_members,
    process_alive,
    process_children,
    process_cmdline,
    process_start_time,
    read_exit_status,
)

__all__ = ["Limits", "ProcessSupervisor", "TaskLaunch", "TaskState", "TaskStatus"]

log = logging.getLogger(__name__)

POLL_INTERVAL = 0.1
"""Seconds between background reaper passes."""

START_FAILED_EXIT_CODE = 127
UNKNOWN_EXIT_CODE = 137
MAX_GRACE = 3600.0
"""Longest grace period honoured, whatever a launch or ``stop()`` asks for."""
KILL_SETTLE = 10.0
"""Seconds a killed cgroup may take to empty before its task is EXITED all the same."""
DOWN_REASON = "exit status unknown: the task ended while the agent was down"


class TaskState(StrEnum):
    STARTING = "starting"  # being prepared (its image unpacked): no process yet
    RUNNING = "running"
    TERMINATING = "terminating"
    EXITED = "exited"


@dataclass(frozen=True)
class TaskStatus:
    """Snapshot of one task.

    ``exit_code`` is set once EXITED: the command's exit code, 128+N if it (or the shim)
    died from signal N, or 127 if it could not be started (then ``pid`` is None and
    ``reason`` says why). ``pid`` is the shim's, which leads the task's process group.
    ``started_at``/``ended_at`` are ``time.time()`` values. ``peak_memory`` (bytes) and
    ``cpu_seconds`` cover the whole task with cgroups, else what ``wait4`` reports.
    ``reason`` says why a task ended when not by itself ("out of memory: ...").
    ``adopted``: re-adopted by ``recover()`` after an agent restart.
    """

    key: str
    pid: int | None
    state: TaskState
    exit_code: int | None
    started_at: float
    ended_at: float | None
    stop_requested: bool
    peak_memory: int | None = None
    cpu_seconds: float | None = None
    reason: str | None = None
    adopted: bool = False


@dataclass
class _Task:
    launch: TaskLaunch
    started_at: float
    proc: subprocess.Popen[bytes] | None = None  # None: adopted, or never started
    record: TaskRecord | None = None
    cgroup: TaskCgroup | None = None
    adopted: bool = False
    state: TaskState = TaskState.RUNNING
    exit_code: int | None = None
    ended_at: float | None = None
    stop_requested: bool = False
    kill_deadline: float | None = field(default=None, repr=False)  # time.monotonic()
    killed_at: float | None = None  # SIGKILL sent to the whole task (monotonic)
    leader_code: int | None = None  # the shim's exit code, once known (cgroup mode)
    owed_term: bytes | None = None  # the shim's cmdline while its command owes a SIGTERM
    rusage: Any = None
    reason: str | None = None
    peak_memory: int | None = None
    cpu_seconds: float | None = None

    @property
    def pid(self) -> int | None:
        return self.record.pid if self.record is not None else None

    def status(self) -> TaskStatus:
        return TaskStatus(
            key=self.launch.key,
            pid=self.pid,
            state=self.state,
            exit_code=self.exit_code,
            started_at=self.started_at,
            ended_at=self.ended_at,
            stop_requested=self.stop_requested,
            peak_memory=self.peak_memory,
            cpu_seconds=self.cpu_seconds,
            reason=self.reason,
            adopted=self.adopted,
        )


class ProcessSupervisor:
    """Runs tasks and tracks them until they are forgotten.

    Thread-safe. A daemon thread reaps tasks every ``POLL_INTERVAL`` while any task is not
    EXITED; ``on_exit(key)`` is called from that thread, without the supervisor's lock held,
    exactly once per task that becomes EXITED after ``start()`` or re-adoption (including
    tasks that failed to start; not for tasks ``recover()`` returns as already EXITED).
    Exceptions from ``on_exit`` are logged and swallowed.
    """

    def __init__(
        self,
        on_exit: Callable[[str], None] | None = None,
        base_env: Mapping[str, str] | None = None,
        state_dir: Path | None = None,
        cgroups: CgroupManager | None = None,
    ) -> None:
        """``base_env``: the environment tasks start from (default: this process's).
        ``state_dir``: where task records live (default: a private temporary directory,
        which makes ``recover()`` pointless). ``cgroups``: None runs tasks as bare process
        groups, without limits."""
        self._on_exit = on_exit
        self._base_env = dict(os.environ if base_env is None else base_env)
        self._state_dir = state_dir
        self._store: TaskStore | None = None
        self._cgroups = cgroups
        self._lock = threading.Lock()
        self._tasks: dict[str, _Task] = {}
        self._exited: list[str] = []  # keys whose on_exit is still due
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._detached = False

    def start(self, launch: TaskLaunch) -> TaskStatus:
        """Start ``launch`` unless its key is already known; return the key's status.

        Never raises for a task that cannot be started (unknown account, missing command,
        bad workdir, unwritable log, no cgroup): it is recorded as EXITED with code 127 and
        a reason, which is also appended to its log.
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
        """SIGTERM every process of the task; SIGKILL all of them once the grace period (the
        launch's unless given; at most MAX_GRACE) has passed. Idempotent: a repeated call
        sends no new SIGTERM but may shorten the deadline. No-op for unknown or EXITED tasks."""
        with self._lock:
            task = self._tasks.get(key)
            if task is None or task.state is TaskState.EXITED or task.record is None:
                return
            grace = task.launch.grace_period if grace_period is None else grace_period
            deadline = time.monotonic() + min(MAX_GRACE, max(0.0, grace))
            if not task.stop_requested:
                task.stop_requested = True
                task.state = TaskState.TERMINATING
                task.kill_deadline = deadline
                self._terminate(task)
            elif task.kill_deadline is None or deadline < task.kill_deadline:
                task.kill_deadline = deadline
            if grace <= 0 and task.killed_at is None:
                self._kill(task)
        self._wake.set()

    def poll(self) -> list[TaskStatus]:
        """Reap exited tasks, kill those past their deadline; status of every known task."""
        with self._lock:
            self._tick()
            return [task.status() for task in self._tasks.values()]

    def status(self, key: str) -> TaskStatus | None:
        """Last known status of ``key`` (None if unknown); does not reap."""
        with self._lock:
            task = self._tasks.get(key)
            return task.status() if task is not None else None

    def forget(self, key: str) -> None:
        """Drop an EXITED task, its record, its exit-status file and its cgroup; no-op for
        unknown or still-running tasks."""
        with self._lock:
            task = self._tasks.get(key)
            if task is None or task.state is not TaskState.EXITED:
                return
            del self._tasks[key]
            if task.record is not None:
                self._get_store().delete(task.record.task_id)
            if task.cgroup is not None:
                task.cgroup.remove()

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

    def recover(self) -> list[tuple[TaskLaunch, TaskStatus]]:
        """Take back the tasks recorded in the state directory; call once, before start().

        A task whose shim still runs (same pid, same start time) is re-adopted: RUNNING,
        ``adopted``, supervised from now on. One whose shim is gone is EXITED with the code
        the shim wrote, else 137 and a reason saying the status is unknown; its cgroup is
        killed (stragglers, daemons) and removed. Then every task cgroup under the node root
        without a record is killed and removed, with a warning naming it: a task the agent
        cannot account for is killed before the node takes new work.
        """
        recovered: list[tuple[TaskLaunch, TaskStatus]] = []
        with self._lock:
            latest: dict[str, TaskRecord] = {}
            store = self._get_store()
            for record in store.load_all():  # oldest first: a newer record of a key wins
                older = latest.get(record.launch.key)
                if older is not None:
                    self._discard(older)
                latest[record.launch.key] = record
            for record in latest.values():
                if record.launch.key in self._tasks:
                    continue
                task = self._adopt(record)
                self._tasks[record.launch.key] = task
                recovered.append((task.launch, task.status()))
            if self._cgroups is not None:
                known = {r.cgroup for r in latest.values()}
                for name in self._cgroups.list_tasks():
                    if name not in known:
                        log.warning("killing task cgroup %s: no task record accounts for it", name)
                        self._kill_and_remove(self._cgroups.get(name))
            if any(t.state is not TaskState.EXITED for t in self._tasks.values()):
                self._ensure_thread()
        return recovered

    def detach(self) -> None:
        """Stop supervising, leaving every task running and its record on disk, for a later
        supervisor's ``recover()`` (an agent that exits without stopping its tasks). The
        supervisor must not be used afterwards."""
        with self._lock:
            self._detached = True
            self._tasks.clear()
            self._exited.clear()
        self._wake.set()

    # -- internals (called with self._lock held unless noted) ---------------------------------

    def _get_store(self) -> TaskStore:
        if self._store is None:
            if self._state_dir is not None:
                self._store = TaskStore(self._state_dir)
            else:
                directory = tempfile.mkdtemp(prefix="corral-tasks-")
                weakref.finalize(self, shutil.rmtree, directory, ignore_errors=True)
                self._store = TaskStore(Path(directory))
        return self._store

    def _spawn(self, launch: TaskLaunch) -> _Task:
        task = _Task(launch=launch, started_at=time.time())
        if launch.failure is not None:
            return _failed(task, launch.failure, launch.failure)
        try:
            account = _resolve(launch.account)
        except AccountError as exc:
            return _failed(task, str(exc), str(exc))
        task_id = f"{safe_name(launch.key, 40)}-{secrets.token_hex(4)}"
        cgroup = None
        try:
            spec = shim.prepare(launch.command, launch.env, launch.workdir, account, self._base_env)
            store = self._get_store()
            cgroup = self._cgroups.create(task_id, launch.limits) if self._cgroups else None
            proc, gate = shim.spawn(spec, launch.log_path, store.open_status(task_id))
        except (OSError, ValueError, TypeError, subprocess.SubprocessError, CgroupError) as exc:
            if cgroup is not None:
                cgroup.remove()
            if self._store is not None:
                self._store.delete(task_id)
            return _failed(task, f"cannot start: {exc}", str(exc))
        try:
            if cgroup is not None:
                cgroup.add(proc.pid)
            record = TaskRecord(
                task_id=task_id,
                launch=launch,
                pid=proc.pid,
                pid_start=process_start_time(proc.pid),
                started_at=task.started_at,
                status_path=store.status_path(task_id),
                cgroup=cgroup.task_id if cgroup is not None else None,
            )
            store.save(record)
        except OSError as exc:
            os.close(gate)  # the shim exits without running anything
            proc.kill()
            proc.wait()
            if cgroup is not None:
                cgroup.remove()
            store.delete(task_id)
            return _failed(task, f"cannot start: {exc}", str(exc))
        shim.release(gate)
        task.proc, task.record, task.cgroup = proc, record, cgroup
        return task

    def _adopt(self, record: TaskRecord) -> _Task:
        task = _Task(launch=record.launch, started_at=record.started_at, record=record)
        task.adopted = True
        if record.cgroup is not None and self._cgroups is not None:
            task.cgroup = self._cgroups.get(record.cgroup)
        if record.outcome is None and process_alive(record.pid, record.pid_start):
            log.info("re-adopted task %s (shim pid %d)", record.launch.key, record.pid)
            return task
        if record.outcome is not None:  # it ended before the agent went down
            outcome = record.outcome
            task.state, task.exit_code = TaskState.EXITED, outcome.exit_code
            task.ended_at, task.reason = outcome.ended_at, outcome.reason
            task.peak_memory, task.cpu_seconds = outcome.peak_memory, outcome.cpu_seconds
            if task.cgroup is not None:
                self._kill_and_remove(task.cgroup)
            return task
        code = read_exit_status(record.status_path)
        if code is None:
            code, task.reason = UNKNOWN_EXIT_CODE, DOWN_REASON
        if task.cgroup is not None:
            task.cgroup.kill(timeout=KILL_SETTLE)
        elif (pgid := _group_of(task)) is not None:
            _killpg(pgid, signal.SIGKILL)  # what is left of its process group
        self._finish(task, code)
        log.info("task %s ended while the agent was down (exit %d)", record.launch.key, code)
        return task

    def _discard(self, record: TaskRecord) -> None:
        """Drop a record superseded by a newer one of the same key."""
        if record.cgroup is not None and self._cgroups is not None:
            self._kill_and_remove(self._cgroups.get(record.cgroup))
        self._get_store().delete(record.task_id)

    def _kill_and_remove(self, cgroup: TaskCgroup) -> None:
        if not cgroup.kill(timeout=KILL_SETTLE):
            log.warning("cgroup %s still holds processes after SIGKILL", cgroup.task_id)
        cgroup.remove()

    def _terminate(self, task: _Task) -> None:
        """SIGTERM the whole task. The shim catches SIGTERM, and a child it has forked but
        not yet exec'd shares that handler, so a SIGTERM there would be lost: a command
        not yet running at this moment gets its own SIGTERM once it is (``_advance``)."""
        leader = task.pid
        assert leader is not None
        cmdline = process_cmdline(leader)
        running = cmdline is not None and bool(shim.started_commands(leader, cmdline))
        self._signal(task, signal.SIGTERM)
        task.owed_term = None if running else cmdline

    def _signal(self, task: _Task, sig: signal.Signals) -> None:
        """``sig`` to the whole task; a container runtime (the shim's child) is spared, so
        that it outlives what it runs and reports its exit status."""
        spare = frozenset()
        if task.launch.runtime and task.pid is not None:
            spare = frozenset(process_children(task.pid))
        if task.cgroup is not None:
            task.cgroup.signal(sig, spare)
        elif (pgid := _group_of(task)) is not None and spare:
            for pid in group_members(pgid):
                if pid not in spare:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, sig)
        elif pgid is not None:
            _killpg(pgid, sig)

    def _kill(self, task: _Task) -> None:
        """SIGKILL the whole task (its cgroup, else its process group)."""
        if task.cgroup is not None:
            task.cgroup.kill()
        elif (pgid := _group_of(task)) is not None:
            _killpg(pgid, signal.SIGKILL)
        task.killed_at = time.monotonic()

    def _tick(self) -> None:
        if self._detached:
            return
        now = time.monotonic()
        for task in self._tasks.values():
            if task.state is not TaskState.EXITED and self._advance(task, now):
                self._exited.append(task.launch.key)

    def _advance(self, task: _Task, now: float) -> bool:
        """Move ``task`` along; True if it just became EXITED."""
        past_deadline = task.kill_deadline is not None and now >= task.kill_deadline
        cgroup = task.cgroup
        if task.owed_term is not None and task.killed_at is None and task.pid is not None:
            started = shim.started_commands(task.pid, task.owed_term)
            if started and task.launch.runtime:
                self._signal(task, signal.SIGTERM)  # into its container
            for pid in [] if task.launch.runtime else started:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
            task.owed_term = None if started else task.owed_term
        if task.leader_code is None:
            if not self._leader_exited(task):
                if past_deadline and task.killed_at is None:
                    self._kill(task)
                return False
            if cgroup is not None:  # reap at once: a cgroup needs no reserved group id
                task.leader_code = self._leader_exit_code(task)
        if task.killed_at is None:
            stragglers = cgroup.populated() if cgroup else group_has_live_members(task.pid)
            if task.stop_requested and not past_deadline and stragglers:
                return False  # stragglers get until the grace deadline
            self._kill(task)
        if cgroup is not None and cgroup.populated():
            assert task.killed_at is not None
            if now - task.killed_at < KILL_SETTLE:
                cgroup.kill()
                return False
            log.warning("task %s: processes remain in its cgroup after SIGKILL", task.launch.key)
        if cgroup is None and (pgid := _group_of(task)) is not None:
            _killpg(pgid, signal.SIGKILL)
        code = task.leader_code if task.leader_code is not None else self._leader_exit_code(task)
        self._finish(task, code)
        return True

    def _leader_exited(self, task: _Task) -> bool:
        """True if the shim has exited, without reaping it."""
        proc = task.proc
        if proc is None:
            assert task.record is not None
            return not process_alive(task.record.pid, task.record.pid_start)
        if proc.returncode is not None:
            return True
        try:
            info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return True  # reaped elsewhere; the exit-status file tells what it can
        return info is not None and info.si_pid == proc.pid

    def _leader_exit_code(self, task: _Task) -> int:
        """Reap the shim if it is our child; its exit code (128+N for signal N)."""
        proc, record = task.proc, task.record
        assert record is not None
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ChildProcessError):
                _, status, task.rusage = os.wait4(proc.pid, 0)
                proc.returncode = os.waitstatus_to_exitcode(status)
        if proc is not None and proc.returncode is not None:
            return 128 - proc.returncode if proc.returncode < 0 else proc.returncode
        code = read_exit_status(record.status_path)
        if code is not None:
            return code
        if task.killed_at is not None:
            return 128 + signal.SIGKILL
        task.reason = "exit status unknown: the task's shim ended without reporting one"
        return UNKNOWN_EXIT_CODE

    def _finish(self, task: _Task, code: int) -> None:
        """Mark ``task`` EXITED with ``code``: read its accounting, remove its cgroup, record
        the outcome."""
        usage = task.cgroup.usage() if task.cgroup is not None else None
        ru = task.rusage
        task.peak_memory = usage.peak_memory if usage else None
        if task.peak_memory is None and ru is not None:
            task.peak_memory = ru.ru_maxrss * 1024
        task.cpu_seconds = usage.cpu_seconds if usage else None
        if task.cpu_seconds is None and ru is not None:
            task.cpu_seconds = ru.ru_utime + ru.ru_stime
        if usage is not None and usage.oom_kills and code != 0:
            task.reason = oom_reason(task.launch.limits)
        task.state, task.exit_code, task.ended_at = TaskState.EXITED, code, time.time()
        if task.cgroup is not None:
            task.cgroup.remove()
        if task.record is not None and self._state_dir is None:
            self._get_store().delete(task.record.task_id)  # nothing to recover from a temp dir
        elif task.record is not None:
            outcome = TaskOutcome(
                exit_code=code,
                ended_at=task.ended_at,
                reason=task.reason,
                peak_memory=task.peak_memory,
                cpu_seconds=task.cpu_seconds,
            )
            task.record = task.record.ended(outcome)
            try:
                self._get_store().save(task.record)
            except OSError as exc:
                log.warning("task %s: cannot record its exit: %s", task.launch.key, exc)

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
                done = self._detached or (
                    not due and all(t.state is TaskState.EXITED for t in self._tasks.values())
                )
                if done:
                    self._thread = None
                    self._tidy()
            for key in due:
                self._notify(key)
            if done:
                return

    def _tidy(self) -> None:
        """Remove an idle temporary state directory (without ``state_dir``)."""
        if self._state_dir is not None or self._store is None or self._detached:
            return
        if all(t.state is TaskState.EXITED for t in self._tasks.values()):
            with contextlib.suppress(OSError):
                self._store.directory.rmdir()
                self._store = None

    def _notify(self, key: str) -> None:
        if self._on_exit is None:
            return
        try:
            self._on_exit(key)
        except Exception:
            log.exception("on_exit callback failed for task %s", key)


def _resolve(account: Account | str | None) -> Account | None:
    return lookup_account(account) if isinstance(account, str) else account


def _group_of(task: _Task) -> int | None:
    """The task's process group id (fallback mode), if signalling it is safe: our unreaped
    shim reserves it. A shim that is not our child must still be there (alive or a zombie,
    same start time); if its pid is free, the group id is still the task's only while
    members of the group keep it from reuse."""
    if task.proc is not None:
        return task.pid
    record = task.record
    if record is None:
        return None
    start = process_start_time(record.pid)
    if start is not None:
        return record.pid if record.pid_start in (None, start) else None  # else: reused
    return record.pid if group_has_live_members(record.pid) else None


def _failed(task: _Task, reason: str, message: str) -> _Task:
    """``task`` as EXITED(127) before it ran; ``message`` goes to its log."""
    log.warning("task %s: cannot start: %s", task.launch.key, message)
    with contextlib.suppress(OSError):
        fd = shim.open_log(task.launch.log_path)
        with os.fdopen(fd, "a", encoding="utf-8") as f:
            f.write(f"corral: cannot start task: {message}\n")
    task.state, task.exit_code = TaskState.EXITED, START_FAILED_EXIT_CODE
    task.ended_at, task.reason = time.time(), reason
    return task


def _killpg(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
