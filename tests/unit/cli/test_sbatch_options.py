"""`corral sbatch`'s options (SPEC section 9), pure: ``#SBATCH`` lines and the command line
in, a ``batch`` manifest out (which must always pass ``parse_manifest``); and how
``corral sbatch`` takes its own ``--server``/``--token``/``--json`` out of them."""

from __future__ import annotations

import pytest
from pydantic import BaseModel
from typer.testing import CliRunner, Result

from corral.cli import sbatch as sbatch_cli
from corral.cli.sbatch import _client_settings
from corral.cli.sbatch_options import (
    MAX_ENV,
    MAX_VALUE,
    SHORT_UNSUPPORTED,
    UNSUPPORTED,
    Batch,
    command_line,
    constraint_labels,
    directives,
    parse,
    slurm_time,
)
from corral.errors import ValidationError
from corral.schemas.manifest import parse_manifest

SCRIPT = "#!/bin/bash\necho hello\n"
CWD = "/home/alice/runs"
ENV = {"HOME": "/home/alice", "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
MIB = 1024**2
GIB = 1024**3


def batch(
    *options: str,
    script: str | None = SCRIPT,
    args: tuple[str, ...] = (),
    environ: dict[str, str] | None = None,
    cwd: str = CWD,
) -> Batch:
    """``corral sbatch OPTIONS job.sh ARGS`` (``script=None``: no script file, as with
    ``--wrap``); the manifest is checked to be one the server accepts."""
    argv = [*options, *(["job.sh", *args] if script is not None else [])]
    result = parse(script, command_line(argv), ENV if environ is None else environ, cwd, "login-1")
    parse_manifest(result.manifest)
    return result


def manifest(*options: str, **kwargs: object) -> dict:
    return batch(*options, **kwargs).manifest  # type: ignore[arg-type]


def refused(*options: str, **kwargs: object) -> str:
    with pytest.raises(ValidationError) as info:
        batch(*options, **kwargs)  # type: ignore[arg-type]
    return info.value.message


def with_directives(*lines: str) -> str:
    return "\n".join(["#!/bin/bash", *lines, "srun hostname", ""])


# -- #SBATCH lines ----------------------------------------------------------------------


def test_directives_stop_at_the_first_command() -> None:
    script = "\n".join(
        [
            "#!/bin/bash",
            "",
            "#SBATCH -J train",
            "# a comment",
            "#SBATCH --nodes=2 --ntasks-per-node 4",
            "   ",
            "module load cuda",
            "#SBATCH -t 10",
        ]
    )
    assert directives(script) == ["-J", "train", "--nodes=2", "--ntasks-per-node", "4"]


@pytest.mark.parametrize(
    "line",
    ["# SBATCH -N 2", "##SBATCH -N 2", "#SBATCH_X -N 2", "#sbatch -N 2", "  #SBATCH -N 2"],
    ids=["space", "double-hash", "longer-word", "lower-case", "indented"],
)
def test_lines_that_are_only_comments(line: str) -> None:
    """Slurm reads ``#SBATCH`` only at the very start of a line; the rest are comments."""
    assert directives(with_directives(line, "#SBATCH -n 2")) == ["-n", "2"]


def test_inline_comments_and_quotes() -> None:
    script = with_directives(
        "#SBATCH -J 'my job'  # the name",
        '#SBATCH --output="out dir/%j.log" # where',
        "#SBATCH --comment-free=a#b",
        "#SBATCH",
    )
    assert directives(script) == ["-J", "my job", "--output=out dir/%j.log", "--comment-free=a"]


def test_an_unbalanced_quote_names_its_line() -> None:
    with pytest.raises(ValidationError, match=r"line 3: .*#SBATCH -J 'oops"):
        directives(with_directives("#SBATCH -N 1", "#SBATCH -J 'oops"))


def test_a_script_without_directives() -> None:
    assert directives("#!/bin/sh\nexec python train.py\n") == []
    assert directives("") == []


def test_directives_become_the_manifest() -> None:
    script = with_directives(
        "#SBATCH --job-name=train",
        "#SBATCH -N 2 --ntasks-per-node=4",
        "#SBATCH --gres=gpu:a100:4",
        "#SBATCH -c 8 --mem=64G",
        "#SBATCH -t 1-00:00:00",
        "#SBATCH -o logs/%x-%j.out -e logs/%x-%j.err",
        "#SBATCH -p gpu --qos=high",
        "#SBATCH --requeue",
    )
    m = manifest(script=script)
    assert m["name"] == "train"
    assert (m["nodes"], m["batch"]["ntasks"], m["batch"]["ntasks_per_node"]) == (2, 8, 4)
    assert m["resources"] == {"gpus": "a100:4", "cpus": 32, "memory": 64 * GIB}
    assert m["time_limit"] == 86400
    assert m["batch"]["output"] == "logs/%x-%j.out"
    assert m["batch"]["error"] == "logs/%x-%j.err"
    assert m["batch"]["cpus_per_task"] == 8
    assert (m["queue"], m["batch"]["partition"], m["priority"]) == ("gpu", "gpu", "high")
    assert m["requeue"] is True
    assert m["batch"]["script"] == script  # the script travels whole, directives and all


def test_the_command_line_wins_over_the_script() -> None:
    script = with_directives("#SBATCH -J from-script", "#SBATCH -N 2", "#SBATCH -t 30")
    m = manifest("-J", "from-cli", "-t", "5", script=script)
    assert m["name"] == "from-cli"
    assert m["time_limit"] == 300
    assert m["nodes"] == 2  # what the command line does not give still comes from the script


def test_no_requeue_on_the_command_line_beats_requeue_in_the_script() -> None:
    script = with_directives("#SBATCH --requeue")
    assert manifest("--no-requeue", script=script)["requeue"] is False
    assert "requeue" not in manifest()


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("#SBATCH --frobnicate", "--frobnicate (in an #SBATCH line): not an sbatch option"),
        ("#SBATCH train.py", "train.py (in an #SBATCH line): not an option"),
        ("#SBATCH -N 2 extra", "extra (in an #SBATCH line): not an option"),
    ],
)
def test_what_an_sbatch_line_cannot_hold(line: str, says: str) -> None:
    assert says in refused(script=with_directives(line))


