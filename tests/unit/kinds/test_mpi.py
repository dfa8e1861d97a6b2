"""``kind: mpi`` (pure): its options, how it expands a job into worker and launcher roles,
and what the launcher task is told to run."""

from __future__ import annotations

import json

import pytest

from corral.core.job import JobSpec
from corral.core.resources import GpuKind
from corral.errors import ValidationError
from corral.kinds.base import JobNode, TaskContext
from corral.kinds.mpi import DEFAULTS, MpiKind
from corral.kinds.mpi_launch import Plan
from corral.schemas.manifest import parse_manifest

KIND = MpiKind()


def manifest(**extra: object) -> dict:
    return {
        "kind": "mpi",
        "nodes": 2,
        "tasks_per_node": 2,
        "resources": {"gpus": 4},
        "command": ["python", "allreduce.py"],
        **extra,
    }


def spec_of(**extra: object) -> JobSpec:
    return parse_manifest(manifest(**extra)).to_spec()


def launcher_context(
    spec: JobSpec, addresses: tuple[str, str] = ("10.0.0.1", "10.0.0.2")
) -> TaskContext:
    """The launcher task of a 2-node job, placed on the first worker's machine."""
    worker = spec.roles[0]
    nodes = (
        JobNode("gpu-1", addresses[0], worker.tasks_per_node, "worker"),
        JobNode("gpu-2", addresses[1], worker.tasks_per_node, "worker"),
        JobNode("gpu-1", addresses[0], 1, "launcher"),
    )
    rank = spec.world_size - 1
    return TaskContext(
        spec=spec,
        job_id=7,
        attempt=0,
        rank=rank,
        local_rank=0,
        node_rank=2,
        node="gpu-1",
        role=spec.role_of(rank),
        nodes=nodes,
        master_addr=addresses[0],
        master_port=29500,
    )


OPTIONS = [
    ("defaults", {}, DEFAULTS),
    (
        "args as a shell string",
        {"mpirun_args": "--mca btl '^openib' -x FOO"},
        {**DEFAULTS, "mpirun_args": ["--mca", "btl", "^openib", "-x", "FOO"]},
    ),
    (
        "interfaces as a string",
        {"tcp_interfaces": "eth0, 10.0.0.0/8"},
        {**DEFAULTS, "tcp_interfaces": ["eth0", "10.0.0.0/8"]},
    ),
    ("ranks", {"ranks": 8}, {**DEFAULTS, "ranks": 8}),
    ("no GPU binding", {"bind_gpus": False}, {**DEFAULTS, "bind_gpus": False}),
    ("launcher cpus", {"launcher_cpus": 0.25}, {**DEFAULTS, "launcher_cpus": 0.25}),
]


@pytest.mark.parametrize(
    ("block", "expected"), [c[1:] for c in OPTIONS], ids=[c[0] for c in OPTIONS]
)
def test_options_fill_in_defaults_and_read_again_unchanged(block: dict, expected: dict) -> None:
    found = KIND.options(block)
    assert found == expected
    assert KIND.options(found) == found  # stored with the manifest, validated again on reads


BAD_OPTIONS = [
    ({"rank": 4}, "mpi.rank: not an option of kind mpi (options: bind_gpus, launcher_cpus,"),
    ({"ranks": True}, "mpi.ranks: True is not a valid value"),
    ({"ranks": 0}, "mpi.ranks: between 1 and"),
    ({"ranks": "4"}, "mpi.ranks: '4' is not a valid value"),
    ({"mpirun_args": ["-np", "4"]}, "-np is set by Corral (from mpi.ranks); remove it, or set"),
    ({"mpirun_args": "--hostfile=h"}, "--hostfile is set by Corral (from the job's nodes)"),
    ({"mpirun_args": "--mca 'open"}, "mpi.mpirun_args: No closing quotation"),
    ({"mpirun_args": [1]}, "mpi.mpirun_args: a list of strings"),
    ({"mpirun": " "}, "mpi.mpirun: must be a command"),
    ({"python": ""}, "mpi.python: must be a command"),
    ({"tcp_interfaces": ["eth 0"]}, "mpi.tcp_interfaces: 'eth 0' is not an interface"),
    ({"launcher_cpus": 0}, "mpi.launcher_cpus: more than 0"),
    ({"bind_gpus": "yes"}, "mpi.bind_gpus: 'yes' is not a valid value"),
]


@pytest.mark.parametrize(("block", "message"), BAD_OPTIONS)
def test_bad_options_are_refused_naming_the_key(block: dict, message: str) -> None:
    with pytest.raises(ValueError) as refused:
        KIND.options(block)
    assert message in str(refused.value)


