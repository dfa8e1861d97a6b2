"""``sbatch``'s options (SPEC section 9), from ``#SBATCH`` lines and the command line, as
a Corral job manifest of kind ``batch``. Pure: the caller passes the environment, the
working directory and the host name.

Options Slurm has and Corral cannot honour are refused with a message naming them
(:data:`UNSUPPORTED`), unknown ones likewise: nothing is submitted.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from corral.core.resources import parse_gpus
from corral.errors import ValidationError
from corral.kinds.batch import MAX_VALUE, exported, parse_signal, tasks_per_node

MAX_ENV = 1024  # the manifest's limit on variables
# never exported from the submitter: Corral's own (its API token), Slurm's (the job's are
# set anew), the shell's bookkeeping, and exported functions
NOT_EXPORTED = re.compile(r"^(SLURM_|CORRAL_|BASH_FUNC_)|^(PWD|OLDPWD|SHLVL|_)$")
UNSUPPORTED: dict[str, str] = {
    "--exclusive": "Corral does not reserve whole nodes yet; ask for what the job uses "
    "(--gres=gpu:N, -c, --mem)",
    "--account": "Corral has no accounts; a queue (-p) or priority class (--qos) instead",
    "--mail-type": "Corral sends no mail; `corral wait JOB` or `corral jobs --watch`",
    "--mail-user": "Corral sends no mail; `corral wait JOB` or `corral jobs --watch`",
    "--nodelist": "Corral places jobs itself; -C with node labels instead",
    "--exclude": "Corral places jobs itself; -C with node labels instead",
    "--begin": "Corral starts jobs as soon as they fit; submit later, or -H and release",
    "--reservation": "Corral has no reservations",
    "--nice": "--qos (a priority class) instead",
    "--mem-per-cpu": "--mem (per node) instead",
    "--mem-per-gpu": "--mem (per node) instead",
    "--cpus-per-gpu": "-c (per task) instead",
    "--time-min": "Corral has no flexible time limits; -t",
    "--deadline": "Corral has no deadlines",
    "--licenses": "Corral has no licenses",
    "--clusters": "Corral has one cluster per server; CORRAL_SERVER",
    "--no-kill": "a Corral job always ends when a node is lost (and is requeued with --requeue)",
    "--overcommit": "Corral never overcommits",
    "--switches": "topology: leaf in a manifest (corral submit -f) instead",
    "--tmp": "Corral does not manage node disk",
    "--distribution": "Corral places tasks in blocks, node by node",
}
SHORT_UNSUPPORTED = {"-A": "--account", "-w": "--nodelist", "-x": "--exclude", "-M": "--clusters"}
SHORT_UNSUPPORTED.update({"-k": "--no-kill", "-O": "--overcommit", "-m": "--distribution"})
DIRECTIVE = re.compile(r"^#SBATCH(\s|$)")
SLURM_TIME = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")
MEMORY = re.compile(r"^(\d+(?:\.\d+)?)([KMGT]?)B?$", re.IGNORECASE)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise ValidationError(f"sbatch: {message}")


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="corral sbatch", allow_abbrev=False, add_help=False)
    add = p.add_argument
    add("-h", "--help", action="store_true", help="show this help")
    add("-J", "--job-name", help="the job's name (default: the script's file name)")
    add("-p", "--partition", help="the queue")
    add("-N", "--nodes", help="nodes (N, or N-N)")
    add("-n", "--ntasks", type=int, help="tasks (srun's default; a multiple of the nodes)")
    add("--ntasks-per-node", type=int, help="tasks per node")
    add("-c", "--cpus-per-task", type=int, help="CPUs of each task")
    add("--gres", help="gpu[:TYPE]:N per node")
    add("--gpus-per-node", help="[TYPE:]N")
    add("-G", "--gpus", help="[TYPE:]N for the whole job (split evenly over its nodes)")
    add("--gpus-per-task", help="[TYPE:]N")
    add("--mem", help="memory per node: SIZE[K|M|G|T] (default M); 0: no limit")
    add("-t", "--time", help="time limit: MIN, MIN:SEC, H:M:S, D-H, D-H:M, D-H:M:S")
    add("-a", "--array", help="job array: 0-99%%10, 1,3,5-9:2")
    add("-d", "--dependency", help="afterok:ID[:ID],afterany:ID,...; singleton")
    add("-o", "--output", help="the script's output file (%%j %%A %%a %%x %%N %%t %%u %%%%)")
    add("-e", "--error", help="its error file (default: the output file)")
    add("--open-mode", choices=("truncate", "append"), help="truncate (default) or append")
    add("--requeue", action="store_const", const=True, dest="requeue", help="requeue")
    add("--no-requeue", action="store_const", const=False, dest="requeue", help="fail instead")
    add("--signal", help="B:SIG[@SECONDS]: signal the script before the time limit")
    add("-C", "--constraint", help="node labels: KEY=VALUE or NAME (NAME=true), joined by &")
    add("-q", "--qos", help="priority class")
    add("--export", help="ALL (default), NONE, or [ALL,]NAME[=VALUE],...")
    add("-D", "--chdir", help="working directory of the script (default: here)")
    add("-H", "--hold", action="store_true", default=None, help="submit held")
    add("--wrap", help="a command line to run instead of a script")
    add("--parsable", action="store_true", default=None, help="print only the job id")
    for name in UNSUPPORTED:
        add(name, nargs="?", const="", dest=_refused(name), help=argparse.SUPPRESS)
    for short, name in SHORT_UNSUPPORTED.items():
        add(short, nargs="?", const="", dest=_refused(name), help=argparse.SUPPRESS)
    add("script", nargs=argparse.REMAINDER, help="the batch script and its arguments")
    return p


def _refused(name: str) -> str:
    return "refused_" + name.strip("-").replace("-", "_")


@dataclass
class Batch:
    """What ``corral sbatch`` submits: the manifest, and how to report it."""

    manifest: dict[str, Any]
    parsable: bool = False
    warnings: list[str] = field(default_factory=list)


def directives(script: str) -> list[str]:
    """The options of the ``#SBATCH`` lines before the script's first command. As in
    Slurm, a directive starts at the beginning of its line: an indented one is a comment."""
    args: list[str] = []
    for number, line in enumerate(script.splitlines(), 1):
        text = line.strip()
        if not text:
            continue
        if not text.startswith("#"):
            break
        if DIRECTIVE.match(line):
            try:
                args.extend(shlex.split(text[len("#SBATCH") :], comments=True))
            except ValueError as exc:
                raise ValidationError(f"sbatch: line {number}: {exc}: {text}") from None
    return args


def command_line(argv: list[str]) -> argparse.Namespace:
    """The command line's options, up to the script; ``script``: it and its arguments."""
    known, rest = parser().parse_known_args(argv)
    if rest:
        raise ValidationError(f"sbatch: {rest[0]}: {_unknown(rest[0])}")
    if known.script[:1] == ["--"]:  # ends the options, as getopt's: the script follows
        known.script = known.script[1:]
    return known