# -- the command line -------------------------------------------------------------------


def test_the_options_end_at_the_script() -> None:
    given = command_line(["-N", "2", "-J", "x", "job.sh", "-N", "4", "--server", "y", "--wrap"])
    assert (given.nodes, given.job_name) == ("2", "x")
    assert given.script == ["job.sh", "-N", "4", "--server", "y", "--wrap"]
    assert given.wrap is None


def test_script_arguments_are_the_scripts() -> None:
    m = manifest("-N", "1", args=("-N", "4", "--lr=0.1", "two words"))
    assert m["nodes"] == 1
    assert m["command"] == ["job.sh", "-N", "4", "--lr=0.1", "two words"]
    assert m["batch"]["args"] == ["-N", "4", "--lr=0.1", "two words"]


def test_a_double_dash_ends_the_options() -> None:
    assert command_line(["-N", "2", "--", "job.sh", "a"]).script == ["job.sh", "a"]


def test_attached_short_values() -> None:
    given = command_line(["-N2", "-n8", "-Jname", "-t30", "job.sh"])
    assert (given.nodes, given.ntasks, given.job_name, given.time) == ("2", 8, "name", "30")


@pytest.mark.parametrize("option", ["--frobnicate", "-Z", "--job=x"])
def test_unknown_options_are_refused_by_name(option: str) -> None:
    with pytest.raises(ValidationError) as info:
        command_line([option, "job.sh"])
    assert info.value.message.startswith(f"sbatch: {option}: not an sbatch option")


def test_the_command_is_the_scripts_file_name() -> None:
    given = command_line(["scripts/train.sh", "a"])
    m = parse(SCRIPT, given, ENV, CWD, "login-1").manifest
    assert m["command"] == ["train.sh", "a"]
    assert m["name"] == "train.sh"  # Slurm's default job name


def test_where_it_was_submitted_from() -> None:
    m = manifest()
    assert m["workdir"] == CWD
    assert m["batch"]["submit_dir"] == CWD
    assert m["batch"]["submit_host"] == "login-1"
    assert m["kind"] == "batch"


