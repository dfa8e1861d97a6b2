"""The SLURM_* variables every task sees (SPEC 9), as ``task_launch`` builds them."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from corral.core.hostlist import expand
from corral.kinds.base import JobNode
from corral.schemas.agent import DesiredTask
from corral.server.db.models import JobRow, TaskRow
from corral.server.services.launch import task_launch

# distinct submission times: the spec memo (``converters.spec_of``) is keyed by (id,
# submitted_at, user), and other tests build jobs with small ids too
SUBMITTED = itertools.count(7_000_001)


def job(name: str | None = None, **manifest: Any) -> JobRow:
    return JobRow(
        id=42,
        name=name,
        user="ann",
        submitted_at=float(next(SUBMITTED)),
        manifest={"command": ["/opt/bin/train.py", "--fast"], **manifest},
        attempt=0,
        master_port=29511,
    )


def launches(row: JobRow, layout: list[tuple[str, int, str]]) -> list[DesiredTask]:
    """Every task of ``row``, placed as ``layout`` says: (node, tasks, role) per node
    slot in node-rank order, ranks in order; each task holds 2 GPUs when the job has any."""
    nodes = [
        JobNode(name, f"10.0.0.{i}", tasks, role) for i, (name, tasks, role) in enumerate(layout)
    ]
    out, rank = [], 0
    for node_rank, node in enumerate(nodes):
        for local in range(node.tasks):
            task = TaskRow(
                job_id=row.id,
                attempt=0,
                rank=rank,
                node=node.name,
                node_rank=node_rank,
                local_rank=local,
                gpus=[2 * local, 2 * local + 1] if "gpus" in str(row.manifest) else [],
                gpu_milli=1000,
                gpu_memory=0,
                mig_slots=[],
                cpus=0.0,
                memory=0,
            )
            out.append(task_launch(row, task, nodes))
            rank += 1
    return out


def slurm(task: DesiredTask) -> dict[str, str]:
    return {k: v for k, v in task.env.items() if k.startswith("SLURM_")}


def test_a_two_node_job_sees_slurms_variables() -> None:
    row = job(nodes=2, tasks_per_node=2, resources={"gpus": 4, "cpus": 16}, workdir="/w")
    tasks = launches(row, [("gpu08", 2, "worker"), ("gpu07", 2, "worker")])
    assert slurm(tasks[3]) == {
        "SLURM_JOB_ID": "42",
        "SLURM_JOB_NAME": "train.py",  # the program's base name, as Slurm names it
        "SLURM_JOB_NODELIST": "gpu[08,07]",  # node-rank order: the first holds rank 0
        "SLURM_NODELIST": "gpu[08,07]",
        "SLURM_STEP_NODELIST": "gpu[08,07]",
        "SLURM_JOB_NUM_NODES": "2",
        "SLURM_NNODES": "2",
        "SLURM_STEP_NUM_NODES": "2",
        "SLURM_NTASKS": "4",
        "SLURM_NTASKS_PER_NODE": "2",
        "SLURM_PROCID": "3",
        "SLURM_LOCALID": "1",
        "SLURM_NODEID": "1",
        "SLURM_CPUS_PER_TASK": "8",
        "SLURM_GPUS_ON_NODE": "4",
        "SLURM_SUBMIT_DIR": "/w",
    }
    for task in tasks:
        assert_ranks_agree(task)


def test_a_job_with_roles_sees_its_own_ranks_and_its_nodes_once() -> None:
    row = job(
        name="ray-ish",
        roles=[
            {"name": "head", "resources": {"cpus": 4}},
            {"name": "worker", "nodes": 2, "tasks_per_node": 2, "resources": {"gpus": 4}},
        ],
    )
    # the head shares node a with the first worker node: a appears twice in the layout
    tasks = launches(row, [("a", 1, "head"), ("a", 2, "worker"), ("b", 2, "worker")])
    head, workers = tasks[0], tasks[1:]
    assert slurm(head)["SLURM_JOB_NODELIST"] == "a,b"
    assert slurm(head)["SLURM_JOB_NUM_NODES"] == "2"
    assert (slurm(head)["SLURM_NTASKS"], slurm(head)["SLURM_JOB_NAME"]) == ("5", "ray-ish")
    assert slurm(head)["SLURM_NTASKS_PER_NODE"] == "1"
    assert slurm(head)["SLURM_CPUS_PER_TASK"] == "4"
    assert slurm(head)["SLURM_GPUS_ON_NODE"] == "4"  # the job's GPUs on node a: the worker's
    assert "SLURM_SUBMIT_DIR" not in slurm(head)  # no workdir: nothing to tell
    for task in workers:
        assert slurm(task)["SLURM_NTASKS_PER_NODE"] == "2"
        assert "SLURM_CPUS_PER_TASK" not in slurm(task)  # the role asked for no CPUs
        assert slurm(task)["SLURM_GPUS_ON_NODE"] == "4"
    for task in tasks:
        assert_ranks_agree(task)
    assert [slurm(t)["SLURM_NODEID"] for t in tasks] == ["0", "1", "1", "2", "2"]


def assert_ranks_agree(task: DesiredTask) -> None:
    """What PyTorch Lightning's SLURMEnvironment reads equals section 4's ranks."""
    env = task.env
    assert env["SLURM_PROCID"] == env["RANK"]
    assert env["SLURM_LOCALID"] == env["LOCAL_RANK"]
    assert env["SLURM_NODEID"] == env["NODE_RANK"]
    assert env["SLURM_NTASKS"] == env["WORLD_SIZE"]
    assert env["SLURM_NTASKS_PER_NODE"] == env["LOCAL_WORLD_SIZE"]
    assert env["SLURM_JOB_NAME"] not in ("bash", "interactive")  # Lightning: not Slurm
    assert expand(env["SLURM_JOB_NODELIST"])[0] == expand(env["CORRAL_NODES"].replace(",", " "))[0]


def test_the_jobs_own_env_wins() -> None:
    row = job(env={"SLURM_JOB_NAME": "mine", "SLURM_NTASKS_PER_NODE": "9"})
    env = launches(row, [("n1", 1, "worker")])[0].env
    assert (env["SLURM_JOB_NAME"], env["SLURM_NTASKS_PER_NODE"]) == ("mine", "9")
    assert env["SLURM_PROCID"] == "0"


@pytest.mark.parametrize(
    ("command", "name"),
    [(["python", "t.py"], "python"), ("python t.py | tee log", "wrap"), (["./run"], "run")],
)
def test_a_job_without_a_name_is_named_as_slurm_names_it(command: Any, name: str) -> None:
    env = launches(job(command=command), [("n1", 1, "worker")])[0].env
    assert env["SLURM_JOB_NAME"] == name
    assert "SLURM_GPUS_ON_NODE" not in env and "SLURM_CPUS_PER_TASK" not in env


def test_a_jax_job_is_found_by_jaxs_slurm_detection(monkeypatch: pytest.MonkeyPatch) -> None:
    clusters = pytest.importorskip("jax._src.clusters")
    row = job(kind="jax", nodes=2, tasks_per_node=2, resources={"gpus": 4})
    tasks = launches(row, [("node-01", 2, "worker"), ("node-00", 2, "worker")])
    for task in tasks:
        for key, value in task.env.items():
            monkeypatch.setenv(key, value)
        cluster = clusters.SlurmCluster
        assert cluster.is_env_present()
        assert cluster.get_process_count() == 4
        assert cluster.get_process_id() == int(task.env["RANK"])
        assert cluster.get_local_process_id() == int(task.env["LOCAL_RANK"])
        # without JAX_COORDINATOR_ADDRESS, JAX would take the first host: rank 0's node
        assert cluster.get_coordinator_address(None, "1").startswith("node-01:")
        assert task.env["JAX_COORDINATOR_ADDRESS"] == "10.0.0.0:29511"


def test_an_element_of_a_job_array_sees_the_arrays_variables() -> None:
    row = job(array="1-7:2%2")
    row.array_job_id, row.array_task_id = 40, 5
    env = launches(row, [("n1", 1, "worker")])[0].env
    assert {k: v for k, v in env.items() if "ARRAY" in k} == {
        "SLURM_ARRAY_JOB_ID": "40",
        "SLURM_ARRAY_TASK_ID": "5",
        "SLURM_ARRAY_TASK_COUNT": "4",
        "SLURM_ARRAY_TASK_MIN": "1",
        "SLURM_ARRAY_TASK_MAX": "7",
        "SLURM_ARRAY_TASK_STEP": "2",
        "CORRAL_ARRAY_JOB_ID": "40",
        "CORRAL_ARRAY_TASK_ID": "5",
    }
    assert env["SLURM_JOB_ID"] == "42"  # each element is a job of its own
    uneven = job(array="0,1,5")
    uneven.array_job_id, uneven.array_task_id = 42, 0
    assert launches(uneven, [("n1", 1, "worker")])[0].env["SLURM_ARRAY_TASK_STEP"] == "1"
    plain = launches(job(), [("n1", 1, "worker")])[0].env
    assert not [k for k in plain if "ARRAY" in k]
