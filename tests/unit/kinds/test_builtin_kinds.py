"""The environment the built-in kinds add (pure: a ``TaskContext`` in, a ``Launch`` out)."""

from __future__ import annotations

from corral.core.job import JobSpec
from corral.kinds.base import JobNode, TaskContext
from corral.kinds.registry import get_kind
from corral.schemas.manifest import parse_manifest


def context(spec: JobSpec, rank: int, gpus: tuple[int, ...] = (), **env: str) -> TaskContext:
    nodes = tuple(
        JobNode(f"n{i}", f"10.0.0.{i}", spec.role_of(rank).tasks_per_node, "worker")
        for i in range(spec.node_count)
    )
    role = spec.role_of(rank)
    return TaskContext(
        spec=spec,
        job_id=42,
        attempt=1,
        rank=rank,
        local_rank=rank % role.tasks_per_node,
        node_rank=rank // role.tasks_per_node,
        node=nodes[rank // role.tasks_per_node].name,
        role=role,
        nodes=nodes,
        master_addr="10.0.0.0",
        master_port=29501,
        gpus=gpus,
        env=env,
    )


def spec_of(**manifest: object) -> JobSpec:
    return parse_manifest({"command": ["python", "train.py"], **manifest}).to_spec()


def test_pytorch_sets_torchruns_environment() -> None:
    spec = spec_of(nodes=2, tasks_per_node=4, resources={"gpus": 8})
    launch = get_kind("pytorch").launch(context(spec, 5))
    assert launch.command == ("python", "train.py")
    assert launch.env == {
        "ROLE_NAME": "worker",
        "ROLE_RANK": "5",
        "ROLE_WORLD_SIZE": "8",
        "GROUP_WORLD_SIZE": "2",
        "TORCHELASTIC_RUN_ID": "corral-42",
        "TORCHELASTIC_RESTART_COUNT": "1",
        "TORCHELASTIC_MAX_RESTARTS": "0",
        "TORCHELASTIC_USE_AGENT_STORE": "False",
        "OMP_NUM_THREADS": "1",
    }
    # the job's own OMP_NUM_THREADS wins; one task per node needs none
    assert (
        "OMP_NUM_THREADS"
        not in get_kind("pytorch").launch(context(spec, 5, OMP_NUM_THREADS="8")).env
    )
    one = spec_of(nodes=2)
    assert "OMP_NUM_THREADS" not in get_kind("pytorch").launch(context(one, 1)).env


def test_pytorch_roles_use_the_roles_command_and_rank() -> None:
    spec = spec_of(
        roles=[
            {"name": "ps", "command": ["python", "ps.py"]},
            {"name": "worker", "nodes": 2, "resources": {"gpus": 8}},
        ]
    )
    ps, worker = (get_kind("pytorch").launch(context(spec, r)) for r in (0, 2))
    assert ps.command == ("python", "ps.py") and ps.env["ROLE_NAME"] == "ps"
    assert worker.command == ("python", "train.py")
    assert (worker.env["ROLE_RANK"], worker.env["ROLE_WORLD_SIZE"]) == ("1", "2")
    assert worker.env["GROUP_WORLD_SIZE"] == "3"


def test_jax_gets_the_coordinator_and_its_local_devices() -> None:
    spec = spec_of(kind="jax", nodes=2, tasks_per_node=2, resources={"gpus": 4})
    env = get_kind("jax").launch(context(spec, 3, gpus=(2, 3))).env
    assert env == {  # SLURM_* for JAX's cluster detection: every task's (launch.slurm_env)
        "JAX_COORDINATOR_ADDRESS": "10.0.0.0:29501",
        "JAX_LOCAL_DEVICE_IDS": "0,1",  # as CUDA_VISIBLE_DEVICES=2,3 shows them
    }
    cpu = get_kind("jax").launch(context(spec_of(kind="jax"), 0)).env
    assert "JAX_LOCAL_DEVICE_IDS" not in cpu


def test_a_manifest_with_a_tpu_slice_is_of_kind_tpu() -> None:
    assert spec_of(resources={"tpu": "v5p:2x2x2"}).kind == "tpu"
    assert spec_of(kind="jax", resources={"tpu": "v5p:2x2x2"}).kind == "jax"