def test_the_default_job() -> None:
    m = manifest()
    assert m["nodes"] == 1
    assert (m["batch"]["ntasks"], m["batch"]["ntasks_per_node"]) == (1, 1)
    assert "resources" not in m
    assert "time_limit" not in m
    for key in ("hold", "array", "dependency", "queue", "priority", "node_selector", "requeue"):
        assert key not in m
    assert not batch().parsable


def test_every_produced_manifest_expands_to_a_batch_job() -> None:
    spec = parse_manifest(manifest("-N", "2", "-n", "8", "-t", "10")).to_spec()
    assert spec.kind == "batch"
    assert spec.first_task_decides
    assert (spec.nodes, spec.tasks_per_node) == (2, 1)


# -- time limits ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30", 1800),
        ("30:15", 1815),
        ("1:00:00", 3600),
        ("0:0:45", 45),
        ("2-0", 2 * 86400),
        ("2-3", 2 * 86400 + 3 * 3600),
        ("2-3:04", 2 * 86400 + 3 * 3600 + 4 * 60),
        ("2-3:04:05", 2 * 86400 + 3 * 3600 + 4 * 60 + 5),
        ("90", 5400),
        (" 10 ", 600),
        ("UNLIMITED", None),
        ("infinite", None),
        ("-1", None),
        ("0", None),  # Slurm: a time limit of zero requests that no limit be imposed
        ("0:00:00", None),
    ],
)
def test_slurm_time(text: str, seconds: float | None) -> None:
    assert slurm_time(text) == seconds


@pytest.mark.parametrize("text", ["", "abc", "1:2:3:4", "1-", "-5", "1.5", "2-3-4", "1h", "1:"])
def test_bad_times_are_refused(text: str) -> None:
    with pytest.raises(ValidationError, match=r"-t .*: MIN, MIN:SEC, H:M:S"):
        slurm_time(text)


def test_time_in_the_manifest() -> None:
    assert manifest("-t", "2-3:04:05")["time_limit"] == 183845
    assert "time_limit" not in manifest("-t", "UNLIMITED")
    assert "time_limit" not in manifest("--time=0")
    assert "-t 1:2:3:4" in refused("-t", "1:2:3:4")


# -- memory -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "memory"),
    [
        ("4000", 4000 * MIB),  # no unit: megabytes
        ("4000M", 4000 * MIB),
        ("64G", 64 * GIB),
        ("64g", 64 * GIB),
        ("64GB", 64 * GIB),
        ("512K", 512 * 1024),
        ("1T", 1024 * GIB),
        ("1.5G", int(1.5 * GIB)),
    ],
)
def test_memory(text: str, memory: int) -> None:
    assert manifest(f"--mem={text}")["resources"] == {"memory": memory}


def test_mem_zero_is_no_limit() -> None:
    assert "resources" not in manifest("--mem=0")


@pytest.mark.parametrize("text", ["lots", "-1", "4X", "G", ""])
def test_bad_memory_is_refused(text: str) -> None:
    assert f"--mem={text}: SIZE[K|M|G|T]" in refused(f"--mem={text}")


# -- GPUs -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "gpus"),
    [
        (["--gres=gpu:a100:4"], "a100:4"),
        (["--gres=gpu:2"], 2),
        (["--gres=gpu"], 1),
        (["--gres=gpu:a100"], "a100:1"),  # Slurm: the count defaults to 1
        (["--gpus-per-node=2"], 2),
        (["--gpus-per-node=h100:8"], "h100:8"),
        (["--gpus=8", "-N", "2"], 4),
        (["-G", "a100:8", "-N", "2"], "a100:4"),
        (["--gpus=3"], 3),
        (["--gpus-per-task=1", "-N", "2", "--ntasks-per-node=4"], 4),
        (["--gpus-per-task=a100:2", "-n", "2"], "a100:4"),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else str(v),
)
def test_gpus_per_node(options: list[str], gpus: str | int) -> None:
    assert manifest(*options)["resources"]["gpus"] == gpus


