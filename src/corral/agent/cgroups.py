"""Per-task cgroups: limits, whole-tree kill and accounting, on cgroup v1, v2 or a hybrid.

Each controller comes from cgroup v2 when the agent's own v2 cgroup offers it, else from the
v1 hierarchy it is bound to. Tracking and killing (the hierarchy whose ``cgroup.procs`` is
"the task") prefer v2 (``cgroup.kill``), else the v1 freezer (freeze, SIGKILL every member,
thaw). The manager works under ``<agent's own cgroup>/corral-<node>-<agent id prefix>`` in
every hierarchy it uses, and each task gets a directory ``<that>/<task id>`` in each of
them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from corral.agent import cgroupfs as fs
from corral.agent.cgroupfs import LIMITED, Hierarchy

log = logging.getLogger(__name__)

CPU_PERIOD_US = 100_000


class CgroupError(Exception):
    """A task cgroup could not be created or set up."""


@dataclass(frozen=True)
class Limits:
    """Resource limits of one task; None means unlimited."""

    memory: int | None = None  # bytes, swap included where the kernel accounts it
    cpus: float | None = None  # CPU time per wall second, e.g. 1.5
    pids: int | None = None  # processes and threads

    def to_json(self) -> dict[str, int | float | None]:
        return {"memory": self.memory, "cpus": self.cpus, "pids": self.pids}

    @classmethod
    def from_json(cls, data: dict[str, int | float | None]) -> Limits:
        memory, pids = data.get("memory"), data.get("pids")
        cpus = data.get("cpus")
        return cls(
            memory=None if memory is None else int(memory),
            cpus=None if cpus is None else float(cpus),
            pids=None if pids is None else int(pids),
        )


@dataclass(frozen=True)
class Usage:
    """What a task consumed, as far as the cgroups account it (None: not accounted)."""

    peak_memory: int | None
    cpu_seconds: float | None
    oom_kills: int


@dataclass(frozen=True)
class CgroupProbe:
    """Outcome of looking for cgroups: a manager (None: unavailable) and a line for the log."""

    manager: CgroupManager | None
    line: str
    warnings: tuple[str, ...] = ()


def oom_reason(limits: Limits) -> str:
    """Why a task the kernel killed for memory ended; always says "out of memory"."""
    if limits.memory is None:
        return "out of memory: killed by the kernel"
    return f"out of memory: killed at its limit of {format_bytes(limits.memory)}"


def format_bytes(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            value = n / size
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{n} bytes"


class CgroupManager:
    """Creates, finds and lists the task cgroups of one node. Build it with ``detect()``."""

    def __init__(self, roles: dict[str, Hierarchy], kill_mode: str) -> None:
        """``roles`` maps "track" (required), "memory", "cpu", "pids", "cpuacct", "freezer"
        to hierarchies; ``kill_mode`` is "kill" (v2 cgroup.kill), "freeze" or "signal"."""
        self.roles = dict(roles)
        self.kill_mode = kill_mode
        self.hierarchies = list(dict.fromkeys(roles.values()))

    @classmethod
    def detect(cls, node_name: str) -> CgroupManager | None:
        """Probe this host (see ``probe_cgroups``), log what was found, return the manager."""
        probe = probe_cgroups(node_name)
        for warning in probe.warnings:
            log.warning("%s", warning)
        log.info("%s", probe.line)
        return probe.manager

    def describe(self) -> str:
        """One line for the agent's start log, e.g. "cgroups: v2 (kill) + v1 memory,cpu,pids"."""
        track = self.roles["track"]
        parts = [f"v{track.version}" + (" freezer" if self.kill_mode == "freeze" else "")]
        parts[0] += f" ({self.kill_mode})"
        for version in (2, 1):
            names = [c for c in LIMITED if c in self.roles and self.roles[c].version == version]
            if names and version == track.version and self.kill_mode != "freeze":
                parts[0] += " " + ",".join(names)
            elif names:
                parts.append(f"v{version} " + ",".join(names))
        missing = [c for c in LIMITED if c not in self.roles]
        tail = f"; no {','.join(missing)} limits" if missing else ""
        return "cgroups: " + " + ".join(parts) + tail

    def enforces(self, controller: str) -> bool:
        """True if limits of ``controller`` ("memory", "cpu", "pids") are applied."""
        return controller in self.roles

    def create(self, task_id: str, limits: Limits) -> TaskCgroup:
        """Make the task's directories and apply ``limits``; CgroupError on failure (nothing
        is left behind). Limits of a controller this host lacks are skipped."""
        cgroup = self.get(task_id)
        try:
            for directory in cgroup.dirs:
                directory.mkdir(exist_ok=True)
            cgroup.apply(limits)
        except OSError as exc:
            cgroup.remove()
            raise CgroupError(f"cannot set up cgroup {task_id}: {exc}") from exc
        return cgroup

    def get(self, task_id: str) -> TaskCgroup:
        """A handle on the task cgroup ``task_id`` (which may or may not exist)."""
        if task_id in ("", ".", "..") or "/" in task_id or "\0" in task_id:
            raise ValueError(f"bad task cgroup name {task_id!r}")
        return TaskCgroup(self, task_id)

    def list_tasks(self) -> list[str]:
        """Names of the task cgroups that exist under the node root, in any hierarchy."""
        names: set[str] = set()
        for hierarchy in self.hierarchies:
            with contextlib.suppress(OSError):
                names.update(p.name for p in hierarchy.root.iterdir() if p.is_dir())
        return sorted(names)

    def remove_root(self) -> bool:
        """Remove the (empty) node root directories; True if all are gone."""
        return all(fs.rmdir(h.root, attempts=1) for h in self.hierarchies)


