"""Traces adapt to the cluster they are replayed on: gangs cut to the cluster's GPUs per
node (unless the trace's option says otherwise), who submitted each job, and a note when
a trace's times are made up or form one batch. Sample files are written by the tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.core.node import Device, Node
from corral.errors import ValidationError
from corral.sim.jobs_file import load_jobs
from corral.sim.traces import read_trace
from corral.sim.traces.common import cluster_gpus_per_node
from corral.sim.workload import Workload

DATA = Path(__file__).parent / "data"
PHILLY = (
    "job_id,timestamp,duration,num_gpus,vc,user\n"
    "big,0,100,8,vc1,alice\n"
    "huge,5,100,16,vc1,\n"
    "small,10,50,2,vc2,bob\n"
)
HELIOS = (
    "job_id,user,vc,jobname,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time\n"
    "h1,carol,vcA,train,8,16,0,COMPLETED,100,110,200\n"
    "h2,dave,vcA,eval,1,4,1,COMPLETED,120,130,140\n"
)
GAVEL = (
    "ResNet-18 (batch size 32)\tpython main.py\t--num_steps\tTrue\t1000\t0\t8\n"
    "ResNet-18 (batch size 32)\tpython main.py\t--num_steps\tTrue\t1000\t30\t1\n"
)
THROUGHPUTS = (
    '{"v100": {"(\'ResNet-18 (batch size 32)\', 1)": {"null": 10.0},'
    ' "(\'ResNet-18 (batch size 32)\', 8)": {"null": 50.0}}}'
)
PODS_UNTIMED = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,1000,1024,1,500\np1,1000,1024,2,1000\n"
)
PODS_TIMED = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time,deletion_time\n"
    "p0,1000,1024,1,500,0,100\n"
    "p1,1000,1024,1,1000,10,50\n"
)


def node(name: str, gpus: int, *, kind: str = "gpu", mig: tuple[str, ...] = ()) -> Node:
    devices = tuple(
        Device(index=i, model="V100", memory=0, mig=mig, kind=kind) for i in range(gpus)
    )
    return Node(name=name, devices=devices)


def shapes(workload: Workload) -> dict[str, tuple[int, str]]:
    """Each job's nodes and GPUs per node."""
    return {j.name: (j.spec.nodes, str(j.spec.gpus)) for j in workload.jobs}


@pytest.fixture
def philly(tmp_path: Path) -> Path:
    path = tmp_path / "jobs.csv"
    path.write_text(PHILLY)
    return path


# -- the cluster's GPUs per node ------------------------------------------------------

CLUSTERS = {
    "all the same": ([node("a", 4), node("b", 4)], 4),
    "mixed: the largest": ([node("a", 4), node("b", 8), node("c", 2)], 8),
    "CPU nodes do not count": ([node("cpu", 0), node("a", 4)], 4),
    "TPU hosts do not count": ([node("tpu", 4, kind="tpu"), node("a", 2)], 2),
    "MIG devices do not count": ([node("mig", 8, mig=("3g.40gb",)), node("a", 4)], 4),
    "no GPU node": ([node("cpu", 0)], None),
}


@pytest.mark.parametrize(("nodes", "expected"), CLUSTERS.values(), ids=CLUSTERS.keys())
def test_cluster_gpus_per_node(nodes: list[Node], expected: int | None) -> None:
    assert cluster_gpus_per_node(nodes) == expected


def test_philly_gangs_follow_the_cluster(philly: Path) -> None:
    default = read_trace(f"philly:{philly}")
    assert shapes(default) == {"big": (1, "8"), "huge": (2, "8"), "small": (1, "2")}
    on_fours = read_trace(f"philly:{philly}", gpus_per_node=4)
    assert shapes(on_fours) == {"big": (2, "4"), "huge": (4, "4"), "small": (1, "2")}
    assert "4 GPUs per node (the cluster's)" in on_fours.source


def test_the_trace_option_wins_over_the_cluster(philly: Path) -> None:
    workload = read_trace(f"philly:{philly}?gpus_per_node=8", gpus_per_node=4)
    assert shapes(workload) == {"big": (1, "8"), "huge": (2, "8"), "small": (1, "2")}
    assert "the cluster's" not in workload.source