def parse(
    script: str | None,
    given: argparse.Namespace,
    environ: Mapping[str, str],
    cwd: str,
    host: str,
) -> Batch:
    """The job of ``script`` (its text; None with ``--wrap``) with the command line's
    options ``given`` (:func:`command_line`), which win over its ``#SBATCH`` lines."""
    from_script, rest = parser().parse_known_args(directives(script) if script else [])
    if rest or from_script.script:
        first = (rest or from_script.script)[0]
        raise ValidationError(f"sbatch: {first} (in an #SBATCH line): {_unknown(first)}")
    options = {**vars(from_script)}
    options.update({k: v for k, v in vars(given).items() if v is not None})
    for key, value in options.items():
        if key.startswith("refused_") and value is not None:
            name = "--" + key.removeprefix("refused_").replace("_", "-")
            raise ValidationError(f"sbatch: {name}: not supported: {UNSUPPORTED[name]}")
    name, *args = given.script or [None]
    return _manifest(options, script, name, args, environ, cwd, host)


def _unknown(option: str) -> str:
    if not option.startswith("-"):
        return "not an option: #SBATCH lines hold options only"
    return "not an sbatch option Corral knows (corral sbatch --help lists them)"


def _manifest(
    o: dict[str, Any],
    script: str | None,
    script_name: str | None,
    rest: list[str],
    environ: Mapping[str, str],
    cwd: str,
    host: str,
) -> Batch:
    warnings: list[str] = []
    if o["wrap"] is not None:
        if script is not None or script_name is not None:
            raise ValidationError(
                "sbatch: --wrap and a script file exclude each other"
                + (f" (got {script_name})" if script_name is not None else "")
            )
        script = f"#!/bin/sh\n# This script was created by corral sbatch --wrap.\n\n{o['wrap']}\n"
        command: list[str] | str = o["wrap"]
    elif script is None:
        raise ValidationError("sbatch: no batch script: corral sbatch [OPTIONS] SCRIPT [ARGS]")
    else:
        command = [os.path.basename(script_name or "") or "sbatch", *rest]
    nodes, per_node, ntasks = _tasks(_nodes(o["nodes"]), o["ntasks"], o["ntasks_per_node"])
    workdir = os.path.normpath(os.path.join(cwd, o["chdir"])) if o["chdir"] else cwd
    batch: dict[str, Any] = {
        "script": script,
        "args": list(rest) if o["wrap"] is None else [],
        "ntasks": ntasks,
        "ntasks_per_node": per_node,
        "submit_dir": cwd,
        "submit_host": host,
    }
    for key in ("output", "error", "open_mode", "signal", "partition"):
        if o.get(key):
            batch[key] = o[key]
    if o["cpus_per_task"] is not None:
        if o["cpus_per_task"] < 1:
            raise ValidationError(f"sbatch: -c {o['cpus_per_task']}: at least 1")
        batch["cpus_per_task"] = o["cpus_per_task"]
    resources: dict[str, Any] = {}
    gpus = _gpus(o, nodes, per_node)
    if gpus is not None:
        resources["gpus"] = gpus
    if o["cpus_per_task"]:
        resources["cpus"] = o["cpus_per_task"] * per_node
    if o["mem"] is not None:
        memory = _memory(o["mem"])
        if memory:
            resources["memory"] = memory
    manifest: dict[str, Any] = {
        "kind": "batch",
        "command": command,
        "nodes": nodes,
        "workdir": workdir,
        "env": _exported(o["export"], environ, warnings),
        "batch": batch,
    }
    if resources:
        manifest["resources"] = resources
    # Slurm's default name: the script's file name, "sbatch" for stdin, "wrap"
    manifest["name"] = o["job_name"] or ("wrap" if o["wrap"] is not None else command[0])
    if o["partition"]:
        if "," in o["partition"]:
            raise ValidationError(
                f"sbatch: -p {o['partition']}: one partition (queue) only; Corral does not "
                "pick among several"
            )
        manifest["queue"] = o["partition"]
    if o["qos"]:
        manifest["priority"] = o["qos"]
    if o["time"] is not None:
        limit = slurm_time(o["time"])
        if limit is not None:
            manifest["time_limit"] = limit
    if o["signal"]:
        try:
            parse_signal(o["signal"])
        except ValueError as exc:
            raise ValidationError(f"sbatch: {exc}") from None
        if "time_limit" not in manifest:
            raise ValidationError(
                f"sbatch: --signal={o['signal']}: the signal comes before the time limit; "
                "give one (-t)"
            )
    if o["requeue"] is not None:
        manifest["requeue"] = o["requeue"]
    if o["dependency"]:
        manifest["dependency"] = o["dependency"]
    if o["hold"]:
        manifest["hold"] = True
    if o["array"]:
        manifest["array"] = o["array"]
    if o["constraint"]:
        manifest["node_selector"] = constraint_labels(o["constraint"])
    return Batch(manifest, bool(o["parsable"]), warnings)