@pytest.mark.parametrize(
    ("options", "says"),
    [
        (["--gres=gpu:2", "--gpus-per-node=2"], "--gres, --gpus-per-node: give the GPUs once"),
        (["--gpus=4", "--gpus-per-task=1"], "--gpus, --gpus-per-task: give the GPUs once"),
        (["--gres=mps:1"], "--gres=mps:1: only gpu is a resource Corral knows (mps:1)"),
        (["--gres=gpu:1,license:2"], "only gpu is a resource Corral knows (license:2)"),
        (["--gres=gpu:1,gpu:2"], "--gres=gpu:1,gpu:2: one gpu entry"),
        (["--gres=gpu:a100:many"], "--gres=gpu:a100:many: a GPU count ([TYPE:]N)"),
        (["--gpus-per-node=many"], "--gpus-per-node=many: a GPU count"),
        (["--gpus=3", "-N", "2"], "--gpus=3: 3 GPUs do not split evenly over 2 nodes"),
    ],
)
def test_bad_gpu_requests_are_refused(options: list[str], says: str) -> None:
    assert says in refused(*options)


def test_a_gpu_option_in_the_script_and_another_on_the_command_line() -> None:
    script = with_directives("#SBATCH --gres=gpu:4")
    assert "give the GPUs once" in refused("--gpus-per-node=2", script=script)
    assert manifest("--gres=gpu:2", script=script)["resources"]["gpus"] == 2


# -- nodes and tasks --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "nodes", "per_node", "ntasks"),
    [
        ([], 1, 1, 1),
        (["-N", "2"], 2, 1, 2),
        (["-N", "2", "-n", "8"], 2, 4, 8),
        (["-n", "8"], 1, 8, 8),
        (["-N", "2", "--ntasks-per-node=4"], 2, 4, 8),
        (["--ntasks-per-node=4"], 1, 4, 4),
        (["-n", "8", "--ntasks-per-node=4"], 2, 4, 8),  # Slurm: as many nodes as that takes
        (["-N", "2", "-n", "8", "--ntasks-per-node=4"], 2, 4, 8),
        (["-N", "3-3"], 3, 1, 3),
        (["--nodes=4", "--ntasks=4"], 4, 1, 4),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else str(v),
)
def test_task_shapes(options: list[str], nodes: int, per_node: int, ntasks: int) -> None:
    m = manifest(*options)
    assert m["nodes"] == nodes
    assert (m["batch"]["ntasks_per_node"], m["batch"]["ntasks"]) == (per_node, ntasks)
    assert parse_manifest(m).to_spec().nodes == nodes


@pytest.mark.parametrize(
    ("options", "says"),
    [
        (["-n", "5", "-N", "2"], "-n 5 over -N 2: Corral runs the same number of tasks"),
        (["-n", "6", "--ntasks-per-node=4"], "-n 6, -N 2 and --ntasks-per-node 4 disagree"),
        (["-N", "2", "-n", "8", "--ntasks-per-node=2"], "disagree"),
        (["-N", "2-4"], "-N 2-4: Corral starts a job on a fixed number of nodes; give one (-N 4)"),
        (["-N", "2-"], "-N 2-: a node count"),
        (["-N", "many"], "-N many: a node count"),
        (["-N", "0"], "-N 0: at least 1"),
        (["-n", "0"], "-n 0: at least 1"),
        (["--ntasks-per-node=0"], "--ntasks-per-node 0: at least 1"),
        (["-c", "0"], "-c 0: at least 1"),
        (["-n", "lots"], "invalid int value"),
    ],
)
def test_bad_task_shapes_are_refused(options: list[str], says: str) -> None:
    assert says in refused(*options)


def test_cpus_per_task_ask_for_each_nodes_share() -> None:
    m = manifest("-N", "2", "--ntasks-per-node=4", "-c", "2")
    assert m["batch"]["cpus_per_task"] == 2
    assert m["resources"] == {"cpus": 8}


# -- node labels ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "labels"),
    [
        ("a100&ib", {"a100": "true", "ib": "true"}),
        ("pool=h100", {"pool": "h100"}),
        ("pool=h100 & ib", {"pool": "h100", "ib": "true"}),
        ("a100,ib", {"a100": "true", "ib": "true"}),
    ],
)
def test_constraints_are_node_labels(text: str, labels: dict[str, str]) -> None:
    assert constraint_labels(text) == labels
    assert manifest("-C", text)["node_selector"] == labels


