"""``kind: ray``: its options, its roles, what each task runs (pure), and how the
in-task runtime stops a Ray node (a stand-in ``ray`` program: no Ray needed)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from corral.core.job import JobSpec
from corral.errors import ValidationError
from corral.kinds import ray_node
from corral.kinds.base import JobNode, TaskContext
from corral.kinds.registry import get_kind
from corral.schemas.manifest import parse_manifest

RAY = get_kind("ray")
REFUSED = (ValueError, ValidationError)  # from the kind / from the manifest
SPEC8 = {  # SPEC section 8's example
    "kind": "ray",
    "roles": [
        {"name": "head", "nodes": 1, "resources": {"gpus": 0, "cpus": 8}},
        {
            "name": "worker",
            "nodes": 2,
            "resources": {"gpus": 8},
            "command": ["python", "worker.py"],
        },
    ],
    "command": ["python", "driver.py"],
}


def spec_of(**manifest: object) -> JobSpec:
    return parse_manifest({"kind": "ray", "command": ["python", "driver.py"], **manifest}).to_spec()


def context(spec: JobSpec, rank: int, gpus: tuple[int, ...] = ()) -> TaskContext:
    nodes = tuple(
        JobNode(f"n{i}", f"10.0.0.{i}", 1, spec.role_of(i).name) for i in range(spec.node_count)
    )
    return TaskContext(
        spec=spec,
        job_id=42,
        attempt=0,
        rank=rank,
        local_rank=0,
        node_rank=rank,
        node=f"n{rank}",
        role=spec.role_of(rank),
        nodes=nodes,
        master_addr="10.0.0.0",
        master_port=29501,
        gpus=gpus,
    )


def test_options_defaults_durations_and_refusals() -> None:
    assert RAY.options({}) == {
        "dashboard": False,
        "wait_for_nodes": 300.0,
        "start_args": [],
        "head_args": [],
    }
    given = RAY.options({"wait_for_nodes": "2m", "dashboard": True, "dashboard_port": 8300})
    assert (given["wait_for_nodes"], given["dashboard_port"]) == (120.0, 8300)
    assert RAY.options(given) == given  # a stored manifest validates again
    for block, message in [
        ({"dashbord": True}, "ray.dashbord: not an option of kind ray .*dashboard, "),
        ({"dashboard": "yes"}, "ray.dashboard: 'yes' is not a valid value"),
        ({"start_args": ["--num-cpus", 4]}, "ray.start_args: a list of `ray start` arguments"),
        ({"dashboard_port": 80}, "ray.dashboard_port: 80 is not a port"),
        ({"wait_for_nodes": "soon"}, "expected a duration"),
    ]:
        with pytest.raises(ValueError, match=message):
            RAY.options(block)


def test_a_manifest_refuses_an_unknown_ray_option_or_a_ray_block_on_another_kind() -> None:
    with pytest.raises(REFUSED, match="not an option of kind ray"):
        spec_of(ray={"workers": 3})
    with pytest.raises(REFUSED, match="options of kind ray, but this job is of kind pytorch"):
        parse_manifest({"command": "true", "ray": {"dashboard": True}})


def test_nodes_become_a_head_and_daemon_workers_of_the_same_shape() -> None:
    spec = spec_of(nodes=3, resources={"gpus": 4, "cpus": 16, "memory": "64GB"})
    head, worker = spec.roles
    assert (head.name, head.nodes, head.daemon) == ("head", 1, False)
    assert (worker.name, worker.nodes, worker.daemon) == ("worker", 2, True)
    for role in spec.roles:
        assert (role.gpus.count, role.cpus, role.memory) == (4, 16, 64 * 1000**3)
    assert spec.world_size == 3 and spec.total_gpus == 12
    assert [r.name for r in spec_of().roles] == ["head"]


def test_given_roles_put_the_head_first_and_make_the_others_daemons() -> None:
    spec = parse_manifest({**SPEC8, "roles": SPEC8["roles"][::-1]}).to_spec()
    assert [(r.name, r.daemon) for r in spec.roles] == [("head", False), ("worker", True)]
    assert spec.role_of(0).name == "head"  # rank 0 (MASTER_ADDR) is the head


@pytest.mark.parametrize(
    ("manifest", "message"),
    [
        ({"nodes": 2, "tasks_per_node": 2, "resources": {"gpus": 2}}, "the job has tasks_per"),
        ({"roles": [{"name": "w", "nodes": 2}]}, "one role must be named 'head'.*roles given: w"),
        ({"roles": [{"name": "head", "nodes": 2}]}, "the head role has one node"),
        (
            {"roles": [{"name": "head"}, {"name": "w", "tasks_per_node": 2}]},
            "role w has tasks_per_node 2.*set tasks_per_node to 1",
        ),
        ({"resources": {"tpu": "v5p:2x2x1"}}, "not on a TPU slice"),
    ],
)
def test_shapes_ray_cannot_run_are_refused(manifest: dict, message: str) -> None:
    with pytest.raises(REFUSED, match=message):
        spec_of(**manifest)


def test_the_head_runs_the_driver_and_declares_its_allocation() -> None:
    spec = spec_of(nodes=3, resources={"gpus": 2, "cpus": 6.5, "memory": "10GB"})
    launch = RAY.launch(context(spec, 0, gpus=(4, 5)))
    store = int(10 * 1000**3 * 0.3)
    assert launch.command[:5] == (  # on the agent's interpreter: $CORRAL_PYTHON
        "/bin/sh",
        "-c",
        'exec "${CORRAL_PYTHON:-python3}" -m "$0" "$@"',
        "corral.kinds.ray_node",
        "head",
    )
    assert launch.command[5:] == (
        "--nodes",
        "3",
        "--wait",
        "300",
        "--start-arg=--num-gpus=2",
        "--start-arg=--num-cpus=6",
        f"--start-arg=--object-store-memory={store}",
        f"--start-arg=--memory={10 * 1000**3 - store}",
        "--start-arg=--node-ip-address=10.0.0.0",
        "--",
        "python",
        "driver.py",
    )
    assert launch.env == {"RAY_ADDRESS": "10.0.0.0:29501", "RAY_USAGE_STATS_ENABLED": "0"}


def test_workers_run_a_ray_node_and_their_own_command_beside_it() -> None:
    spec = parse_manifest(SPEC8).to_spec()
    head = RAY.launch(context(spec, 0)).command
    assert "--start-arg=--num-gpus=0" in head and "--start-arg=--num-cpus=8" in head
    assert head[-3:] == ("--", "python", "driver.py") and "--nodes" in head
    worker = RAY.launch(context(spec, 2, gpus=tuple(range(8)))).command
    assert worker[4] == "worker" and "--nodes" not in worker
    assert "--start-arg=--num-gpus=8" in worker
    assert not any(arg.startswith("--start-arg=--num-cpus") for arg in worker)  # the machine's
    assert worker[-3:] == ("--", "python", "worker.py")
    plain = RAY.launch(context(spec_of(nodes=2), 1)).command
    assert "--" not in plain  # no command of its own: the job's is the driver's only


def test_options_reach_the_runtime() -> None:
    spec = spec_of(
        nodes=2,
        command="python driver.py --fast",
        ray={
            "dashboard": True,
            "wait_for_nodes": 30,
            "start_args": ["--object-store-memory=100000000"],
            "head_args": ["--dashboard-host=0.0.0.0"],
            "python": "/opt/env/bin/python",
        },
    )
    head = RAY.launch(context(spec, 0)).command
    assert head[:4] == ("/opt/env/bin/python", "-m", "corral.kinds.ray_node", "head")
    assert head[head.index("--dashboard") + 1 : head.index("--dashboard") + 3] == (
        "--dashboard-port",
        "8265",
    )
    assert head[head.index("--wait") + 1] == "30"
    assert head[-6:] == (
        "--start-arg=--object-store-memory=100000000",
        "--start-arg=--dashboard-host=0.0.0.0",  # the user's come last: they win
        "--",
        "/bin/sh",
        "-c",
        "python driver.py --fast",
    )
    worker = RAY.launch(context(spec, 1)).command
    assert "--start-arg=--dashboard-host=0.0.0.0" not in worker and "--dashboard" not in worker


def test_runtime_arguments_and_exit_statuses() -> None:
    opts = ray_node.parse(["head", "--nodes", "3", "--start-arg=--num-gpus=1", "--", "a", "--b"])
    assert (opts.role, opts.nodes, opts.start_arg, opts.command) == (
        "head",
        3,
        ["--num-gpus=1"],
        ["a", "--b"],
    )
    assert ray_node.parse(["worker"]).command == []
    assert [ray_node.exit_status(c) for c in (0, 3, -15)] == [0, 3, 143]


FAKE_RAY = """#!/bin/sh
# a stand-in for `ray start --block`: a child in its session that ignores SIGTERM
trap '' TERM
sleep 300 &
echo $! > "$PIDFILE"
wait
"""


def test_stopping_a_ray_node_leaves_nothing_of_its_session(
    tmp_path: Path,
) -> None:
    fake = tmp_path / "ray"
    fake.write_text(FAKE_RAY)
    fake.chmod(0o755)
    pidfile = tmp_path / "child.pid"
    node = ray_node.RayNode([], {**os.environ, "PIDFILE": str(pidfile)}, cli=str(fake))
    deadline = time.monotonic() + 10
    while not pidfile.exists() or not pidfile.read_text().strip():
        assert time.monotonic() < deadline, "the stand-in never started"
        time.sleep(0.05)
    child = int(pidfile.read_text())
    assert Path(node.temp_dir).is_dir() and ray_node.session_members(node.proc.pid)
    node.stop(timeout=0.5)  # the stand-in ignores SIGTERM: it is killed
    assert not ray_node.session_members(node.proc.pid)
    assert not Path(f"/proc/{child}").exists() or "Z" in _state(child)
    assert not Path(node.temp_dir).exists()


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_the_runtime_refuses_to_run_outside_a_task(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MASTER_PORT", raising=False)
    assert ray_node.main(["worker"]) == ray_node.FAILED


def test_a_sweep_removes_only_the_directories_of_ray_nodes_whose_runtime_is_gone(
    tmp_path: Path,
) -> None:
    dead, live, foreign = (tmp_path / name for name in ("ray-1-a", "ray-2-b", "ray-3-c"))
    for directory in (dead, live, foreign):
        (directory / "session_x").mkdir(parents=True)
    (dead / ray_node.OWNER).write_text(f"{os.getpid()} 1")  # a pid reused since
    (live / ray_node.OWNER).write_text(ray_node._identity(os.getpid()))
    ray_node.sweep(tmp_path)
    assert not dead.exists() and live.exists() and foreign.exists()