def _nodes(text: str | None) -> int | None:
    if text is None:
        return None
    low, dash, high = text.partition("-")
    try:  # N- (no most) is no count either
        first, last = int(low), int(high if dash else low)
    except ValueError:
        raise ValidationError(f"sbatch: -N {text}: a node count (N or N-N)") from None
    if first != last:
        raise ValidationError(
            f"sbatch: -N {text}: Corral starts a job on a fixed number of nodes; "
            f"give one (-N {last})"
        )
    if first < 1:
        raise ValidationError(f"sbatch: -N {text}: at least 1")
    return first


def _tasks(nodes: int | None, ntasks: int | None, per_node: int | None) -> tuple[int, int, int]:
    """Nodes, tasks per node and tasks, as Slurm derives them (``-n 8
    --ntasks-per-node=4``: 2 nodes); Corral runs as many tasks on each node."""
    for name, value in (("-n", ntasks), ("--ntasks-per-node", per_node)):
        if value is not None and value < 1:
            raise ValidationError(f"sbatch: {name} {value}: at least 1")
    count = nodes or 1
    if ntasks is None:
        per_node = per_node or 1
        return count, per_node, per_node * count
    if nodes is None and per_node:
        count = -(-ntasks // per_node)
    try:
        return count, tasks_per_node(ntasks, count, per_node, f"-N {count}"), ntasks
    except ValueError as exc:
        raise ValidationError(f"sbatch: {exc}") from None


def _gpus(o: Mapping[str, Any], nodes: int, per_node: int) -> str | int | None:
    """GPUs per node (``MODEL:N`` with a type) from whichever GPU option was given."""
    given = [k for k in ("gres", "gpus_per_node", "gpus", "gpus_per_task") if o.get(k)]
    if len(given) > 1:
        names = ", ".join("--" + k.replace("_", "-") for k in given)
        raise ValidationError(f"sbatch: {names}: give the GPUs once")
    if not given:
        return None
    key = given[0]
    text = o[key]
    if key == "gres":
        parts = [g for g in text.split(",") if g]
        other = [g for g in parts if g.split(":")[0] != "gpu"]
        if other:
            raise ValidationError(
                f"sbatch: --gres={text}: only gpu is a resource Corral knows ({other[0]})"
            )
        if len(parts) != 1:
            raise ValidationError(f"sbatch: --gres={text}: one gpu entry")
        fields = parts[0].split(":")[1:]
        if len(fields) == 1 and not fields[0].isdigit():
            fields.append("1")  # gpu:TYPE: the count defaults to 1, as Slurm's
        text = ":".join(fields) if fields else "1"
    model, _, count = text.rpartition(":")
    try:
        number = int(count)
    except ValueError:
        option = "--" + key.replace("_", "-")
        raise ValidationError(f"sbatch: {option}={o[key]}: a GPU count ([TYPE:]N)") from None
    if key == "gpus":
        if number % nodes:
            raise ValidationError(
                f"sbatch: --gpus={o[key]}: {number} GPUs do not split evenly over {nodes} nodes"
            )
        number //= nodes
    elif key == "gpus_per_task":
        number *= per_node
    value = f"{model}:{number}" if model else number
    try:
        parse_gpus(value)
    except ValueError as exc:
        raise ValidationError(f"sbatch: --{key.replace('_', '-')}={o[key]}: {exc}") from None
    return value


def _memory(text: str) -> int:
    match = MEMORY.match(text.strip())
    if not match:
        raise ValidationError(f"sbatch: --mem={text}: SIZE[K|M|G|T], e.g. 64G (default M)")
    unit = match.group(2).upper() or "M"
    return int(float(match.group(1)) * 1024 ** "KMGT".index(unit) * 1024)


def slurm_time(text: str) -> float | None:
    """Seconds in Slurm's time format; None for ``UNLIMITED``/``INFINITE`` and for zero
    (Slurm: "a time limit of zero requests that no time limit be imposed")."""
    value = text.strip()
    if value.upper() in ("UNLIMITED", "INFINITE", "-1"):
        return None
    match = SLURM_TIME.match(value)
    if not match:
        raise ValidationError(
            f"sbatch: -t {text}: MIN, MIN:SEC, H:M:S, D-H, D-H:M or D-H:M:S (e.g. 1-12:00:00)"
        )
    days, a, b, c = (int(g) if g else None for g in match.groups())
    if days is not None:  # D-H[:M[:S]]
        seconds = days * 86400 + (a or 0) * 3600 + (b or 0) * 60 + (c or 0)
    elif c is not None:  # H:M:S
        seconds = (a or 0) * 3600 + (b or 0) * 60 + c
    elif b is not None:  # MIN:SEC
        seconds = (a or 0) * 60 + b
    else:  # MIN
        seconds = (a or 0) * 60
    return float(seconds) if seconds else None


def constraint_labels(text: str) -> dict[str, str]:
    """``-C``: node labels that must all match, ``KEY=VALUE`` or ``NAME`` (``NAME=true``),
    joined by ``&`` (or ``,``)."""
    if any(c in text for c in "|[]*()"):
        raise ValidationError(
            f"sbatch: -C {text}: Corral matches node labels that must all hold "
            "(a&b, or key=value); |, [], * and () are not supported"
        )
    labels = {}
    for item in re.split(r"[&,]", text):
        item = item.strip()
        if not item:
            continue
        key, eq, value = item.partition("=")
        labels[key.strip()] = value.strip() if eq else "true"
    if not labels:
        raise ValidationError(f"sbatch: -C {text!r}: no labels")
    return labels


def _exported(export: str | None, environ: Mapping[str, str], warnings: list[str]) -> dict:
    """The submitter's variables the job gets (``--export``; Slurm's default is ALL)."""
    env, too_long = exported(export, environ, lambda name, _: not NOT_EXPORTED.search(name))
    if too_long:
        warnings.append(
            f"not exported (values past {MAX_VALUE // 1024} KiB): {', '.join(too_long)}"
        )
    if len(env) > MAX_ENV:
        raise ValidationError(
            f"sbatch: the environment holds {len(env):,} variables, more than a job's "
            f"{MAX_ENV:,}: --export=NONE or --export=NAME,... to pass fewer"
        )
    return env
