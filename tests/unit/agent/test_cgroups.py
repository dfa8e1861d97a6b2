"""Tests for per-task cgroups: discovery, the manager on this host's real cgroupfs, and
tasks the supervisor contains in them (limits, whole-tree kill, accounting)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from corral.agent import cgroupfs as fs
from corral.agent.cgroups import CgroupManager, Limits, probe_cgroups
from tests.unit.agent.test_supervisor import STUBBORN, Harness, pid_alive, py, read_pids, wait_for

HYBRID_MOUNTINFO = """\
24 30 0:22 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:9 - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
37 31 0:34 / /sys/fs/cgroup/freezer ro,relatime - cgroup cgroup ro,freezer
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw,nsdelegate
50 31 0:40 /docker/abc /mnt/odd\\040dir rw - cgroup cgroup rw,pids
"""

PROC_CGROUP = """\
12:pids:/docker/abc/inner
4:memory:/process_api/x
3:cpu,cpuacct:/
2:freezer:/
1:name=systemd:/init.scope
0::/user.slice
"""

pytestmark = [pytest.mark.timeout(120)]

# Touches argv[1] MiB of memory, page by page, then sleeps a moment.
HOG = """
import sys, time
data = b"x" * (int(sys.argv[1]) << 20)
time.sleep(0.2)
"""


# -- discovery (no privileges needed) ---------------------------------------------------------


def test_parse_mountinfo_finds_v1_and_v2_hierarchies() -> None:
    mounts = fs.parse_mountinfo(HYBRID_MOUNTINFO)
    assert [(m.version, str(m.point), sorted(m.controllers), m.readonly) for m in mounts] == [
        (1, "/sys/fs/cgroup/cpu,cpuacct", ["cpu", "cpuacct"], False),
        (1, "/sys/fs/cgroup/memory", ["memory"], False),
        (1, "/sys/fs/cgroup/freezer", ["freezer"], True),
        (2, "/sys/fs/cgroup/unified", [], False),
        (1, "/mnt/odd dir", ["pids"], False),
    ]
    assert mounts[-1].root == "/docker/abc"


def test_own_cgroup_dir_follows_the_mount_root() -> None:
    places = fs.parse_proc_cgroup(PROC_CGROUP)
    assert frozenset({"name=systemd"}) not in places
    cpu, memory, _freezer, unified, pids = fs.parse_mountinfo(HYBRID_MOUNTINFO)
    assert fs.own_cgroup_dir(cpu, places) == Path("/sys/fs/cgroup/cpu,cpuacct")
    assert fs.own_cgroup_dir(memory, places) == Path("/sys/fs/cgroup/memory/process_api/x")
    assert fs.own_cgroup_dir(unified, places) == Path("/sys/fs/cgroup/unified/user.slice")
    assert fs.own_cgroup_dir(pids, places) == Path("/mnt/odd dir/inner")
    outside = fs.CgroupMount(1, Path("/x"), "/elsewhere", frozenset({"pids"}), False)
    assert fs.own_cgroup_dir(outside, places) is None


@pytest.mark.parametrize(
    ("versions", "mode", "line"),
    [
        ({"memory": 1, "cpu": 1, "pids": 1}, "kill", "cgroups: v2 (kill) + v1 memory,cpu,pids"),
        ({"memory": 2, "cpu": 2, "pids": 2}, "kill", "cgroups: v2 (kill) memory,cpu,pids"),
        ({"memory": 2, "pids": 1}, "kill", "cgroups: v2 (kill) memory + v1 pids; no cpu limits"),
        (
            {"memory": 1, "cpu": 1},
            "freeze",
            "cgroups: v1 freezer (freeze) + v1 memory,cpu; no pids limits",
        ),
    ],
)
def test_describe(versions: dict[str, int], mode: str, line: str) -> None:
    v2, v1 = fs.Hierarchy(2, Path("/v2/corral-n")), fs.Hierarchy(1, Path("/v1/corral-n"))
    roles = {name: v2 if version == 2 else v1 for name, version in versions.items()}
    roles["track"] = v1 if mode == "freeze" else v2
    assert CgroupManager(roles, mode).describe() == line


def test_limits_round_trip_through_json() -> None:
    limits = Limits(memory=64 << 20, cpus=1.5, pids=100)
    assert Limits.from_json(json.loads(json.dumps(limits.to_json()))) == limits
    assert Limits.from_json({}) == Limits()


def test_unavailable_without_mounts_or_when_read_only(tmp_path: Path) -> None:
    (tmp_path / "mountinfo").write_text("24 30 0:22 / /sys rw - sysfs sysfs rw\n")
    (tmp_path / "cgroup").write_text("0::/\n")
    probe = probe_cgroups("n", proc=tmp_path)
    if os.geteuid() != 0:
        assert probe.line == "cgroups unavailable (not root): tasks are process groups, no limits"
        return
    assert probe.manager is None
    assert probe.line == (
        "cgroups unavailable (no cgroup filesystem mounted): tasks are process groups, no limits"
    )
    hierarchy = tmp_path / "fake"
    hierarchy.mkdir()
    (tmp_path / "mountinfo").write_text(f"41 31 0:38 / {hierarchy} ro - cgroup2 cgroup2 ro\n")
    probe = probe_cgroups("n", proc=tmp_path)
    assert probe.manager is None
    assert "(cgroup filesystem is read-only)" in probe.line
    assert not (hierarchy / "corral-n").exists()


def test_unavailable_when_not_root() -> None:
    code = (
        "import os; from corral.agent.cgroups import probe_cgroups\n"
        "if os.geteuid() == 0: os.setegid(65534); os.seteuid(65534)\n"
        "print(probe_cgroups('n').line)"
    )
    src = str(Path(__file__).resolve().parents[3] / "src")
    env = {**os.environ, "PYTHONPATH": src}
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert result.stdout.strip() == (
        "cgroups unavailable (not root): tasks are process groups, no limits"
    )


# -- the manager on this host -----------------------------------------------------------------


@pytest.fixture
def manager() -> Iterator[CgroupManager]:
    probe = probe_cgroups(f"t{uuid.uuid4().hex[:10]}")
    if probe.manager is None:
        pytest.skip(probe.line)
    yield probe.manager
    for name in probe.manager.list_tasks():
        cgroup = probe.manager.get(name)
        cgroup.kill(timeout=10)
        cgroup.remove()
    assert probe.manager.remove_root()


def sleeper(*args: str) -> subprocess.Popen[bytes]:
    """A process that stops at its first line until released through stdin."""
    script = 'read -r _; exec "$@"'
    return subprocess.Popen(["/bin/sh", "-c", script, "sh", *args], stdin=subprocess.PIPE)


def release(proc: subprocess.Popen[bytes]) -> None:
    assert proc.stdin is not None
    proc.stdin.write(b"go\n")
    proc.stdin.close()


def test_describe_names_what_is_used(manager: CgroupManager) -> None:
    line = manager.describe()
    assert line.startswith("cgroups: v")
    assert f"({manager.kill_mode})" in line


def test_kill_reaches_setsid_daemons_and_the_cgroup_is_removed(
    manager: CgroupManager, tmp_path: Path
) -> None:
    cgroup = manager.create("daemons", Limits())
    assert manager.list_tasks() == ["daemons"]
    pids_file = tmp_path / "pids"
    daemon = "import subprocess, sys, time\n" + (
        "kid = subprocess.Popen(['sleep', '1000'], start_new_session=True)\n"
        "open(sys.argv[1], 'w').write(str(kid.pid))\n"
        "time.sleep(1000)\n"
    )
    proc = sleeper(sys.executable, "-c", daemon, str(pids_file))
    cgroup.add(proc.pid)
    release(proc)
    [kid] = read_pids(pids_file, 1)
    assert sorted(cgroup.pids()) == sorted([proc.pid, kid])
    assert cgroup.populated()

    cgroup.signal(signal.SIGSTOP)  # reaches the daemon too
    wait_for(lambda: "T" in Path(f"/proc/{kid}/stat").read_text().split(")")[1][:3])
    assert cgroup.kill(timeout=10)
    assert proc.wait(timeout=10) == -signal.SIGKILL
    wait_for(lambda: not pid_alive(kid), what="daemon to die")
    assert not cgroup.populated()
    assert cgroup.remove()
    assert manager.list_tasks() == []
    assert not cgroup.populated()  # gone: reads as empty


def test_freezer_kill_stops_a_forking_tree(manager: CgroupManager) -> None:
    # The v1 freezer path: a manager set up without the v2 hierarchy.
    mounts = fs.parse_mountinfo(Path("/proc/self/mountinfo").read_text())
    if not any("freezer" in m.controllers for m in mounts):
        pytest.skip("no v1 freezer hierarchy")
    places = fs.parse_proc_cgroup(Path("/proc/self/cgroup").read_text())
    node = manager.roles["track"].root.name.removeprefix("corral-")
    roles, kill_mode, _warnings, _ = fs.setup_roles(
        [m for m in mounts if m.version == 1], places, node
    )
    assert kill_mode == "freeze"
    v1 = CgroupManager(roles, kill_mode)
    try:
        cgroup = v1.create("forker", Limits())
        proc = sleeper("/bin/sh", "-c", "while :; do sleep 1000 & done")
        cgroup.add(proc.pid)
        release(proc)
        wait_for(lambda: len(cgroup.pids()) > 20, what="a forking tree")
        assert cgroup.kill(timeout=10)
        assert proc.wait(timeout=10) == -signal.SIGKILL
        assert cgroup.remove()
    finally:
        for name in v1.list_tasks():
            v1.get(name).kill(timeout=10)
            v1.get(name).remove()
        v1.remove_root()


def test_limits_are_written(manager: CgroupManager) -> None:
    cgroup = manager.create("limited", Limits(memory=64 << 20, cpus=0.5, pids=7))
    memory, cpu, pids = cgroup.dir("memory"), cgroup.dir("cpu"), cgroup.dir("pids")
    if memory is not None and manager.roles["memory"].version == 1:
        assert fs.read_int(memory / "memory.limit_in_bytes") == 64 << 20
    elif memory is not None:
        assert fs.read_int(memory / "memory.max") == 64 << 20
    if cpu is not None and manager.roles["cpu"].version == 1:
        assert fs.read_int(cpu / "cpu.cfs_quota_us") == 50_000
        assert fs.read_int(cpu / "cpu.cfs_period_us") == 100_000
    elif cpu is not None:
        assert fs.read(cpu / "cpu.max") == "50000 100000\n"
    if pids is not None:
        assert fs.read_int(pids / "pids.max") == 7
    assert cgroup.remove()


def test_bad_task_names_are_refused(manager: CgroupManager) -> None:
    for name in ("", "a/b", "..", "."):
        with pytest.raises(ValueError):
            manager.get(name)


V2_SETUP = """
import json, os, sys
from pathlib import Path
from corral.agent import cgroupfs as fs
own = Path(sys.argv[1])
fs.write(own / "cgroup.procs", os.getpid())
mounts = fs.parse_mountinfo(Path("/proc/self/mountinfo").read_text())
places = fs.parse_proc_cgroup(Path("/proc/self/cgroup").read_text())
v2 = [m for m in mounts if m.version == 2]
roles, mode, warnings, _ = fs.setup_roles(v2, places, "n", limited=("hugetlb",))
again = fs.setup_roles(v2, fs.parse_proc_cgroup(Path("/proc/self/cgroup").read_text()),
                       "n", limited=("hugetlb",))
