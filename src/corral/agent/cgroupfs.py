"""The cgroup filesystem: finding hierarchies, preparing the node roots, control files.

Hierarchies are found from ``/proc/self/mountinfo`` (cgroup v1 mounts name their controllers
in the super options; a cgroup2 mount is the unified hierarchy) and this process's place in
each from ``/proc/self/cgroup``. ``setup_roles`` picks, per controller, v2 if the agent's own
v2 cgroup offers it, else the v1 hierarchy bound to it. The task API is in ``cgroups.py``.
"""

from __future__ import annotations

import errno
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

LIMITED = ("memory", "cpu", "pids")
"""Controllers that enforce task limits."""

AGENT_LEAF = "corral-agent"
"""On cgroup v2 the agent moves itself into this leaf of its own cgroup, so that controllers
can be enabled for its children (a v2 cgroup that delegates controllers holds no processes)."""

V1_CONTROLLERS = frozenset(
    {
        "blkio", "cpu", "cpuacct", "cpuset", "devices", "freezer", "hugetlb", "memory",
        "misc", "net_cls", "net_prio", "perf_event", "pids", "rdma",
    }
)  # fmt: skip


@dataclass(frozen=True)
class CgroupMount:
    """One mounted cgroup hierarchy: ``root`` is the cgroup shown at ``point``."""

    version: int
    point: Path
    root: str
    controllers: frozenset[str]  # v1: bound controllers; v2: empty (see cgroup.controllers)
    readonly: bool


@dataclass(frozen=True)
class Hierarchy:
    version: int
    root: Path  # the node root: <agent's own cgroup>/corral-<node>-<agent id>


def setup_roles(
    mounts: list[CgroupMount],
    places: dict[frozenset[str], str],
    node_name: str,
    limited: tuple[str, ...] = LIMITED,
) -> tuple[dict[str, Hierarchy], str, list[str], str]:
    """Create the node roots and map roles ("track", "cpuacct", "freezer" and each of
    ``limited``) to hierarchies. Returns (roles, kill mode, warnings, reason): without a
    "track" role cgroups are unusable and ``reason`` says why."""
    name = f"corral-{safe_name(node_name)}"
    warnings: list[str] = []
    usable: list[tuple[CgroupMount, Path]] = []
    readonly = False
    for mount in mounts:
        own = own_cgroup_dir(mount, places)
        if own is None or not own.is_dir():
            continue
        if mount.readonly or not os.access(own, os.W_OK):
            readonly = True
        elif not any(m.version == mount.version and m.controllers == mount.controllers
                     for m, _ in usable):  # fmt: skip
            usable.append((mount, own))
    roles: dict[str, Hierarchy] = {}
    kill_mode = "signal"
    v2 = next(((m, own) for m, own in usable if m.version == 2), None)
    if v2 is not None:
        hierarchy, enabled, kill_mode = _setup_v2(v2[0], v2[1], name, limited, warnings)
        if hierarchy is not None:
            roles["track"] = hierarchy
            roles.update(dict.fromkeys(enabled, hierarchy))
            if (hierarchy.root / "cpu.stat").exists():
                roles["cpuacct"] = hierarchy
    for controller in (*limited, "cpuacct", "freezer"):
        if controller in roles or (controller == "freezer" and "track" in roles):
            continue
        found = next((own for m, own in usable if controller in m.controllers), None)
        if found is None:
            continue
        try:
            (found / name).mkdir(exist_ok=True)
        except OSError as exc:
            warnings.append(f"cgroup v1 {controller} unusable: cannot create {found / name}: {exc}")
            continue
        roles[controller] = Hierarchy(1, found / name)
    if "track" not in roles and roles:
        kill_mode = "freeze" if "freezer" in roles else "signal"
        roles["track"] = roles.get("freezer") or next(iter(roles.values()))
    reason = "cgroup filesystem is read-only" if readonly and not usable else (
        "no usable cgroup hierarchy")  # fmt: skip
    return roles, kill_mode, warnings, reason