def test_helios_and_gavel_gangs_follow_the_cluster(tmp_path: Path) -> None:
    (tmp_path / "cluster_log.csv").write_text(HELIOS)
    helios = read_trace(f"helios:{tmp_path / 'cluster_log.csv'}", gpus_per_node=4)
    assert shapes(helios) == {"h1": (2, "4"), "h2": (1, "1")}  # node_num 0: cut by the cluster
    (tmp_path / "jobs.trace").write_text(GAVEL)
    (tmp_path / "simulation_throughputs.json").write_text(THROUGHPUTS)
    gavel = read_trace(f"gavel:{tmp_path / 'jobs.trace'}", gpus_per_node=2)
    assert shapes(gavel) == {"job-0": (4, "2"), "job-1": (1, "1")}


def test_formats_without_the_option_ignore_the_cluster(tmp_path: Path) -> None:
    (tmp_path / "pods.csv").write_text(PODS_TIMED)
    workload = read_trace(f"openb:{tmp_path / 'pods.csv'}?nodes=none", gpus_per_node=4)
    assert shapes(workload) == {"p0": (1, "0.5"), "p1": (1, "1")}


# -- who submitted each job -----------------------------------------------------------


def test_users_come_from_the_trace(philly: Path, tmp_path: Path) -> None:
    users = {j.name: j.user for j in read_trace(f"philly:{philly}").jobs}
    assert users == {"big": "alice", "huge": None, "small": "bob"}
    (tmp_path / "cluster_log.csv").write_text(HELIOS)
    helios = read_trace(f"helios:{tmp_path / 'cluster_log.csv'}")
    assert {j.name: j.user for j in helios.jobs} == {"h1": "carol", "h2": "dave"}
    pai = read_trace(f"pai2020:{DATA / 'pai2020' / 'pai_job_table.csv'}")
    assert {j.name: j.user for j in pai.jobs}["jobA"] == "u1"
    no_user = tmp_path / "plain.csv"
    no_user.write_text("timestamp,duration,num_gpus\n0,10,1\n")
    assert [j.user for j in read_trace(f"philly:{no_user}").jobs] == [None]


def test_users_in_a_jobs_file() -> None:
    workload = load_jobs(
        "- {name: a, user: erin, submit_time: 0, duration: 10, resources: {gpus: 1}}\n"
        "- {name: b, submit_time: 5, duration: 10, resources: {gpus: 1}}\n"
    )
    assert [(j.name, j.user) for j in workload.jobs] == [("a", "erin"), ("b", None)]
    with pytest.raises(ValidationError, match=r"job 0 \(a\): user: expected a user name"):
        load_jobs("- {name: a, user: [x], submit_time: 0, duration: 10}\n")


# -- notes on the trace's times -------------------------------------------------------


def test_a_pod_list_without_timestamps_is_not_timed(tmp_path: Path) -> None:
    (tmp_path / "pods.csv").write_text(PODS_UNTIMED)
    workload = read_trace(f"openb:{tmp_path / 'pods.csv'}?nodes=none")
    assert not workload.timed
    assert len(workload.notes) == 1 and "without timestamps" in workload.notes[0]
    assert "not meaningful" in workload.notes[0]


def test_a_pod_list_with_timestamps_is_timed(tmp_path: Path) -> None:
    (tmp_path / "pods.csv").write_text(PODS_TIMED)
    workload = read_trace(f"openb:{tmp_path / 'pods.csv'}?nodes=none")
    assert workload.timed and workload.notes == ()
    shuffled = read_trace(f"openb:{tmp_path / 'pods.csv'}?nodes=none&arrival=shuffle")
    assert not shuffled.timed  # the times are made up, whatever the file has


def test_a_trace_submitted_at_once_is_noted_as_one_batch(tmp_path: Path) -> None:
    path = tmp_path / "batch.csv"
    path.write_text("timestamp,duration,num_gpus\n0,10,1\n0,20,2\n0,30,1\n")
    workload = read_trace(f"philly:{path}")
    assert workload.timed  # the run times are real: JCT and makespan still mean something
    assert len(workload.notes) == 1 and "same moment" in workload.notes[0]