class TaskCgroup:
    """One task's cgroup: a directory in each hierarchy the manager uses."""

    def __init__(self, manager: CgroupManager, task_id: str) -> None:
        self.manager = manager
        self.task_id = task_id

    def dir(self, role: str) -> Path | None:
        hierarchy = self.manager.roles.get(role)
        return hierarchy.root / self.task_id if hierarchy is not None else None

    @property
    def dirs(self) -> list[Path]:
        return [h.root / self.task_id for h in self.manager.hierarchies]

    @property
    def join_files(self) -> list[Path]:
        """The files a pid is written to in order to join the task (every hierarchy)."""
        return [d / "cgroup.procs" for d in self.dirs]

    def apply(self, limits: Limits) -> None:
        """Write ``limits`` to the control files; raises OSError."""
        memory, cpu, pids = self.dir("memory"), self.dir("cpu"), self.dir("pids")
        v1 = {role: self.manager.roles[role].version == 1 for role in LIMITED if self.dir(role)}
        if limits.memory is not None and memory is not None:
            if v1["memory"]:
                fs.write(memory / "memory.limit_in_bytes", limits.memory)
                if (memory / "memory.memsw.limit_in_bytes").exists():
                    fs.write(memory / "memory.memsw.limit_in_bytes", limits.memory)
            else:
                fs.write(memory / "memory.max", limits.memory)
                if (memory / "memory.swap.max").exists():
                    fs.write(memory / "memory.swap.max", 0)
        if limits.cpus is not None and cpu is not None:
            quota = max(1000, round(limits.cpus * CPU_PERIOD_US))
            if v1["cpu"]:
                fs.write(cpu / "cpu.cfs_period_us", CPU_PERIOD_US)
                fs.write(cpu / "cpu.cfs_quota_us", quota)
            else:
                fs.write(cpu / "cpu.max", f"{quota} {CPU_PERIOD_US}")
        if limits.pids is not None and pids is not None:
            fs.write(pids / "pids.max", limits.pids)

    def add(self, pid: int) -> None:
        """Move process ``pid`` into the task in every hierarchy; raises OSError."""
        for path in self.join_files:
            fs.write(path, pid)

    def pids(self) -> list[int]:
        track = self.dir("track")
        assert track is not None
        return fs.read_procs(track)

    def populated(self) -> bool:
        """True while any process is in the task (False once its directory is gone)."""
        track = self.dir("track")
        assert track is not None
        if self.manager.roles["track"].version == 2:
            return fs.read_keyed(track / "cgroup.events", "populated") == 1
        return bool(fs.read_procs(track))

    def signal(self, sig: int, spare: frozenset[int] = frozenset()) -> None:
        """Send ``sig`` to every process in the task but ``spare``: with the task frozen
        meanwhile where the host can freeze it, so that no process forked in between
        misses it."""
        freezer = self._freezer()
        if freezer is None:
            self._signal_members(sig, spare)
        else:
            self._frozen_signal(*freezer, sig, spare)

    def _signal_members(self, sig: int, spare: frozenset[int] = frozenset()) -> None:
        for pid in self.pids():
            if pid not in spare:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)

    def _freezer(self) -> tuple[Path, tuple[str, str], Callable[[Path], bool]] | None:
        """The task's freeze control: v2 ``cgroup.freeze``, else the v1 freezer's state."""
        track = self.dir("track")
        assert track is not None
        if self.manager.roles["track"].version == 2:
            return track / "cgroup.freeze", ("1", "0"), _v2_frozen
        if self.manager.kill_mode == "freeze":
            return track / "freezer.state", ("FROZEN", "THAWED"), _v1_frozen
        return None

    def kill(self, timeout: float = 0.0) -> bool:
        """SIGKILL every process in the task, setsid'd daemons included; with ``timeout``,
        repeat until it is empty or the time is up. True if it is empty."""
        deadline = time.monotonic() + timeout
        while True:
            self._kill_once()
            if not self.populated():
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)

    def usage(self) -> Usage:
        memory, cpuacct = self.dir("memory"), self.dir("cpuacct")
        peak = oom = cpu = None
        if memory is not None and self.manager.roles["memory"].version == 1:
            peak = fs.read_int(memory / "memory.max_usage_in_bytes")
            oom = fs.read_keyed(memory / "memory.oom_control", "oom_kill")
        elif memory is not None:
            peak = fs.read_int(memory / "memory.peak")
            oom = fs.read_keyed(memory / "memory.events", "oom_kill")
        if cpuacct is not None and self.manager.roles["cpuacct"].version == 1:
            ns = fs.read_int(cpuacct / "cpuacct.usage")
            cpu = None if ns is None else ns / 1e9
        elif cpuacct is not None:
            usec = fs.read_keyed(cpuacct / "cpu.stat", "usage_usec")
            cpu = None if usec is None else usec / 1e6
        return Usage(peak_memory=peak, cpu_seconds=cpu, oom_kills=oom or 0)

    def remove(self) -> bool:
        """Remove the task's directories (tolerating a short EBUSY while its last processes
        exit); True if all are gone."""
        return all([fs.rmdir(d) for d in self.dirs])

    def _kill_once(self) -> None:
        track = self.dir("track")
        assert track is not None
        mode = self.manager.kill_mode
        if mode == "kill":
            with contextlib.suppress(FileNotFoundError):
                fs.write(track / "cgroup.kill", 1)
        else:
            self.signal(signal.SIGKILL)

    def _frozen_signal(
        self,
        control: Path,
        values: tuple[str, str],
        frozen: Callable[[Path], bool],
        sig: int,
        spare: frozenset[int] = frozenset(),
    ) -> None:
        """Freeze, send ``sig`` to every member but ``spare`` (none can fork meanwhile),
        thaw."""
        try:
            fs.write(control, values[0])
        except OSError:
            self._signal_members(sig, spare)
            return
        try:
            deadline = time.monotonic() + 1.0
            while not frozen(control.parent) and time.monotonic() < deadline:
                time.sleep(0.005)
            self._signal_members(sig, spare)
        finally:
            with contextlib.suppress(OSError):
                fs.write(control, values[1])