def _setup_v2(
    mount: CgroupMount, own: Path, name: str, limited: tuple[str, ...], warnings: list[str]
) -> tuple[Hierarchy | None, list[str], str]:
    """Prepare ``<own>/<name>`` on cgroup v2, enabling what it can of ``limited`` for the
    tasks. Unless ``own`` is the root cgroup, the agent first moves into ``<own>/AGENT_LEAF``
    (a v2 cgroup that enables controllers for its children may hold no processes)."""
    base = own.parent if own.name == AGENT_LEAF and own != mount.point else own
    root = base / name
    wanted = [c for c in limited if c in _words(base / "cgroup.controllers")]
    if wanted and own == base and (base / "cgroup.type").exists():  # not the root cgroup
        leaf = base / AGENT_LEAF
        try:
            leaf.mkdir(exist_ok=True)
            write(leaf / "cgroup.procs", os.getpid())
        except OSError as exc:
            warnings.append(f"cannot move the agent into {leaf}: {exc}")
    try:
        _enable(base, wanted, warnings)
        root.mkdir(exist_ok=True)
    except OSError as exc:
        warnings.append(f"cgroup v2 unusable: cannot create {root}: {exc}")
        return None, [], "signal"
    _enable(root, [c for c in wanted if c in _words(root / "cgroup.controllers")], warnings)
    enabled = [c for c in wanted if c in _words(root / "cgroup.subtree_control")]
    if (root / "cgroup.kill").exists():
        return Hierarchy(2, root), enabled, "kill"
    return Hierarchy(2, root), enabled, "freeze" if (root / "cgroup.freeze").exists() else "signal"


def _enable(directory: Path, controllers: list[str], warnings: list[str]) -> None:
    for controller in controllers:
        if controller in _words(directory / "cgroup.subtree_control"):
            continue
        try:
            write(directory / "cgroup.subtree_control", f"+{controller}")
        except OSError as exc:
            warnings.append(
                f"{controller} controller not enforced: cannot enable it in {directory}: {exc}"
            )


def _words(path: Path) -> list[str]:
    return (read(path) or "").split()


def parse_mountinfo(text: str) -> list[CgroupMount]:
    """The cgroup and cgroup2 mounts listed in a ``/proc/PID/mountinfo`` text, in order."""
    mounts = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 6 or len(tail) < 3 or tail[0] not in ("cgroup", "cgroup2"):
            continue
        options = set(fields[5].split(",")) | set(tail[2].split(","))
        controllers = frozenset(options & V1_CONTROLLERS) if tail[0] == "cgroup" else frozenset()
        if tail[0] == "cgroup" and not controllers:
            continue  # a named hierarchy (name=systemd) with no controllers: of no use here
        mounts.append(
            CgroupMount(
                version=2 if tail[0] == "cgroup2" else 1,
                point=Path(_unescape(fields[4])),
                root=_unescape(fields[3]),
                controllers=controllers,
                readonly="ro" in options,
            )
        )
    return mounts


def parse_proc_cgroup(text: str) -> dict[frozenset[str], str]:
    """``/proc/PID/cgroup`` as {controllers: path}; the v2 entry has the empty set as key."""
    places: dict[frozenset[str], str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            names = frozenset(n for n in parts[1].split(",") if n and not n.startswith("name="))
            if parts[1] and not names:
                continue  # a named hierarchy
            places[names] = parts[2]
    return places


def own_cgroup_dir(mount: CgroupMount, places: dict[frozenset[str], str]) -> Path | None:
    """Where this process's cgroup in ``mount``'s hierarchy appears, if it is visible there."""
    path = places.get(mount.controllers)
    if path is None:
        return None
    try:
        rel = PurePosixPath(path).relative_to(mount.root)
    except ValueError:
        return None  # our cgroup lies outside the subtree this mount shows
    return mount.point / rel


def read(path: Path) -> str | None:
    """The file's text, or None if it cannot be read."""
    try:
        return path.read_text()
    except OSError:
        return None


def write(path: Path, value: str | int) -> None:
    """Write ``value`` to a control file in one ``write()``; raises OSError."""
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, str(value).encode())
    finally:
        os.close(fd)


def read_int(path: Path) -> int | None:
    text = read(path)
    try:
        return int(text.strip()) if text is not None else None
    except ValueError:
        return None


def read_keyed(path: Path, key: str) -> int | None:
    """The value of ``key`` in a flat-keyed file such as ``memory.events``."""
    for line in (read(path) or "").splitlines():
        name, _, value = line.partition(" ")
        if name == key and value.strip().isdigit():
            return int(value)
    return None


def read_procs(directory: Path) -> list[int]:
    """Pids in the cgroup at ``directory`` (empty if it does not exist)."""
    text = read(directory / "cgroup.procs") or ""
    return [int(pid) for pid in text.split() if pid.isdigit()]


def rmdir(directory: Path, attempts: int = 20) -> bool:
    """Remove a cgroup directory; True if it is gone. Retries briefly while it is busy
    (its last processes may still be exiting)."""
    for attempt in range(attempts):
        try:
            directory.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError as exc:
            if exc.errno != errno.EBUSY or attempt == attempts - 1:
                return False
            time.sleep(0.01 * (attempt + 1))
    return False


def safe_name(text: str, limit: int = 64) -> str:
    """``text`` reduced to characters that are safe in a cgroup directory name."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text)[:limit].lstrip(".") or "_"


def _unescape(field: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)