@pytest.mark.parametrize("text", ["a|b", "[rack1|rack2]", "gpu*2", "(a&b)"])
def test_constraints_beyond_and_are_refused(text: str) -> None:
    assert "all hold (a&b, or key=value); |, [], * and () are not supported" in refused("-C", text)


def test_an_empty_constraint_is_refused() -> None:
    assert "no labels" in refused("-C", "&")


# -- the environment --------------------------------------------------------------------

SUBMITTER = {
    "HOME": "/home/alice",
    "PATH": "/usr/bin",
    "DATA": "/scratch/alice",
    "SLURM_JOB_ID": "99",
    "SLURM_CONF": "/etc/slurm.conf",
    "CORRAL_TOKEN": "crt_secret",
    "CORRAL_SERVER": "https://corral:8443",
    "BASH_FUNC_module%%": "() {  eval $(/usr/bin/modulecmd bash $*)\n}",
    "PWD": "/home/alice",
    "OLDPWD": "/",
    "SHLVL": "2",
    "_": "/usr/bin/corral",
}


def test_export_all_is_the_default_without_slurms_corrals_and_the_shells_own() -> None:
    env = manifest(environ=SUBMITTER)["env"]
    assert env == {"HOME": "/home/alice", "PATH": "/usr/bin", "DATA": "/scratch/alice"}
    assert manifest("--export=ALL", environ=SUBMITTER)["env"] == env
    assert manifest("--export=all", environ=SUBMITTER)["env"] == env


def test_export_none() -> None:
    assert manifest("--export=NONE", environ=SUBMITTER)["env"] == {}


def test_export_all_and_more() -> None:
    env = manifest("--export=ALL,X=1,HOME=/tmp", environ=SUBMITTER)["env"]
    assert env == {"HOME": "/tmp", "PATH": "/usr/bin", "DATA": "/scratch/alice", "X": "1"}


def test_export_only_the_named() -> None:
    env = manifest("--export=DATA,PATH,MISSING,Y=2", environ=SUBMITTER)["env"]
    assert env == {"DATA": "/scratch/alice", "PATH": "/usr/bin", "Y": "2"}


def test_a_value_too_long_is_not_exported_and_said() -> None:
    result = batch(environ={"HOME": "/h", "BIG": "x" * (MAX_VALUE + 1)})
    assert result.manifest["env"] == {"HOME": "/h"}
    assert result.warnings == ["not exported (values past 64 KiB): BIG"]


def test_too_many_variables_are_refused() -> None:
    environ = {f"V{i}": "1" for i in range(MAX_ENV + 1)}
    assert "--export=NONE or --export=NAME,... to pass fewer" in refused(environ=environ)
    assert manifest("--export=NONE", environ=environ)["env"] == {}


# -- what Corral cannot honour ----------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "name"),
    [
        (["--exclusive"], "--exclusive"),
        (["-A", "acct"], "--account"),
        (["--account=acct"], "--account"),
        (["--mail-type=END"], "--mail-type"),
        (["--mail-user", "ada@example.org"], "--mail-user"),
        (["-w", "node-01"], "--nodelist"),
        (["-x", "node-01"], "--exclude"),
        (["--begin=now+1hour"], "--begin"),
        (["--mem-per-cpu=4G"], "--mem-per-cpu"),
        (["-k"], "--no-kill"),
        (["-O"], "--overcommit"),
        (["-M", "other"], "--clusters"),
        (["-m", "cyclic"], "--distribution"),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else v,
)
def test_unsupported_options_are_refused_by_name(options: list[str], name: str) -> None:
    assert refused(*options).startswith(f"sbatch: {name}: not supported: {UNSUPPORTED[name]}")


@pytest.mark.parametrize("name", sorted(UNSUPPORTED))
def test_every_unsupported_option_is_named(name: str) -> None:
    assert refused(f"{name}=x").startswith(f"sbatch: {name}: not supported")
    assert refused(script=with_directives(f"#SBATCH {name}")).startswith(f"sbatch: {name}:")


@pytest.mark.parametrize("short", sorted(SHORT_UNSUPPORTED))
def test_every_unsupported_short_option_is_named_by_its_long_name(short: str) -> None:
    assert refused(short, "x").startswith(f"sbatch: {SHORT_UNSUPPORTED[short]}: not supported")


