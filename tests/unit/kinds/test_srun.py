"""``srun`` and ``scontrol`` inside a batch job (``corral.kinds.srun``/``scontrol``): the
step's shape from Slurm's options and the job's, what its tasks see, and the commands'
errors. Nothing here reaches a server: ``main``'s client is a stand-in."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import corral.cli.steps
import corral.client
from corral.kinds import scontrol, srun
from corral.kinds.batch import MAX_VALUE
from corral.kinds.srun import (
    LOCAL,
    SrunError,
    _kill_flags,
    forwarded,
    layout,
    parser,
    step_command,
    step_env,
)

JOB = {"SLURM_JOB_NODELIST": "node-[01-02]", "SLURM_NTASKS_PER_NODE": "4"}


def shape(*argv: str, env: dict[str, str] | None = None) -> tuple[list[str], int]:
    args, unknown = parser().parse_known_args(_kill_flags([*argv, "hostname"]))
    assert not unknown
    return layout(args, JOB if env is None else env)


# -- the step's nodes and tasks ---------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "nodes", "per_node"),
    [
        ([], ["node-01", "node-02"], 4),  # the job's tasks
        (["-n", "1"], ["node-01"], 1),
        (["-n", "2"], ["node-01"], 2),  # fits on the first node
        (["-n", "8"], ["node-01", "node-02"], 4),
        (["-n", "6"], ["node-01", "node-02"], 3),
        (["-N", "1"], ["node-01"], 4),
        (["-N", "2", "-n", "2"], ["node-01", "node-02"], 1),
        (["--ntasks-per-node=1"], ["node-01", "node-02"], 1),
        (["-N", "1", "--ntasks-per-node=2"], ["node-01"], 2),
        (["-n", "8", "--ntasks-per-node=4"], ["node-01", "node-02"], 4),
        (["-n", "4", "--ntasks-per-node=2"], ["node-01", "node-02"], 2),
        (["-w", "node-02"], ["node-02"], 4),
        (["--nodelist=node-[02,01]"], ["node-01", "node-02"], 4),  # in the job's order
        (["-w", "node-[01-02]", "-n", "1"], ["node-01"], 1),
        (["-w", "node-[01-02]", "-n", "2"], ["node-01", "node-02"], 1),
        (["-x", "node-01"], ["node-02"], 4),
        (["--exclude=node-02", "-n", "3"], ["node-01"], 3),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else str(v),
)
def test_layout(argv: list[str], nodes: list[str], per_node: int) -> None:
    assert shape(*argv) == (nodes, per_node)


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["-N", "3"], "-N 3: the step may use 2 nodes of this job (node-[01-02])"),
        (["-x", "node-01", "-N", "2"], "-N 2: the step may use 1 node of this job (node-02)"),
        (["-n", "3", "-N", "2"], "-n 3 over 2 nodes: Corral runs the same number of tasks"),
        (["-n", "5"], "give -n a multiple of 2 (or -N)"),
        (["-N", "2", "-n", "8", "--ntasks-per-node=2"], "disagree (4 tasks per node)"),
        (["-w", "node-09"], "-w node-09: node-09 not in this job's nodes (node-[01-02])"),
        (["-x", "node-[01-02]"], "no nodes left for the step (-w/-x)"),
        (["-w", "node-01", "-x", "node-01"], "no nodes left"),
        (["-w", "node-[1-"], "-w node-[1-: "),
        (["-x", "node-[2-1]"], "-x node-[2-1]: "),
    ],
)
def test_shapes_corral_cannot_start(argv: list[str], says: str) -> None:
    with pytest.raises(SrunError) as info:
        shape(*argv)
    assert says in info.value.message


def test_layout_defaults_without_slurms_variables() -> None:
    assert shape(env={"CORRAL_NODE": "gpu-3"}) == (["gpu-3"], 1)
    assert shape("-n", "2", env={"SLURM_JOB_NODELIST": "a,b"}) == (["a", "b"], 1)


@pytest.mark.parametrize("argv", [["-n", "0"], ["-N", "x"], ["--ntasks-per-node=-1"]])
def test_counts_must_be_positive_numbers(argv: list[str]) -> None:
    with pytest.raises(Exception, match="invalid _count value"):
        parser().parse_known_args([*argv, "hostname"])


# -- -K ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "flags", "kill", "command"),
    [
        (["-K", "prog", "-K1"], ["-K", "prog", "-K1"], True, ["prog", "-K1"]),
        (["-K1", "prog"], ["-K", "prog"], True, ["prog"]),
        (["-K0", "prog"], ["prog"], False, ["prog"]),
        (["--kill-on-bad-exit", "prog"], ["--kill-on-bad-exit", "prog"], True, ["prog"]),
        (["--kill-on-bad-exit=1", "prog"], ["-K", "prog"], True, ["prog"]),
        (["--kill-on-bad-exit=0", "prog"], ["prog"], False, ["prog"]),
        (["-n", "4", "-K1", "prog"], ["-n", "4", "-K", "prog"], True, ["prog"]),
        (["-N", "2", "--kill-on-bad-exit=0", "p"], ["-N", "2", "p"], False, ["p"]),
        (["--export", "ALL", "-K", "p"], ["--export", "ALL", "-K", "p"], True, ["p"]),
        (["-l", "--", "-K1"], ["-l", "--", "-K1"], False, ["--", "-K1"]),
        (["prog"], ["prog"], False, ["prog"]),
    ],
)
def test_kill_flags(argv: list[str], flags: list[str], kill: bool, command: list[str]) -> None:
    assert _kill_flags(argv) == flags
    args, unknown = parser().parse_known_args(flags)
    assert (args.kill_on_bad_exit, args.command, unknown) == (kill, command, [])


def test_a_bad_kill_value_is_left_to_the_parser() -> None:
    assert _kill_flags(["--kill-on-bad-exit=2", "p"]) == ["--kill-on-bad-exit=2", "p"]


# -- what the step's tasks see ----------------------------------------------------------


def test_forwarded_all_but_the_callers_own() -> None:
    env = {
        "HOME": "/home/alice",
        "DATA": "/scratch",
        "SLURM_JOB_ID": "7",
        "CORRAL_JOB_ID": "7",
        "CORRAL_STEP_RANK": "0",
        "BASH_FUNC_module%%": "() { :; }",
        "BIG": "x" * (MAX_VALUE + 1),
        **{name: "local" for name in LOCAL},
    }
    want = {"HOME": "/home/alice", "DATA": "/scratch", "SLURM_JOB_ID": "7", "CORRAL_JOB_ID": "7"}
    assert forwarded("ALL", env) == want
    assert forwarded("", env) == want
    assert forwarded("all", env) == want
    for name in ("CUDA_VISIBLE_DEVICES", "CORRAL_NODE", "CORRAL_JOB_TOKEN", "SLURMD_NODENAME"):
        assert name in LOCAL


def test_forwarded_none_named_and_more() -> None:
    env = {"HOME": "/h", "DATA": "/d", "CUDA_VISIBLE_DEVICES": "0"}
    assert forwarded("NONE", env) == {}
    assert forwarded("DATA,X=1,MISSING", env) == {"DATA": "/d", "X": "1"}
    assert forwarded("ALL,X=1", env) == {"HOME": "/h", "DATA": "/d", "X": "1"}
    assert forwarded("CUDA_VISIBLE_DEVICES", env) == {"CUDA_VISIBLE_DEVICES": "0"}  # asked for


def test_step_env() -> None:
    env = step_env(["node-01", "node-02"], 4, 2)
    assert env == {
        "SLURM_NTASKS": "8",
        "SLURM_NPROCS": "8",
        "SLURM_STEP_NUM_TASKS": "8",
        "SLURM_NTASKS_PER_NODE": "4",
        "SLURM_TASKS_PER_NODE": "4(x2)",
        "SLURM_STEP_TASKS_PER_NODE": "4(x2)",
        "SLURM_NNODES": "2",
        "SLURM_STEP_NUM_NODES": "2",
        "SLURM_NODELIST": "node-[01-02]",
        "SLURM_STEP_NODELIST": "node-[01-02]",
        "WORLD_SIZE": "8",
        "LOCAL_WORLD_SIZE": "4",
        "NNODES": "2",
        "SLURM_CPUS_PER_TASK": "2",
    }


def test_step_env_on_one_node() -> None:
    env = step_env(["gpu-3"], 2, None)
    assert (env["SLURM_TASKS_PER_NODE"], env["SLURM_NODELIST"], env["NNODES"]) == (
        "2",
        "gpu-3",
        "1",
    )
    assert "SLURM_CPUS_PER_TASK" not in env


def test_step_env_keeps_the_steps_node_order() -> None:
    env = step_env(["b9", "a1"], 1, None)
    assert (env["SLURM_TASKS_PER_NODE"], env["SLURM_NODELIST"]) == ("1(x2)", "b9,a1")


def test_step_command_sets_each_tasks_ids(tmp_path) -> None:
    program = (
        "import json, os, sys; names = sys.argv[1].split(','); "
        "print(json.dumps([{n: os.environ.get(n) for n in names}, sys.argv[2:]]))"
    )
    names = [
        "SLURM_PROCID",
        "RANK",
        "SLURM_LOCALID",
        "LOCAL_RANK",
        "SLURM_NODEID",
        "NODE_RANK",
        "GROUP_RANK",
        "SLURM_STEP_ID",
        "SLURM_STEPID",
    ]
    args = ["a b", 'q"uote', "it's", "$HOME", "*", "", "-n"]
    argv = step_command([sys.executable, "-c", program, ",".join(names), *args])
    assert argv[:2] == ["/bin/sh", "-c"]
    env = {
        "PATH": os.environ.get("PATH", os.defpath),
        "CORRAL_STEP_ID": "2",
        "CORRAL_STEP_RANK": "3",
        "CORRAL_STEP_LOCAL_RANK": "1",
        "CORRAL_STEP_NODE_RANK": "1",
    }
    done = subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    seen, got = json.loads(done.stdout)
    assert seen == {
        "SLURM_PROCID": "3",
        "RANK": "3",
        "SLURM_LOCALID": "1",
        "LOCAL_RANK": "1",
        "SLURM_NODEID": "1",
        "NODE_RANK": "1",
        "GROUP_RANK": "1",
        "SLURM_STEP_ID": "1",  # Slurm counts steps from 0, Corral from 1
        "SLURM_STEPID": "1",
    }
    assert got == args


def test_step_command_keeps_the_programs_exit_code(tmp_path) -> None:
    argv = step_command(["/bin/sh", "-c", "exit 7"])
    env = {"CORRAL_STEP_ID": "1", "CORRAL_STEP_RANK": "0"}
    assert subprocess.run(argv, env=env, cwd=tmp_path, timeout=60).returncode == 7


# -- srun's main ------------------------------------------------------------------------

INSIDE = {
    "CORRAL_SERVER": "http://corral:1",
    "CORRAL_JOB_ID": "7",
    "CORRAL_JOB_TOKEN": "crj_secret",
    "CORRAL_NODE": "node-01",
    "CUDA_VISIBLE_DEVICES": "0,1",
    "DATA": "/scratch",
    **JOB,
}


@pytest.fixture
def inside(monkeypatch: pytest.MonkeyPatch) -> dict:
    """A task of job 7 whose server is a stand-in: what ``srun`` started is recorded."""
    for name in list(os.environ):
        if name.startswith(("SLURM_", "CORRAL_")) or name in LOCAL:
            monkeypatch.delenv(name)
    for name, value in INSIDE.items():
        monkeypatch.setenv(name, value)
    seen: dict = {}

    class Client:
        def __init__(self, server: str, token: str) -> None:
            seen["client"] = (server, token)

        def start_step(self, job_id: int, command: list[str], *rest: object) -> str:
            seen["step"] = (job_id, command, *rest)  # nodes, per node, env, workdir
            return "step"

    def follow_step(client: object, step: str, relay: object, guard: object, kill: bool) -> int:
        seen["follow"] = (step, relay, kill)
        return 5

    monkeypatch.setattr(corral.client, "Client", Client)
    monkeypatch.setattr(corral.cli.steps, "StepSignals", lambda: "guard")
    monkeypatch.setattr(corral.cli.steps, "StepRelay", lambda c, s, out, label: ("relay", label))
    monkeypatch.setattr(corral.cli.steps, "follow_step", follow_step)
    return seen


def test_srun_starts_a_step(inside: dict, tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert srun.main(["-n", "2", "-K1", "-l", "python", "train.py", "--lr", "0.1"]) == 5
    assert inside["client"] == ("http://corral:1", "crj_secret")
    job_id, command, nodes, per_node, env, workdir = inside["step"]
    assert (job_id, nodes, per_node, workdir) == (7, ["node-01"], 2, str(tmp_path))
    assert command == step_command(["python", "train.py", "--lr", "0.1"])
    assert env["DATA"] == "/scratch"
    assert env["SLURM_NTASKS"] == "2"
    assert env["SLURM_NODELIST"] == "node-01"
    for name in ("CORRAL_JOB_TOKEN", "CUDA_VISIBLE_DEVICES", "CORRAL_NODE"):
        assert name not in env
    assert inside["follow"] == ("step", ("relay", True), True)


def test_srun_options_for_the_step(inside: dict) -> None:
    argv = ["-D", "/data", "--export=NONE", "-c", "3", "--mpi=pmix", "--", "hostname"]
    assert srun.main(argv) == 5
    _, command, nodes, per_node, env, workdir = inside["step"]
    assert command == step_command(["hostname"])
    assert (nodes, per_node, workdir) == (["node-01", "node-02"], 4, "/data")
    assert env["SLURM_CPUS_PER_TASK"] == "3"
    assert "DATA" not in env  # --export=NONE
    assert inside["follow"][2] is False


def test_srun_refuses_a_shape_before_starting_anything(inside: dict, capsys) -> None:
    assert srun.main(["-N", "3", "hostname"]) == 1
    assert "srun: error: -N 3: the step may use 2 nodes" in capsys.readouterr().err
    assert "step" not in inside


def test_srun_outside_a_job(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.delenv("CORRAL_JOB_TOKEN", raising=False)
    assert srun.main(["hostname"]) == 1
    err = capsys.readouterr().err
    assert "srun: error: not inside a Corral job" in err
    assert "`corral run [options] -- COMMAND`" in err


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--frobnicate", "hostname"], "srun: error: --frobnicate: not an option Corral's srun"),
        (["--gres=gpu:1", "hostname"], "srun: error: --gres=gpu:1: not an option"),
        (["-n", "x", "hostname"], "srun: error: argument -n/--ntasks: invalid _count value"),
        (["-n"], "srun: error: argument -n/--ntasks: expected one argument"),
        (["-n", "2"], "srun: error: no command to run"),
        (["--"], "srun: error: no command to run"),
        (["--kill-on-bad-exit=2", "p"], "srun: error: argument -K/--kill-on-bad-exit"),
    ],
)
def test_srun_errors(argv: list[str], says: str, capsys) -> None:
    assert srun.main(argv) == 1
    assert says in capsys.readouterr().err


# -- scontrol ---------------------------------------------------------------------------


def run_scontrol(argv: list[str], capsys) -> tuple[int, str, str]:
    code = scontrol.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    ("argv", "printed"),
    [
        (["show", "hostnames", "node-[01-03,07]"], "node-01\nnode-02\nnode-03\nnode-07\n"),
        (["show", "hostnames", "a1,b2"], "a1\nb2\n"),
        (["show", "hostnames"], "gpu-08\ngpu-09\n"),  # the job's own
        (["show", "hostlist", "a1,a2,a3"], "a[1-3]\n"),
        (["show", "hostlist", "n3,n1,n2"], "n[3,1-2]\n"),
        (["show", "hostlistsorted", "n3,n1,n2"], "n[1-3]\n"),
        (["show", "hostlist"], "gpu-[08-09]\n"),
        (["-o", "show", "hostnames", "x1"], "x1\n"),
        (["show", "HOSTNAMES", "x1"], "x1\n"),
    ],
)
def test_scontrol_hostlists(
    argv: list[str], printed: str, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLURM_JOB_NODELIST", "gpu-[08-09]")
    assert run_scontrol(argv, capsys) == (0, printed, "")


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["requeue", "12"], "scontrol: error: requeue 12: Corral's scontrol supports only"),
        ([], "scontrol: error: (nothing): Corral's scontrol supports only"),
        (["show"], "supports only scontrol show hostnames"),
        (["show", "hostnames", "a", "b"], "supports only"),
        (["show", "job", "12"], "scontrol: error: show job: supported: scontrol show hostnames"),
        (["show", "hostnames", "n[1-"], "scontrol: error: "),
    ],
)
def test_scontrol_refuses_the_rest(argv: list[str], says: str, capsys) -> None:
    code, out, err = run_scontrol(argv, capsys)
    assert (code, out) == (1, "")
    assert says in err


def test_scontrol_points_at_corrals_commands(capsys) -> None:
    _, _, err = run_scontrol(["hold", "12"], capsys)
    assert "`corral show`, `corral hold`/`release` and `corral cancel`" in err


def test_more_tasks_per_node_than_the_job_has_needs_overcommit() -> None:
    with pytest.raises(SrunError, match="more than the job's"):
        shape("-n", "16", env={**JOB, "SLURM_NTASKS_PER_NODE": "4"})
    nodes, per_node = shape("-O", "-n", "16", env={**JOB, "SLURM_NTASKS_PER_NODE": "4"})
    assert per_node == 16 // len(nodes)
