"""``kind: batch`` (``corral sbatch``): its options, its expansion (the first task decides,
the others serve it), what each task runs, and ``corral.kinds.batch_run``, which runs the
script on rank 0 (its file name patterns in-process, the rest as a real subprocess)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from corral.core.job import JobSpec
from corral.errors import ValidationError
from corral.kinds.base import JobNode, TaskContext, kind_options
from corral.kinds.batch import CHUNK, HOLD, MAX_SCRIPT, BatchKind, parse_signal, signal_number
from corral.kinds.batch_run import (
    NO_ARRAY_INDEX,
    default_output,
    expand_pattern,
    pattern_values,
)
from corral.schemas.manifest import parse_manifest
from corral.server.services.settle import daemon_ranks

KIND = BatchKind()
SCRIPT = "#!/bin/bash\n#SBATCH -N 2\nsrun hostname\n"


def block(**extra: object) -> dict:
    return {"script": SCRIPT, **extra}


def spec_of(nodes: int | None = 2, batch: dict | None = None, **extra: object) -> JobSpec:
    manifest = {
        "kind": "batch",
        "command": ["job.sh"],
        "workdir": "/home/alice/runs",
        "batch": block() if batch is None else batch,
        **extra,
    }
    if nodes is not None:
        manifest["nodes"] = nodes
    return parse_manifest(manifest).to_spec()


def context(spec: JobSpec, rank: int) -> TaskContext:
    nodes = tuple(JobNode(f"node-{i:02d}", f"10.0.0.{i}", 1, "worker") for i in range(spec.nodes))
    return TaskContext(
        spec=spec,
        job_id=7,
        attempt=0,
        rank=rank,
        local_rank=0,
        node_rank=rank,
        node=nodes[rank].name,
        role=spec.role_of(rank),
        nodes=nodes,
        master_addr="10.0.0.0",
        master_port=29500,
    )


# -- options ----------------------------------------------------------------------------


def test_options_are_kept() -> None:
    options = block(
        args=["a", "b c"],
        output="out-%j.log",
        error="err-%j.log",
        open_mode="append",
        ntasks=8,
        ntasks_per_node=4,
        cpus_per_task=2,
        submit_dir="/home/alice",
        signal="B:USR1@90",
        partition="gpu",
        submit_host="login-1",
    )
    assert KIND.options(options) == options


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({}, "batch.script: the batch script's text is required"),
        ({"script": ""}, "batch.script: the batch script's text is required"),
        ({"script": "echo hi\n"}, "the first line must start with #!"),
        ({"script": "#!/bin/sh\n\0"}, "batch.script: a text file, not binary"),
        ({"script": "#!/bin/sh\n" + "x" * MAX_SCRIPT}, "batch.script: at most 256 KiB"),
        (block(args=["a", 1]), "batch.args: a list of strings"),
        (block(args=["a\0b"]), "batch.args: a list of strings"),
        (block(open_mode="sideways"), "batch.open_mode: truncate or append"),
        (block(ntasks=0), "batch.ntasks: at least 1 (got 0)"),
        (block(ntasks_per_node=0), "batch.ntasks_per_node: at least 1"),
        (block(cpus_per_task=-1), "batch.cpus_per_task: at least 1"),
        (block(ntasks="4"), "batch.ntasks: '4' is not a valid value"),
        (block(ntasks=True), "batch.ntasks: True is not a valid value"),
        (block(signal="USR1@90"), "without B:"),
        (block(signal="B:NOPE"), "'NOPE' is not a signal name or number"),
        (block(frobnicate=1), "batch.frobnicate: not an option of kind batch"),
    ],
)
def test_bad_options_are_refused(options: dict, says: str) -> None:
    with pytest.raises(ValueError) as info:
        KIND.options(options)
    assert says in str(info.value)


def test_the_manifest_refuses_a_bad_block() -> None:
    with pytest.raises(ValidationError, match="batch.script: the batch script's text is required"):
        spec_of(batch={})


# -- expansion: the first task decides --------------------------------------------------


def test_the_first_task_decides_and_the_others_serve_it() -> None:
    spec = spec_of(nodes=3)
    assert spec.first_task_decides
    assert spec.world_size == 3
    assert not spec.role_of(0).daemon
    assert spec.role_of(1).daemon and spec.role_of(2).daemon
    assert daemon_ranks(spec) == {1, 2}


def test_a_one_node_batch_job_has_no_server() -> None:
    spec = spec_of(nodes=1)
    assert spec.first_task_decides
    assert daemon_ranks(spec) == set()


def test_other_jobs_are_decided_by_all_their_tasks() -> None:
    spec = parse_manifest({"command": ["python", "x.py"], "nodes": 2}).to_spec()
    assert not spec.first_task_decides
    assert not spec.role_of(1).daemon
    assert daemon_ranks(spec) == set()


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        ({"tasks_per_node": 2}, "tasks_per_node: a batch job holds each node with one task"),
        (
            {"nodes": None, "roles": [{"name": "a", "nodes": 1, "command": ["x"]}]},
            "roles: a batch job",
        ),
    ],
)
def test_what_a_batch_job_cannot_be(extra: dict, says: str) -> None:
    with pytest.raises(ValidationError, match=says):
        spec_of(**extra)


# -- launch -----------------------------------------------------------------------------


def test_rank_0_runs_the_script() -> None:
    spec = spec_of(batch=block(args=["a", "b c"], output="o-%j", error="e-%j"))
    launch = KIND.launch(context(spec, 0))
    assert launch.command[:2] == ("/bin/sh", "-c")
    assert launch.command[3:] == ("corral.kinds.batch_run", "1", SCRIPT, "a", "b c")
    assert launch.env["CORRAL_BATCH_OUTPUT"] == "o-%j"
    assert launch.env["CORRAL_BATCH_ERROR"] == "e-%j"
    assert launch.env["CORRAL_BATCH_OPEN_MODE"] == "truncate"
    assert "CORRAL_BATCH_SIGNAL" not in launch.env
    assert launch.env["RANK"] == "0"


def test_defaults_for_the_files() -> None:
    launch = KIND.launch(context(spec_of(), 0))
    assert launch.env["CORRAL_BATCH_OUTPUT"] == ""
    assert launch.env["CORRAL_BATCH_ERROR"] == ""


def test_a_long_script_travels_in_chunks() -> None:
    script = "#!/bin/sh\n" + "".join(f"echo line {i:06d}\n" for i in range(9000))
    assert 2 * CHUNK < len(script) <= MAX_SCRIPT
    launch = KIND.launch(context(spec_of(batch=block(script=script, args=["x"])), 0))
    module, count, *rest = launch.command[3:]
    assert (module, count) == ("corral.kinds.batch_run", "3")
    chunks, args = rest[:3], rest[3:]
    assert all(len(chunk) <= CHUNK for chunk in chunks)
    assert "".join(chunks) == script
    assert args == ["x"]


def test_the_other_ranks_hold_their_node() -> None:
    spec = spec_of(nodes=3, batch=block(ntasks=6, signal="B:USR1@60"), time_limit=600)
    launch = KIND.launch(context(spec, 2))
    assert launch.command == HOLD
    assert "CORRAL_BATCH_OUTPUT" not in launch.env
    assert "CORRAL_BATCH_SIGNAL" not in launch.env
    assert "RANK" not in launch.env
    assert launch.env["SLURM_NTASKS"] == "6"
    assert launch.env["SLURM_NODEID"] == "2"
    assert launch.env["SLURMD_NODENAME"] == "node-02"


@pytest.mark.parametrize(
    ("time_limit", "signal_spec", "sent"),
    [
        (600, "B:USR1@90", f"{signal.SIGUSR1}@510"),
        (600, "B:TERM", f"{signal.SIGTERM}@540"),  # 60 s before, by default
        (30, "B:USR1@90", f"{signal.SIGUSR1}@0"),  # at once when the limit is shorter
        (14 * 86400, "B:USR2@95", f"{signal.SIGUSR2}@1209505"),  # to the second
        (90.5, "B:USR1@60", f"{signal.SIGUSR1}@30.5"),
    ],
)
def test_the_signal_before_the_time_limit(time_limit: float, signal_spec: str, sent: str) -> None:
    spec = spec_of(batch=block(signal=signal_spec), time_limit=time_limit)
    assert KIND.launch(context(spec, 0)).env["CORRAL_BATCH_SIGNAL"] == sent


def test_no_signal_without_a_time_limit() -> None:
    spec = spec_of(batch=block(signal="B:USR1@90"))
    assert "CORRAL_BATCH_SIGNAL" not in KIND.launch(context(spec, 0)).env


def test_what_slurm_tells_the_script() -> None:
    options = block(
        ntasks=8,
        ntasks_per_node=4,
        cpus_per_task=2,
        submit_dir="/home/alice",
        submit_host="login-1",
        partition="gpu",
    )
    spec = spec_of(batch=options, priority="high", queue="gpu")
    env = KIND.launch(context(spec, 0)).env
    assert env["SLURM_NTASKS"] == env["SLURM_NPROCS"] == env["WORLD_SIZE"] == "8"
    assert env["SLURM_NTASKS_PER_NODE"] == env["LOCAL_WORLD_SIZE"] == "4"
    assert env["SLURM_TASKS_PER_NODE"] == "4(x2)"
    assert env["SLURM_CPUS_PER_TASK"] == "2"
    assert env["SLURM_SUBMIT_DIR"] == "/home/alice"
    assert env["SLURM_SUBMIT_HOST"] == "login-1"
    assert env["SLURM_JOB_PARTITION"] == "gpu"
    assert env["SLURM_JOB_QOS"] == "high"
    assert (env["SLURM_PROCID"], env["SLURM_LOCALID"], env["SLURM_NODEID"]) == ("0", "0", "0")
    assert env["SLURMD_NODENAME"] == "node-00"
    assert env["LOCAL_RANK"] == "0"


def test_slurm_defaults_for_a_bare_block() -> None:
    spec = spec_of(nodes=1)
    env = KIND.launch(context(spec, 0)).env
    assert (env["SLURM_NTASKS"], env["SLURM_NTASKS_PER_NODE"], env["SLURM_TASKS_PER_NODE"]) == (
        "1",
        "1",
        "1",
    )
    assert env["SLURM_JOB_PARTITION"] == spec.queue
    assert env["SLURM_JOB_QOS"] == "normal"
    for key in ("SLURM_CPUS_PER_TASK", "SLURM_SUBMIT_DIR", "SLURM_SUBMIT_HOST"):
        assert key not in env


def test_tasks_per_node_from_ntasks_alone() -> None:
    env = KIND.launch(context(spec_of(nodes=2, batch=block(ntasks=6)), 0)).env
    assert (env["SLURM_NTASKS"], env["SLURM_NTASKS_PER_NODE"]) == ("6", "3")


def test_options_survive_the_spec() -> None:
    spec = spec_of(batch=block(args=["x"], ntasks=2))
    assert kind_options(spec) == block(args=["x"], ntasks=2)


# -- --signal ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("B:USR1@90", (signal.SIGUSR1, 90, True)),
        ("B:USR1", (signal.SIGUSR1, 60, True)),
        ("b:sigterm@0", (signal.SIGTERM, 0, True)),
        ("B:10@5", (10, 5, True)),
        (" B:INT@65535 ", (signal.SIGINT, 65535, True)),
    ],
)
def test_parse_signal(text: str, parsed: tuple[int, int, bool]) -> None:
    assert parse_signal(text) == parsed


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("USR1@90", "without B: Slurm signals the tasks of every job step"),
        ("USR1", "--signal=B:USR1@60 signals the batch script's shell"),
        ("B:USR1@soon", "@TIME is a number of seconds"),
        ("B:USR1@-1", "@TIME from 0 to 65535 seconds"),
        ("B:USR1@65536", "@TIME from 0 to 65535 seconds"),
        ("B:NOPE@5", "'NOPE' is not a signal name or number"),
        ("B:0", "'0' is not a signal name or number"),
        ("B:", "'' is not a signal name or number"),
    ],
)
def test_bad_signals(text: str, says: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_signal(text)
    assert says in str(info.value)


@pytest.mark.parametrize(
    ("name", "number"),
    [
        ("USR1", signal.SIGUSR1),
        ("SIGUSR1", signal.SIGUSR1),
        ("usr1", signal.SIGUSR1),
        ("sigterm", signal.SIGTERM),
        ("10", 10),
        ("KILL", signal.SIGKILL),
        ("0", None),
        (str(signal.NSIG), None),
        ("NOPE", None),
        ("_DFL", None),  # signal.SIG_DFL is a handler, not a signal
        ("", None),
    ],
)
def test_signal_number(name: str, number: int | None) -> None:
    assert signal_number(name) == number


# -- file name patterns -----------------------------------------------------------------

VALUES = {
    "j": "123",
    "A": "120",
    "a": "7",
    "x": "train",
    "N": "node-01",
    "t": "0",
    "n": "0",
    "s": "batch",
    "u": "ada",
    "J": "123.batch",
}


@pytest.mark.parametrize(
    ("pattern", "name"),
    [
        ("slurm-%j.out", "slurm-123.out"),
        ("%A_%a.log", "120_7.log"),
        ("%x-%N-%t-%n-%s-%u-%J", "train-node-01-0-0-batch-ada-123.batch"),
        ("%4a", "0007"),
        ("%06j", "000123"),
        ("%5x", "train"),  # padding is for numbers only
        ("%3N", "node-01"),
        ("%20j", "0000000123"),  # at most 10 digits, as Slurm
        ("100%%-%j", "100%-123"),
        ("%%j", "%j"),
        ("%q%", "%q%"),  # unknown: kept as written
        ("plain.txt", "plain.txt"),
        ("%2a", "07"),
        ("%1j", "123"),
    ],
)
def test_expand_pattern(pattern: str, name: str) -> None:
    assert expand_pattern(pattern, VALUES) == name


def test_padding_skips_what_is_not_a_number() -> None:
    assert expand_pattern("%4a", {"a": ""}) == ""


def test_pattern_values_from_the_environment() -> None:
    env = {
        "SLURM_JOB_ID": "123",
        "CORRAL_JOB_ID": "999",
        "SLURM_ARRAY_JOB_ID": "120",
        "SLURM_ARRAY_TASK_ID": "3",
        "SLURM_JOB_NAME": "train",
        "CORRAL_NODE": "node-01.cluster.local",
        "SLURM_NODEID": "0",
        "USER": "ada",
    }
    values = pattern_values(env)
    assert values == {**VALUES, "a": "3"}
    assert pattern_values(env, task=5, step="2")["J"] == "123.2"


def test_pattern_values_outside_an_array() -> None:
    values = pattern_values({"CORRAL_JOB_ID": "55", "LOGNAME": "bob"})
    assert (values["j"], values["A"], values["a"]) == ("55", "55", NO_ARRAY_INDEX)
    assert values["u"] == "bob"
    assert values["N"] == os.uname().nodename.split(".")[0]


def test_default_output() -> None:
    assert default_output({}) == "slurm-%j.out"
    assert default_output({"SLURM_ARRAY_TASK_ID": "4"}) == "slurm-%A_%a.out"


# -- batch_run as the task runs it ------------------------------------------------------


def run_batch(
    folder: Path, script: str, *args: str, chunks: list[str] | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    """``python -m corral.kinds.batch_run`` in ``folder`` as rank 0 of job 7 runs it."""
    environ = {
        "PATH": os.environ.get("PATH", os.defpath),
        "HOME": str(folder),
        "USER": "ada",
        "CORRAL_JOB_ID": "7",
        "SLURM_JOB_ID": "7",
        "SLURM_JOB_NAME": "train",
        "CORRAL_NODE": "node-01.cluster",
        **env,
    }
    pieces = chunks if chunks is not None else [script]
    return subprocess.run(
        [sys.executable, "-m", "corral.kinds.batch_run", str(len(pieces)), *pieces, *args],
        cwd=folder,
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,  # a guard against a hang, not a limit the tests rely on
    )


def test_the_output_goes_to_slurm_jobid_out(tmp_path: Path) -> None:
    done = run_batch(tmp_path, "#!/bin/sh\necho out\necho err >&2\npwd\n")
    assert done.returncode == 0, done.stderr
    assert "output goes to slurm-7.out" in done.stdout
    assert (tmp_path / "slurm-7.out").read_text() == f"out\nerr\n{tmp_path}\n"


def test_the_scripts_arguments(tmp_path: Path) -> None:
    script = '#!/bin/bash\necho "$#"\nprintf "[%s]\\n" "$@"\n'
    done = run_batch(tmp_path, script, "a b", "'quoted'", "$HOME", "*")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "slurm-7.out").read_text() == "4\n[a b]\n['quoted']\n[$HOME]\n[*]\n"


def test_a_script_in_chunks(tmp_path: Path) -> None:
    done = run_batch(tmp_path, "", "x", chunks=["#!/bin/sh\necho jo", 'ined "$1"\n'])
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "slurm-7.out").read_text() == "joined x\n"


def test_output_and_error_files(tmp_path: Path) -> None:
    done = run_batch(
        tmp_path,
        "#!/bin/sh\necho out\necho err >&2\n",
        CORRAL_BATCH_OUTPUT="out-%x-%j.log",
        CORRAL_BATCH_ERROR="err-%j.log",
    )
    assert done.returncode == 0, done.stderr
    assert "out-train-7.log (errors: err-7.log)" in done.stdout
    assert (tmp_path / "out-train-7.log").read_text() == "out\n"
    assert (tmp_path / "err-7.log").read_text() == "err\n"


def test_an_error_pattern_naming_the_output_file_shares_it(tmp_path: Path) -> None:
    done = run_batch(
        tmp_path,
        "#!/bin/sh\necho out\necho err >&2\necho out2\n",
        CORRAL_BATCH_OUTPUT="both-%j.log",
        CORRAL_BATCH_ERROR="both-7.log",
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "both-7.log").read_text() == "out\nerr\nout2\n"


def test_an_array_elements_default_output(tmp_path: Path) -> None:
    done = run_batch(
        tmp_path, "#!/bin/sh\necho hi\n", SLURM_ARRAY_JOB_ID="5", SLURM_ARRAY_TASK_ID="2"
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "slurm-5_2.out").read_text() == "hi\n"


def test_truncate_and_append(tmp_path: Path) -> None:
    log = tmp_path / "run.log"
    log.write_text("old line that is long\n")
    run_batch(tmp_path, "#!/bin/sh\necho new\n", CORRAL_BATCH_OUTPUT="run.log")
    assert log.read_text() == "new\n"
    run_batch(
        tmp_path,
        "#!/bin/sh\necho again\n",
        CORRAL_BATCH_OUTPUT="run.log",
        CORRAL_BATCH_OPEN_MODE="append",
    )
    assert log.read_text() == "new\nagain\n"


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ("exit 0", 0),
        ("exit 3", 3),
        ("false", 1),
        ("kill -KILL $$", 128 + signal.SIGKILL),
        ("kill -TERM $$", 128 + signal.SIGTERM),
    ],
)
def test_the_scripts_exit_code(tmp_path: Path, body: str, code: int) -> None:
    assert run_batch(tmp_path, f"#!/bin/sh\n{body}\n").returncode == code


def test_srun_and_scontrol_are_on_the_path(tmp_path: Path) -> None:
    script = "\n".join(
        [
            "#!/bin/sh",
            "scontrol show hostnames node-[01-03]",
            'scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1',
            'dirname "$(command -v srun)"',
            'dirname "$0"',
            "srun hostname",
            'echo "srun: $?"',
        ]
    )
    done = run_batch(tmp_path, script, SLURM_JOB_NODELIST="gpu-[07-08]")
    assert done.returncode == 0, done.stderr
    lines = (tmp_path / "slurm-7.out").read_text().splitlines()
    assert lines[:4] == ["node-01", "node-02", "node-03", "gpu-07"]
    shims, folder = Path(lines[4]), Path(lines[5])
    assert shims == folder / "bin"
    assert not folder.exists()  # the private copy of the script is removed afterwards
    assert "not inside a Corral job; `corral run [options] -- COMMAND`" in lines[6]
    assert lines[7] == "srun: 1"


def test_corrals_batch_variables_stay_out_of_the_script(tmp_path: Path) -> None:
    done = run_batch(
        tmp_path,
        '#!/bin/sh\nenv | grep "^CORRAL_BATCH" || echo none\n',
        CORRAL_BATCH_OUTPUT="o.log",
        CORRAL_BATCH_OPEN_MODE="truncate",
        CORRAL_BATCH_SIGNAL="10@100",
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "o.log").read_text() == "none\n"


def test_an_unwritable_output_file(tmp_path: Path) -> None:
    done = run_batch(tmp_path, "#!/bin/sh\necho x\n", CORRAL_BATCH_OUTPUT="missing/dir/%j.out")
    assert done.returncode == 1
    assert "corral sbatch: cannot open missing/dir/7.out: No such file or directory" in done.stderr


def test_an_unwritable_error_file(tmp_path: Path) -> None:
    done = run_batch(tmp_path, "#!/bin/sh\necho x\n", CORRAL_BATCH_ERROR="/proc/nope/err")
    assert done.returncode == 1
    assert "corral sbatch: cannot open /proc/nope/err" in done.stderr


def test_an_interpreter_that_is_not_there(tmp_path: Path) -> None:
    done = run_batch(tmp_path, "#!/no/such/shell\necho x\n")
    assert done.returncode == 127
    said = "corral sbatch: cannot run the batch script (#!/no/such/shell)"
    assert said in done.stderr
    assert said in (tmp_path / "slurm-7.out").read_text()
    assert "Traceback" not in done.stderr


def test_usage() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "corral.kinds.batch_run"], capture_output=True, text=True
    )
    assert done.returncode == 2
    assert "usage: python -m corral.kinds.batch_run N CHUNK" in done.stderr


WAITS = "for i in $(seq 400); do sleep 0.05; done; echo 'no signal came'; exit 9"


def test_the_signal_reaches_a_script_that_traps_it(tmp_path: Path) -> None:
    script = f"#!/bin/bash\ntrap 'echo got USR1; exit 0' USR1\necho waiting\n{WAITS}\n"
    done = run_batch(tmp_path, script, CORRAL_BATCH_SIGNAL=f"{signal.SIGUSR1}@0.2")
    assert done.returncode == 0, (tmp_path / "slurm-7.out").read_text()
    assert (tmp_path / "slurm-7.out").read_text() == "waiting\ngot USR1\n"


def test_the_signal_ends_a_script_that_does_not_trap_it(tmp_path: Path) -> None:
    done = run_batch(tmp_path, "#!/bin/sh\nexec sleep 20\n", CORRAL_BATCH_SIGNAL="10@0")
    assert done.returncode == 128 + 10