print(json.dumps({"roles": {k: str(h.root) for k, h in roles.items()}, "mode": mode,
                  "warnings": warnings, "again": str(again[0]["track"].root),
                  "cgroup": Path("/proc/self/cgroup").read_text()}))
"""


def _v2_with(controller: str) -> Path | None:
    for mount in fs.parse_mountinfo(Path("/proc/self/mountinfo").read_text()):
        if mount.version == 2 and controller in (fs.read(mount.point / "cgroup.controllers") or ""):
            return mount.point
    return None


@pytest.mark.skipif(os.geteuid() != 0 or _v2_with("hugetlb") is None, reason="needs v2 hugetlb")
def test_v2_setup_moves_the_agent_into_a_leaf_to_delegate_controllers(tmp_path: Path) -> None:
    # The "no internal processes" rule, for real, with the one controller this host's v2
    # hierarchy may offer: a process in a non-root cgroup moves into <own>/corral-agent.
    point = _v2_with("hugetlb")
    assert point is not None
    enabled_here = "hugetlb" not in (fs.read(point / "cgroup.subtree_control") or "")
    if enabled_here:  # the root cgroup must offer it to its children
        fs.write(point / "cgroup.subtree_control", "+hugetlb")
    own = point / f"crl-t{uuid.uuid4().hex[:8]}"
    own.mkdir()
    try:
        src = str(Path(__file__).resolve().parents[3] / "src")
        result = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(V2_SETUP), str(own)],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": src},
            check=True,
        )
        out = json.loads(result.stdout)
        assert out["warnings"] == []
        assert out["mode"] == "kill"
        assert out["roles"]["hugetlb"] == out["roles"]["track"] == str(own / "corral-n")
        assert out["again"] == str(own / "corral-n")  # a second probe finds the same root
        assert f"0::/{own.name}/corral-agent" in out["cgroup"]
        assert "hugetlb" in fs.read(own / "cgroup.subtree_control")  # type: ignore[operator]
        assert "hugetlb" in fs.read(own / "corral-n" / "cgroup.subtree_control")  # type: ignore[operator]
    finally:
        for leaf in ("corral-n", "corral-agent", ""):
            fs.rmdir(own / leaf if leaf else own)
        if enabled_here:
            with contextlib.suppress(OSError):  # busy if another cgroup uses it meanwhile
                fs.write(point / "cgroup.subtree_control", "-hugetlb")


# -- tasks contained by the supervisor --------------------------------------------------------


@pytest.fixture
def h(tmp_path: Path, manager: CgroupManager) -> Iterator[Harness]:
    harness = Harness(tmp_path, manager)
    yield harness
    harness.sup.stop_all(grace_period=0, wait=True)


def test_memory_limit_ends_the_task_as_out_of_memory(h: Harness) -> None:
    if not h.cgroups or not h.cgroups.enforces("memory"):
        pytest.skip("no memory controller")
    h.sup.start(replace(h.launch("hog", py(HOG, 256)), limits=Limits(memory=64 << 20)))
    status = h.wait_exited("hog", timeout=30)
    assert status.exit_code == 137
    assert status.reason is not None
    assert "out of memory" in status.reason
    assert status.reason == "out of memory: killed at its limit of 64 MiB"


def test_peak_memory_and_cpu_seconds_are_accounted(h: Harness) -> None:
    code = """
    import sys, time
    data = b"x" * (100 << 20)
    start = time.process_time()
    while time.process_time() - start < 0.3:
        pass
    """
    h.start("use", py(code))
    status = h.wait_exited("use", timeout=30)
    assert status.exit_code == 0
    assert status.reason is None
    assert status.peak_memory is not None
    assert status.peak_memory >= 100 << 20
    assert status.cpu_seconds is not None
    assert status.cpu_seconds >= 0.3


def test_pids_limit_bounds_a_fork_bomb(h: Harness) -> None:
    if not h.cgroups or not h.cgroups.enforces("pids"):
        pytest.skip("no pids controller")
    code = """
    import subprocess
    kids = []
    try:
        for _ in range(200):
            kids.append(subprocess.Popen(["sleep", "1000"]))
    except OSError as exc:
        print("refused:", exc.errno, flush=True)
    print(len(kids), flush=True)
    """
    h.sup.start(replace(h.launch("bomb", py(code)), limits=Limits(pids=16)))
    wait_for(lambda: "refused" in h.log("bomb") and h.log("bomb").count("\n") >= 2)
    started = int(h.log("bomb").split()[-1])
    assert 0 < started < 16
    assert h.wait_exited("bomb", timeout=30).exit_code == 0


def test_cpu_limit_is_applied_while_the_task_runs(h: Harness) -> None:
    if not h.cgroups or not h.cgroups.enforces("cpu"):
        pytest.skip("no cpu controller")
    code = "import sys; print(open('/proc/self/cgroup').read(), flush=True); input()"
    h.sup.start(replace(h.launch("cpu", py(code)), limits=Limits(cpus=0.25)))
    wait_for(lambda: "cpu" in h.log("cpu"), what="the task's cgroups")
    cpu_dir = next(p for p in h.cgroups.roles["cpu"].root.iterdir() if p.name.startswith("cpu-"))
    if h.cgroups.roles["cpu"].version == 1:
        assert fs.read_int(cpu_dir / "cpu.cfs_quota_us") == 25_000
    else:
        assert fs.read(cpu_dir / "cpu.max") == "25000 100000\n"
    assert cpu_dir.name in h.log("cpu")  # the task itself runs inside it


def test_daemons_die_when_the_leader_exits_on_its_own(h: Harness) -> None:
    pids_file = h.tmp / "pids"
    code = """
    import os, subprocess, sys
    kid = subprocess.Popen(["sleep", "1000"], start_new_session=True)
    if os.fork() == 0:  # double fork, as daemons do
        os.setsid()
        if os.fork() == 0:
            open(sys.argv[1], "a").write(f"{kid.pid} {os.getpid()}\\n")
            os.execvp("sleep", ["sleep", "1000"])
        os._exit(0)
    os.wait()
    """
    h.start("d", py(code, pids_file))
    daemons = read_pids(pids_file, 2)
    status = h.wait_exited("d", timeout=30)
    assert status.exit_code == 0
    assert not any(pid_alive(p) for p in daemons)


def test_stop_kills_daemons_that_ignore_sigterm(h: Harness) -> None:
    pids_file = h.tmp / "pids"
    ready = h.tmp / "ready"
    code = """
    import subprocess, sys, time
    kid = subprocess.Popen([sys.executable, "-c", sys.argv[3], sys.argv[2]],
                           start_new_session=True)
    open(sys.argv[1], "w").write(str(kid.pid))
    time.sleep(1000)
    """
    h.start("d", py(code, pids_file, ready, textwrap.dedent(STUBBORN)), grace=1.0)
    [daemon] = read_pids(pids_file, 1)
    wait_for(ready.exists, what="daemon ready")
    h.sup.stop("d")
    status = h.wait_exited("d", timeout=30)
    assert status.exit_code == 128 + signal.SIGTERM  # the leader's own end
    assert not pid_alive(daemon)


def test_two_agents_of_one_node_name_get_cgroup_roots_of_their_own(tmp_path: Path) -> None:
    """Two local clusters on one host both have a node-a: neither may share, nor kill,
    the other's task cgroups; a restarted agent (same state directory) finds its own."""
    from corral.agent.agent import Agent
    from tests.unit.agent.helpers import offline_agent

    first = offline_agent(tmp_path / "one", "node-a")
    if os.geteuid() != 0 or probe_cgroups("probe").manager is None:
        pytest.skip("no usable cgroups here")
    agents = [
        Agent(replace(a.settings, contain=True))
        for a in (first, offline_agent(tmp_path / "two", "node-a"))
    ]
    again = Agent(replace(agents[0].settings))
    roots = [{h.root for h in a.cgroups.hierarchies} for a in (*agents, again)]  # type: ignore[union-attr]
    assert roots[0].isdisjoint(roots[1])
    assert roots[0] == roots[2]
    for agent in (*agents, again):
        agent.cgroups.remove_root()  # type: ignore[union-attr]