# -- --wrap -----------------------------------------------------------------------------


def test_wrap_writes_the_script() -> None:
    m = manifest("--wrap", "python train.py --lr 0.1", "-J", "w", script=None)
    assert m["batch"]["script"].startswith("#!/bin/sh\n")
    assert m["batch"]["script"].endswith("\npython train.py --lr 0.1\n")
    assert m["command"] == "python train.py --lr 0.1"
    assert m["batch"]["args"] == []
    assert m["name"] == "w"


def test_a_wrapped_job_is_named_wrap_as_in_slurm() -> None:
    assert manifest("--wrap", "true", script=None)["name"] == "wrap"


def test_wrap_and_a_script_exclude_each_other() -> None:
    assert "--wrap and a script file exclude each other" in refused("--wrap", "true")
    given = command_line(["--wrap", "true", "job.sh"])  # `corral sbatch` reads no file then
    with pytest.raises(ValidationError, match="exclude each other \\(got job.sh\\)"):
        parse(None, given, ENV, CWD, "login-1")


def test_no_script_and_no_wrap() -> None:
    with pytest.raises(ValidationError, match="no batch script"):
        parse(None, command_line([]), ENV, CWD, "login-1")


# -- the signal before the time limit ---------------------------------------------------


def test_a_signal_for_the_batch_script() -> None:
    m = manifest("--signal=B:USR1@90", "-t", "10")
    assert m["batch"]["signal"] == "B:USR1@90"
    assert m["time_limit"] == 600


@pytest.mark.parametrize(
    ("options", "says"),
    [
        (["--signal=B:USR1@90"], "the signal comes before the time limit; give one (-t)"),
        (["--signal=B:USR1@90", "-t", "UNLIMITED"], "give one (-t)"),
        (["--signal=USR1@90", "-t", "10"], "without B: Slurm signals the tasks of every job step"),
        (["--signal=B:NOPE", "-t", "10"], "'NOPE' is not a signal name or number"),
        (["--signal=B:USR1@soon", "-t", "10"], "@TIME is a number of seconds"),
    ],
)
def test_bad_signals_are_refused(options: list[str], says: str) -> None:
    assert says in refused(*options)


def test_a_signal_without_b_suggests_it() -> None:
    assert "--signal=B:USR1@90 signals the batch script" in refused("--signal=USR1@90", "-t", "5")


# -- queue, priority, hold, arrays, dependencies, directories, files --------------------


def test_one_partition_is_the_queue() -> None:
    m = manifest("-p", "gpu")
    assert (m["queue"], m["batch"]["partition"]) == ("gpu", "gpu")
    assert "-p a,b: one partition (queue) only" in refused("-p", "a,b")


def test_qos_is_the_priority_class() -> None:
    assert manifest("--qos=high")["priority"] == "high"
    assert manifest("-q", "low")["priority"] == "low"


def test_hold() -> None:
    assert manifest("-H")["hold"] is True
    assert manifest("--hold")["hold"] is True
    assert "hold" not in manifest()


def test_arrays() -> None:
    assert manifest("--array=0-15%4")["array"] == "0-15%4"
    assert manifest("-a", "1,3,5-9:2")["array"] == "1,3,5-9:2"


def test_dependencies() -> None:
    assert manifest("-d", "afterok:12:13")["dependency"] == "afterok:12:13"
    assert manifest("--dependency=singleton")["dependency"] == "singleton"


@pytest.mark.parametrize(
    ("chdir", "workdir"),
    [("out", f"{CWD}/out"), ("/scratch/x", "/scratch/x"), ("../other", "/home/alice/other")],
)
def test_chdir_is_the_workdir(chdir: str, workdir: str) -> None:
    m = manifest("-D", chdir)
    assert m["workdir"] == workdir
    assert m["batch"]["submit_dir"] == CWD  # SLURM_SUBMIT_DIR stays where sbatch ran


def test_output_files_and_their_mode() -> None:
    m = manifest("-o", "out-%j.log", "--error=err-%j.log", "--open-mode=append")
    assert m["batch"]["output"] == "out-%j.log"
    assert m["batch"]["error"] == "err-%j.log"
    assert m["batch"]["open_mode"] == "append"
    assert "invalid choice: 'sideways'" in refused("--open-mode=sideways")