def _v1_frozen(directory: Path) -> bool:
    return (fs.read(directory / "freezer.state") or "").strip() == "FROZEN"


def _v2_frozen(directory: Path) -> bool:
    return fs.read_keyed(directory / "cgroup.events", "frozen") == 1


def probe_cgroups(node_name: str, proc: Path = Path("/proc/self")) -> CgroupProbe:
    """Find usable cgroup hierarchies and set up the node roots in them.

    Unavailable (manager None) when not root, when nothing is mounted, or when no hierarchy
    can be written; the line then says why and that tasks run as process groups.
    """

    def unavailable(reason: str, warnings: tuple[str, ...] = ()) -> CgroupProbe:
        line = f"cgroups unavailable ({reason}): tasks are process groups, no limits"
        return CgroupProbe(None, line, warnings)

    if os.geteuid() != 0:
        return unavailable("not root")
    mounts = fs.parse_mountinfo(fs.read(proc / "mountinfo") or "")
    if not mounts:
        return unavailable("no cgroup filesystem mounted")
    places = fs.parse_proc_cgroup(fs.read(proc / "cgroup") or "")
    roles, kill_mode, warnings, reason = fs.setup_roles(mounts, places, node_name)
    if "track" not in roles:
        return unavailable(reason, tuple(warnings))
    manager = CgroupManager(roles, kill_mode)
    warnings += [f"{c} limits are not enforced: no usable {c} controller" for c in LIMITED
                 if c not in roles]  # fmt: skip
    return CgroupProbe(manager, manager.describe(), tuple(warnings))
