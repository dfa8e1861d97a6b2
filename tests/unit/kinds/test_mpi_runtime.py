"""The pieces of ``kind: mpi`` that run inside tasks: the launcher's hostfile, environment
and mpirun command line, the rsh agent's reading of ssh-style arguments, and each rank's
environment. (The daemon wrapper runs a real shell.)"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from corral.kinds import mpi_launch, mpi_node, mpi_rsh
from corral.kinds.mpi_launch import Plan

PLAN = Plan(("gpu-1", "gpu-2"), 4)


def test_the_plan_goes_through_the_environment_unchanged() -> None:
    plan = Plan(("a", "b.example.com"), 8, "/opt/ompi/bin/mpirun", ("-x", "A B"), ("lo",), False)
    assert Plan.from_env(plan.to_env()) == plan
    assert plan.per_node == 4


@pytest.mark.parametrize(
    "env",
    [
        {},
        {"CORRAL_MPI_NODES": "[]", "CORRAL_MPI_RANKS": "2"},
        {"CORRAL_MPI_NODES": '["a", "b"]', "CORRAL_MPI_RANKS": "3"},
    ],
)
def test_a_missing_or_inconsistent_plan_is_an_error(env: dict) -> None:
    with pytest.raises(ValueError):
        Plan.from_env(env)


ALIASES = [
    (0, "node-a", "node-a-mpi0"),
    (3, "gpu-01.cluster.local", "gpu-01-cluster-local-mpi3"),  # Open MPI cuts at a dot
    (1, "__", "node-mpi1"),
    (2, "x" * 80, "x" * 48 + "-mpi2"),
]


@pytest.mark.parametrize(("index", "node", "expected"), ALIASES)
def test_hostfile_aliases_are_plain_labels_no_host_answers_to(
    index: int, node: str, expected: str
) -> None:
    assert mpi_launch.alias(index, node) == expected


def test_the_hostfile_gives_each_node_its_ranks() -> None:
    assert mpi_launch.hostfile(["a-mpi0", "b-mpi1"], 2) == "a-mpi0 slots=2\nb-mpi1 slots=2\n"


def test_mpirun_starts_every_rank_through_the_rank_wrapper() -> None:
    args = mpi_launch.mpirun_argv(
        Plan(("a",), 2, args=("--mca", "btl", "self,tcp"), bind_gpus=False),
        "/tmp/h",
        "/py",
        ["python", "x.py", "--", "y"],
    )
    assert args == [
        "mpirun",
        "--hostfile",
        "/tmp/h",
        "-np",
        "2",
        "--mca",
        "btl",
        "self,tcp",
        "/py",
        "-m",
        "corral.kinds.mpi_node",
        "rank",
        "--all-gpus",
        "--",
        "python",
        "x.py",
        "--",
        "y",
    ]


def test_mpirun_env_starts_daemons_as_steps_and_keeps_the_jobs_choices() -> None:
    aliases = {"gpu-1-mpi0": "gpu-1"}
    env = mpi_launch.launch_env(
        {"PATH": "/bin", "OMPI_MCA_plm_rsh_agent": "ssh"}, PLAN, "/t/rsh", aliases, root=False
    )
    assert env["OMPI_MCA_plm_rsh_agent"] == "/t/rsh"  # never ssh
    assert env["OMPI_MCA_plm_rsh_no_tree_spawn"] == "1"
    assert env["OMPI_MCA_orte_leave_session_attached"] == "1"
    assert json.loads(env["CORRAL_MPI_ALIASES"]) == aliases
    assert env["OMPI_MCA_hwloc_base_binding_policy"] == "none"
    assert "OMPI_ALLOW_RUN_AS_ROOT" not in env and "OMPI_MCA_oob_tcp_if_include" not in env

    loopback = Plan(("a",), 1, tcp=("127.0.0.0/8",))
    root = mpi_launch.launch_env({}, loopback, "/t/rsh", {}, root=True)
    assert root["OMPI_ALLOW_RUN_AS_ROOT"] == root["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] == "1"
    assert root["OMPI_MCA_oob_tcp_if_include"] == root["OMPI_MCA_btl_tcp_if_include"]

    # the job's own settings win: an exclude list, a binding, its own include list
    told = Plan(
        ("a",), 1, args=("--bind-to", "core", "--mca", "btl_tcp_if_exclude", "lo"), tcp=("lo",)
    )
    mine = mpi_launch.launch_env({"OMPI_MCA_oob_tcp_if_include": "ib0"}, told, "/r", {}, False)
    assert "OMPI_MCA_hwloc_base_binding_policy" not in mine
    assert "OMPI_MCA_btl_tcp_if_include" not in mine
    assert mine["OMPI_MCA_oob_tcp_if_include"] == "ib0"


VERSIONS = [
    ("mpirun (Open MPI) 4.1.4\n\nReport bugs to ...", None),
    ("mpirun (Open MPI) 3.1.6", None),
    ("mpirun (Open MPI) 5.0.3", "Open MPI 5.0 (PRRTE), which kind mpi does not drive yet"),
    ("HYDRA build details:\n    Version: 4.1", "is not Open MPI's mpirun (HYDRA build details:)"),
    ("", "is not Open MPI's mpirun (no output)"),
]


@pytest.mark.parametrize(("output", "problem"), VERSIONS)
def test_only_open_mpi_3_and_4_are_driven(output: str, problem: str | None) -> None:
    found = mpi_launch.version_problem("mpirun", output)
    assert found == problem if problem is None else problem in (found or "")


RSH_ARGS = [
    (["node-a-mpi0", " orted", "-mca", "ess", '"env"'], ("node-a-mpi0", 'orted -mca ess "env"')),
    (["-x", "-T", "h", "PATH=/x ; export PATH ;", "orted"], ("h", "PATH=/x ; export PATH ; orted")),
    (["-p", "22", "-o", "BatchMode=yes", "h", "true"], ("h", "true")),
    (["-l", "me", "-p2222", "h", "echo", "a b"], ("h", "echo a b")),
    (["--", "h", "true"], ("h", "true")),
]


@pytest.mark.parametrize(("argv", "expected"), RSH_ARGS)
def test_the_rsh_agent_reads_an_ssh_command_line(argv: list[str], expected: tuple) -> None:
    assert mpi_rsh.parse_args(argv) == expected


@pytest.mark.parametrize("argv", [[], ["-p", "22"], ["host"], ["host", " "]])
def test_the_rsh_agent_needs_a_host_and_a_command(argv: list[str]) -> None:
    with pytest.raises(ValueError):
        mpi_rsh.parse_args(argv)
    assert mpi_rsh.main(argv) == 255  # as ssh, when it could not run anything


def test_the_rsh_agent_maps_aliases_back_to_nodes() -> None:
    aliases = json.dumps({"gpu-01-cluster-local-mpi0": "gpu-01.cluster.local"})
    assert mpi_rsh.node_of("gpu-01-cluster-local-mpi0", aliases) == "gpu-01.cluster.local"
    assert mpi_rsh.node_of("node-b", aliases) == "node-b"
    assert mpi_rsh.node_of("node-b", "not json") == "node-b"
    assert mpi_rsh.node_of("node-b", None) == "node-b"


OMPI = {
    "OMPI_COMM_WORLD_RANK": "5",
    "OMPI_COMM_WORLD_SIZE": "8",
    "OMPI_COMM_WORLD_LOCAL_RANK": "1",
    "OMPI_COMM_WORLD_LOCAL_SIZE": "4",
}
MPICH = {"PMI_RANK": "3", "PMI_SIZE": "4", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"}
RANK_ENVS = [
    (
        "Open MPI, 8 GPUs over 4 ranks",
        {**OMPI, "CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"},
        False,
        {
            "RANK": "5",
            "WORLD_SIZE": "8",
            "LOCAL_RANK": "1",
            "LOCAL_WORLD_SIZE": "4",
            "NNODES": "2",
            "CUDA_VISIBLE_DEVICES": "2,3",
        },
    ),
    (
        "MPICH, MIG instances",
        {**MPICH, "CUDA_VISIBLE_DEVICES": "MIG-a,MIG-b"},
        False,
        {
            "RANK": "3",
            "WORLD_SIZE": "4",
            "LOCAL_RANK": "1",
            "LOCAL_WORLD_SIZE": "2",
            "NNODES": "2",
            "CUDA_VISIBLE_DEVICES": "MIG-b",
        },
    ),
    (
        "GPUs that do not split: all of them",
        {**OMPI, "CUDA_VISIBLE_DEVICES": "0,1"},
        False,
        {"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4", "NNODES": "2"},
    ),
    (
        "all GPUs asked for",
        {**OMPI, "CUDA_VISIBLE_DEVICES": "0,1,2,3"},
        True,
        {"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4", "NNODES": "2"},
    ),
    (
        "no GPUs",
        {**OMPI, "CUDA_VISIBLE_DEVICES": ""},
        False,
        {"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4", "NNODES": "2"},
    ),
    ("not under an MPI launcher", {"CUDA_VISIBLE_DEVICES": "0,1", "RANK": "0"}, False, {}),
]


@pytest.mark.parametrize(
    ("environ", "all_gpus", "expected"), [c[1:] for c in RANK_ENVS], ids=[c[0] for c in RANK_ENVS]
)
def test_each_rank_gets_its_variables_and_its_share_of_the_gpus(
    environ: dict, all_gpus: bool, expected: dict
) -> None:
    assert mpi_node.rank_env(environ, all_gpus) == expected


def test_the_daemon_runs_the_line_in_a_shell_with_private_shared_memory(tmp_path: Path) -> None:
    seen = tmp_path / "seen"
    line = f'echo "$OMPI_MCA_btl_vader_backing_directory" > {seen}; [ -d "$(cat {seen})" ]; exit 7'
    assert mpi_node.run_daemon(line) == 7
    private = seen.read_text().strip()
    assert os.path.basename(private).startswith("corral-mpi-")
    assert not os.path.exists(private)  # removed at the end
    assert mpi_node.run_daemon("kill -TERM $$") == 128 + 15


def test_the_login_shell_runs_the_line_unless_it_is_no_shell() -> None:
    assert mpi_node.login_shell("/bin/sh") == "/bin/sh"
    assert mpi_node.login_shell("/usr/sbin/nologin") == "/bin/sh"
    assert mpi_node.login_shell(None) == "/bin/sh"


def test_the_rsh_agent_names_no_file_of_the_launchers_own() -> None:
    # mpirun hands it to every daemon, which checks it exists on its own node
    assert mpi_launch.rsh_agent("/opt/venv/bin/python") == (
        "/opt/venv/bin/python -m corral.kinds.mpi_rsh"
    )
    for bad in ("/opt/my venv/bin/python", "/opt/a:b/python"):
        with pytest.raises(ValueError, match="space or a colon"):
            mpi_launch.rsh_agent(bad)