def test_parsable_from_either_place() -> None:
    assert batch("--parsable").parsable
    assert batch(script=with_directives("#SBATCH --parsable")).parsable


# -- corral sbatch's own options --------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "left", "settings"),
    [
        (
            ["-J", "name", "--server", "x", "job.sh", "--server", "y"],
            ["-J", "name", "job.sh", "--server", "y"],
            {"server": "x"},
        ),
        (
            ["--server=https://c:1", "--token", "crt_1", "--json", "-N", "2", "job.sh", "a"],
            ["-N", "2", "job.sh", "a"],
            {"server": "https://c:1", "token": "crt_1", "json": "1"},
        ),
        (["-o", "--json", "job.sh"], ["-o", "--json", "job.sh"], {}),  # -o's value
        (["-N2", "job.sh", "--json"], ["-N2", "job.sh", "--json"], {}),
        (["-H", "--token=t", "job.sh"], ["-H", "job.sh"], {"token": "t"}),
        (["--parsable", "--json", "job.sh"], ["--parsable", "job.sh"], {"json": "1"}),
        (["-", "--server", "y"], ["-", "--server", "y"], {}),  # the script on stdin
        (["--", "job.sh", "--server", "y"], ["--", "job.sh", "--server", "y"], {}),
        (["--wrap", "srun --json x", "--json"], ["--wrap", "srun --json x"], {"json": "1"}),
        ([], [], {}),
    ],
)
def test_client_settings(argv: list[str], left: list[str], settings: dict[str, str]) -> None:
    assert _client_settings(argv) == (left, settings)


@pytest.mark.parametrize("argv", [["--server"], ["-N", "1", "--token"]])
def test_a_client_setting_needs_a_value(argv: list[str]) -> None:
    with pytest.raises(ValidationError, match=r"needs a value"):
        _client_settings(argv)


class _Job(BaseModel):
    id: int
    name: str = "job"


class _Client:
    """What ``corral sbatch`` talks to: records the submitted manifest."""

    submitted: list = []

    def __init__(self, server: str | None, token: str | None) -> None:
        self.where = (server, token)

    def submit(self, manifest: object) -> _Job:
        self.submitted.append((self.where, manifest))
        return _Job(id=41)


@pytest.fixture
def submitted(monkeypatch: pytest.MonkeyPatch, tmp_path) -> list:
    monkeypatch.setattr(_Client, "submitted", [])
    monkeypatch.setattr(sbatch_cli, "client", _Client)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "job.sh").write_text(with_directives("#SBATCH -N 2", "#SBATCH -J from-file"))
    return _Client.submitted


def sbatch_command(*argv: str) -> Result:
    """``corral sbatch ARGV`` (``--export=NONE``: whatever the tests' own environment)."""
    return CliRunner().invoke(sbatch_cli.app, ["--export=NONE", *argv])


def test_corral_sbatch_submits_the_file(submitted: list) -> None:
    result = sbatch_command("--server", "http://s:1", "job.sh", "a")
    assert result.exit_code == 0, result.output
    assert result.output == "Submitted batch job 41\n"
    (where, job), *_ = submitted
    assert where == ("http://s:1", None)
    assert (job.name, job.nodes, job.kind) == ("from-file", 2, "batch")
    assert job.command == ["job.sh", "a"]
    assert job.env == {}


def test_corral_sbatch_parsable_and_json(submitted: list) -> None:
    result = sbatch_command("--parsable", "job.sh")
    assert result.output == "41\n"
    result = sbatch_command("--json", "--wrap", "true")
    assert '"id": 41' in result.output
    assert submitted[-1][1].command == "true"


def test_corral_sbatch_refuses_before_submitting(submitted: list) -> None:
    result = sbatch_command("--exclusive", "job.sh")
    assert isinstance(result.exception, ValidationError)
    assert result.exception.message.startswith("sbatch: --exclusive: not supported")
    result = sbatch_command("missing.sh")
    assert isinstance(result.exception, ValidationError)
    assert result.exception.message.startswith("sbatch: cannot read missing.sh")
    assert submitted == []