def test_expand_makes_a_daemon_worker_role_and_a_small_launcher() -> None:
    spec = spec_of(resources={"gpus": 4, "cpus": 16, "memory": "64GB", "gpu_model": "H100*"})
    worker, launcher = spec.roles
    assert (worker.name, worker.nodes, worker.tasks_per_node, worker.daemon) == (
        "worker",
        2,
        2,
        True,
    )
    assert (worker.gpus.count, worker.cpus, worker.gpu_model) == (4, 16.0, "H100*")
    assert worker.memory == 64 * 10**9
    assert worker.command[:2] == ("/bin/sh", "-c") and "exec sleep infinity" in worker.command[2]
    assert (launcher.name, launcher.nodes, launcher.tasks_per_node) == ("launcher", 1, 1)
    assert launcher.gpus.kind is GpuKind.NONE and launcher.cpus == 1.0
    assert not launcher.daemon and launcher.command is None  # the job's: mpirun runs it
    assert spec.world_size == 5 and spec.total_gpus == 8
    assert spec.role_of(4).name == "launcher" and spec.role_of(3).name == "worker"


def test_expand_on_cpu_nodes_and_with_fewer_or_more_ranks_than_slots() -> None:
    assert spec_of(resources={}, mpi={"ranks": 6}).roles[0].gpus.kind is GpuKind.NONE
    assert spec_of(mpi={"ranks": 8}).roles[0].tasks_per_node == 2  # 4 ranks on 2 slots
    assert spec_of(mpi={"ranks": 2}).roles[1].cpus == 1.0
    assert spec_of(mpi={"ranks": 6, "bind_gpus": False}).roles[0].gpus.count == 4


REFUSED = [
    ({"mpi": {"ranks": 3}}, "mpi.ranks: 3 ranks do not divide evenly over the job's 2 nodes"),
    ({"mpi": {"ranks": 6}}, "6 ranks are 3 per node, which cannot split each node's 4 GPUs"),
    ({"mpi": {"rank": 3}}, "mpi.rank: not an option of kind mpi"),
    ({"kind": "pytorch", "mpi": {}}, "mpi: options of kind mpi, but this job is of kind pytorch"),
    ({"resources": {"tpu": "v5p:2x2x1"}, "tasks_per_node": 1}, "kind mpi runs on GPU or CPU"),
]


@pytest.mark.parametrize(("change", "message"), REFUSED)
def test_jobs_the_kind_cannot_run_are_refused_at_validation(change: dict, message: str) -> None:
    with pytest.raises(ValidationError) as refused:
        parse_manifest(manifest(**change))
    assert message in str(refused.value)


def test_user_roles_are_refused() -> None:
    with pytest.raises(ValidationError, match="roles: kind mpi makes its own roles"):
        parse_manifest({"kind": "mpi", "command": "true", "roles": [{"name": "a"}]})


def test_worker_tasks_hold_their_slots() -> None:
    spec = spec_of()
    context = launcher_context(spec)
    worker = TaskContext(**{**context.__dict__, "rank": 1, "role": spec.role_of(1)})
    assert KIND.launch(worker).command == spec.roles[0].command
    assert KIND.launch(worker).env == {}


def test_the_launcher_runs_mpirun_over_the_worker_nodes() -> None:
    spec = spec_of(mpi={"mpirun_args": ["-x", "NCCL_DEBUG"], "python": "/opt/venv/bin/python"})
    launch = KIND.launch(launcher_context(spec))
    assert launch.command == (
        "/opt/venv/bin/python",
        "-m",
        "corral.kinds.mpi_launch",
        "--",
        "python",
        "allreduce.py",
    )
    plan = Plan.from_env(launch.env)
    assert plan == Plan(("gpu-1", "gpu-2"), 4, "mpirun", ("-x", "NCCL_DEBUG"), (), True)
    assert json.loads(launch.env["CORRAL_MPI_NODES"]) == ["gpu-1", "gpu-2"]


def test_the_launcher_runs_a_string_command_through_the_shell() -> None:
    spec = spec_of(command="python a.py | tee out", mpi={"ranks": 8, "bind_gpus": False})
    launch = KIND.launch(launcher_context(spec))
    assert launch.command[-4:] == ("--", "/bin/sh", "-c", "python a.py | tee out")
    plan = Plan.from_env(launch.env)
    assert (plan.ranks, plan.per_node, plan.bind_gpus) == (8, 4, False)


def test_nodes_on_one_machine_talk_over_loopback_unless_told_otherwise() -> None:
    spec = spec_of()
    local = Plan.from_env(KIND.launch(launcher_context(spec, ("127.0.0.1", "127.0.0.1"))).env)
    assert local.tcp == ("127.0.0.0/8",)
    remote = Plan.from_env(KIND.launch(launcher_context(spec)).env)
    assert remote.tcp == ()  # Open MPI's own choice
    given = spec_of(mpi={"tcp_interfaces": ["ib0"]})
    told = Plan.from_env(KIND.launch(launcher_context(given, ("127.0.0.1", "::1"))).env)
    assert told.tcp == ("ib0",)
