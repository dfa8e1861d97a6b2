"""What the supervisor keeps on disk about the tasks it started, so a restarted agent can
re-adopt them: one JSON record per task (0600, written atomically) in a 0700 directory,
next to the file the task's shim writes its exit status to."""

from __future__ import annotations

import contextlib
import json
import logging
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from corral.agent.cgroups import Limits
from corral.agent.identity import Account

log = logging.getLogger(__name__)

RECORD_VERSION = 1


@dataclass(frozen=True)
class TaskLaunch:
    """How to run one task.

    ``command``: a list is exec'd directly, a str runs under ``/bin/sh -c``. ``env`` is added
    on top of the supervisor's base environment (and of ``account``'s HOME, USER, LOGNAME,
    SHELL). ``workdir`` None means the account's home when the task switches account, else
    the agent's cwd. stdout and stderr are both appended to ``log_path`` (parent directories
    are created). ``grace_period``: seconds between SIGTERM and SIGKILL when stopped.
    ``account``: run as this account (an Account, or a name looked up at start); None: as
    the agent. ``failure``: if set, the task is not run but reported EXITED (127) with this
    reason. ``meta``: JSON-able data the agent wants back after a restart. ``runtime``: the
    command runs in a container runtime (``"bwrap"``), the shim's child: a SIGTERM goes to
    what runs inside it, not to the runtime, which outlives it to report the exit status.
    """

    key: str
    command: list[str] | str
    env: dict[str, str]
    workdir: str | None
    log_path: Path
    grace_period: float
    account: Account | str | None = None
    limits: Limits = Limits()
    meta: dict[str, Any] = field(default_factory=dict)
    failure: str | None = None
    runtime: str | None = None

    def to_json(self) -> dict[str, Any]:
        account = self.account.to_json() if isinstance(self.account, Account) else self.account
        return {
            "key": self.key,
            "command": self.command,
            "env": self.env,
            "workdir": self.workdir,
            "log_path": str(self.log_path),
            "grace_period": self.grace_period,
            "account": account,
            "limits": self.limits.to_json(),
            "meta": self.meta,
            "failure": self.failure,
            "runtime": self.runtime,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TaskLaunch:
        account = data.get("account")
        return cls(
            key=data["key"],
            command=data["command"],
            env=dict(data["env"]),
            workdir=data["workdir"],
            log_path=Path(data["log_path"]),
            grace_period=float(data["grace_period"]),
            account=Account.from_json(account) if isinstance(account, dict) else account,
            limits=Limits.from_json(data.get("limits") or {}),
            meta=dict(data.get("meta") or {}),
            failure=data.get("failure"),
            runtime=data.get("runtime"),
        )


@dataclass(frozen=True)
class TaskOutcome:
    """How a task ended, kept so that a restart before ``forget()`` still reports it."""

    exit_code: int
    ended_at: float
    reason: str | None = None
    peak_memory: int | None = None
    cpu_seconds: float | None = None


@dataclass(frozen=True)
class TaskRecord:
    """One started task: ``pid``/``pid_start`` identify its shim (start time in clock ticks
    since boot, /proc/PID/stat field 22, so a reused pid is not mistaken for it);
    ``cgroup`` is its task cgroup's name (None: a plain process group)."""

    task_id: str
    launch: TaskLaunch
    pid: int
    pid_start: int | None
    started_at: float
    status_path: Path
    cgroup: str | None
    outcome: TaskOutcome | None = None

    @property
    def meta(self) -> dict[str, Any]:
        return self.launch.meta

    def to_json(self) -> dict[str, Any]:
        outcome = self.outcome
        return {
            "version": RECORD_VERSION,
            "task_id": self.task_id,
            "launch": self.launch.to_json(),
            "pid": self.pid,
            "pid_start": self.pid_start,
            "started_at": self.started_at,
            "status_path": str(self.status_path),
            "cgroup": self.cgroup,
            "outcome": None if outcome is None else outcome.__dict__,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TaskRecord:
        outcome = data.get("outcome")
        return cls(
            task_id=data["task_id"],
            launch=TaskLaunch.from_json(data["launch"]),
            pid=int(data["pid"]),
            pid_start=data.get("pid_start"),
            started_at=float(data["started_at"]),
            status_path=Path(data["status_path"]),
            cgroup=data.get("cgroup"),
            outcome=None if outcome is None else TaskOutcome(**outcome),
        )

    def ended(self, outcome: TaskOutcome) -> TaskRecord:
        return replace(self, outcome=outcome)


class TaskStore:
    """The records of one supervisor, in ``directory`` (created 0700)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        os.chmod(directory, 0o700)

    def status_path(self, task_id: str) -> Path:
        return self.directory / f"{task_id}.exit"

    def open_status(self, task_id: str) -> int:
        """A new, empty exit-status file for ``task_id``, open for writing (close-on-exec)."""
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW
        fd = os.open(self.status_path(task_id), flags, 0o600)
        os.fchmod(fd, 0o600)
        return fd

    def save(self, record: TaskRecord) -> None:
        """Write ``record`` atomically (temporary file, fsync, rename); raises OSError."""
        path = self.directory / f"{record.task_id}.json"
        temporary = self.directory / f".{record.task_id}.json.tmp"
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
        fd = os.open(temporary, flags, 0o600)
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w") as handle:
            json.dump(record.to_json(), handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)

    def load_all(self) -> list[TaskRecord]:
        """Every readable record, oldest start first; unreadable ones are logged and skipped."""
        records = []
        for path in sorted(self.directory.glob("*.json")):
            try:
                records.append(TaskRecord.from_json(json.loads(path.read_text())))
            except (OSError, ValueError, KeyError, TypeError) as exc:
                log.warning("ignoring unreadable task record %s: %s", path, exc)
        return sorted(records, key=lambda r: r.started_at)

    def delete(self, task_id: str) -> None:
        """Remove the record and the exit-status file of ``task_id`` (if present)."""
        for path in (self.directory / f"{task_id}.json", self.status_path(task_id)):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()


def read_exit_status(path: Path) -> int | None:
    """The exit code a shim wrote to ``path``; None if it wrote none."""
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def process_start_time(pid: int) -> int | None:
    """Start time of ``pid`` (clock ticks since boot), None if there is no such process."""
    fields = _stat_fields(pid)
    return int(fields[19]) if fields and len(fields) > 19 else None


def process_alive(pid: int, start_time: int | None) -> bool:
    """True if ``pid`` is a live (non-zombie) process started at ``start_time``."""
    fields = _stat_fields(pid)
    if not fields or len(fields) <= 19 or fields[0] in ("Z", "X"):
        return False
    return start_time is None or int(fields[19]) == start_time


def group_has_live_members(pgid: int | None) -> bool:
    """True if a non-zombie process is in process group ``pgid``. Without /proc, assume so."""
    if pgid is None:
        return False
    try:
        entries = os.listdir("/proc")
    except OSError:
        return True
    for name in entries:
        fields = _stat_fields(int(name)) if name.isdigit() else None
        # fields: state, ppid, pgrp, ...
        if fields and len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in "ZX":
            return True
    return False


def group_members(pgid: int) -> list[int]:
    """Pids of the live (non-zombie) processes in process group ``pgid``."""
    members = []
    with contextlib.suppress(OSError):
        for name in os.listdir("/proc"):
            fields = _stat_fields(int(name)) if name.isdigit() else None
            if fields and len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in "ZX":
                members.append(int(name))
    return members


def process_cmdline(pid: int) -> bytes | None:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None


def process_children(pid: int) -> list[int]:
    """Pids of the live children of ``pid``."""
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except FileNotFoundError:  # a kernel without CONFIG_PROC_CHILDREN: scan
        pass
    except OSError:
        return []
    kids = []
    for name in os.listdir("/proc"):
        fields = _stat_fields(int(name)) if name.isdigit() else None
        if fields and len(fields) > 1 and int(fields[1]) == pid:
            kids.append(int(name))
    return kids


def _stat_fields(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name: [0] is field 3 (state)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    return stat[stat.rfind(b")") + 2 :].decode().split()
