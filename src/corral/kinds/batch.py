"""``kind: batch``: a Slurm batch script (``corral sbatch``), run once on the job's first
node while the job's other nodes are held for the ``srun`` calls inside it.

The job is ``nodes`` nodes of one task each, every task holding its whole node's share of
the job (all its GPUs, CPUs and memory). Rank 0 runs the script (through
``corral.kinds.batch_run``: output files, ``srun``/``scontrol`` on ``PATH``, the signal
before the time limit); the other tasks only hold their node (``sleep infinity``) and
serve it: the job's outcome is the script's (``JobSpec.first_task_decides``). ``srun``
in the script starts job steps on the held nodes.

Options (``batch: {...}``, written by ``corral sbatch``): ``script`` (its text, required),
``args`` (its arguments), ``output``/``error`` (file patterns, ``%j %A %a %x %N %t %u %n
%s %%``; ``error`` defaults to the output file), ``open_mode`` (``truncate`` or
``append``), ``ntasks``, ``ntasks_per_node`` and ``cpus_per_task`` (what Slurm tells the
script and ``srun``'s defaults), ``submit_dir`` (``SLURM_SUBMIT_DIR``), ``signal``
(``[B:]SIG[@SECONDS]``, sent to the script that many seconds before the time limit),
``partition`` and ``submit_host`` (told to the script).
"""

from __future__ import annotations

import signal as signals
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from corral.core.job import JobSpec
from corral.kinds.base import Launch, TaskContext, check_keys, corral_python, kind_options

MAX_SCRIPT = 256 * 1024  # bytes of script text (Slurm's default limit is 4 MB)
CHUNK = 64 * 1024  # the script travels as arguments of at most this many characters
HOLD = (
    "/bin/sh",
    "-c",
    "echo \"corral sbatch: this task holds $CORRAL_NODE for the batch script's srun steps;"
    " the script's output is in its output file\"; exec sleep infinity",
)
OPTIONS: dict[str, type | tuple] = {
    "script": str,
    "args": list,
    "output": str,
    "error": str,
    "open_mode": str,
    "ntasks": int,
    "ntasks_per_node": int,
    "cpus_per_task": int,
    "submit_dir": str,
    "signal": str,
    "partition": str,
    "submit_host": str,
}
MAX_VALUE = 65_536  # characters of one variable of a job's (or a step's) env
DEFAULT_SIGNAL_TIME = 60  # seconds before the time limit, as Slurm's --signal


class BatchKind:
    name = "batch"
    summary = "a Slurm batch script (corral sbatch): runs on the first node; srun starts steps"

    def options(self, block: Mapping[str, Any]) -> dict[str, Any]:
        check_keys(self.name, block, OPTIONS)
        options = dict(block)
        script = options.get("script")
        if not script:
            raise ValueError("batch.script: the batch script's text is required")
        if len(script.encode()) > MAX_SCRIPT:
            raise ValueError(f"batch.script: at most {MAX_SCRIPT // 1024} KiB")
        if "\0" in script:
            raise ValueError("batch.script: a text file, not binary (it holds a NUL byte)")
        if not script.startswith("#!"):
            raise ValueError(
                "batch.script: this does not look like a batch script: the first line must "
                "start with #! followed by the path to an interpreter (#!/bin/bash)"
            )
        args = options.get("args", [])
        if not all(isinstance(a, str) and "\0" not in a for a in args):
            raise ValueError("batch.args: a list of strings")
        if options.get("open_mode", "truncate") not in ("truncate", "append"):
            raise ValueError("batch.open_mode: truncate or append")
        for key in ("ntasks", "ntasks_per_node", "cpus_per_task"):
            if key in options and options[key] < 1:
                raise ValueError(f"batch.{key}: at least 1 (got {options[key]})")
        if "signal" in options:
            parse_signal(options["signal"])
        return options

    def expand(self, spec: JobSpec) -> JobSpec:
        if spec.roles:
            raise ValueError("roles: a batch job (corral sbatch) has no roles")
        if spec.tpu is not None:
            raise ValueError("resources.tpu: a batch job runs on GPU or CPU nodes")
        if spec.tasks_per_node != 1:
            raise ValueError(
                "tasks_per_node: a batch job holds each node with one task; give the tasks "
                "srun starts as batch.ntasks_per_node"
            )
        options = kind_options(spec)
        if "script" not in options:
            raise ValueError("batch.script: the batch script's text is required")
        return replace(spec, first_task_decides=True)

    def launch(self, task: TaskContext) -> Launch:
        options = task.options()
        env = slurm_batch_env(task, options)
        if task.rank != 0:
            return Launch(HOLD, env)
        script = options["script"]
        chunks = [script[i : i + CHUNK] for i in range(0, len(script), CHUNK)]
        args = options.get("args", [])
        command = corral_python(None, "corral.kinds.batch_run", str(len(chunks)), *chunks, *args)
        env.update(
            CORRAL_BATCH_OUTPUT=options.get("output", ""),
            CORRAL_BATCH_ERROR=options.get("error", ""),
            CORRAL_BATCH_OPEN_MODE=options.get("open_mode", "truncate"),
        )
        if "signal" in options and task.spec.time_limit:
            number, seconds, _ = parse_signal(options["signal"])
            after = max(task.spec.time_limit - seconds, 0)
            env["CORRAL_BATCH_SIGNAL"] = f"{number}@{after:.15g}"  # :g keeps only 6 digits
        return Launch(command, env)


def slurm_batch_env(task: TaskContext, options: Mapping[str, Any]) -> dict[str, str]:
    """What Slurm tells a batch script beside section 9's variables: the task counts it
    was submitted with (``srun``'s defaults), the partition and the submit host."""
    nodes = task.spec.nodes
    per_node = options.get("ntasks_per_node") or -(-options.get("ntasks", nodes) // nodes)
    ntasks = options.get("ntasks") or per_node * nodes
    env = {
        "SLURM_NTASKS": str(ntasks),
        "SLURM_NPROCS": str(ntasks),
        "SLURM_NTASKS_PER_NODE": str(per_node),
        "SLURM_TASKS_PER_NODE": f"{per_node}(x{nodes})" if nodes > 1 else str(per_node),
        "SLURM_JOB_PARTITION": options.get("partition") or task.spec.queue,
        "SLURM_PROCID": "0",
        "SLURM_LOCALID": "0",
        "SLURM_NODEID": str(task.node_rank),
        "SLURM_CLUSTER_NAME": "corral",
        "SLURM_JOB_QOS": str(task.spec.priority or "normal"),
        "SLURMD_NODENAME": task.node,
        # Slurm's old name, which scripts still read; in a batch job (unlike others) an
        # Open MPI mpirun that takes it for a Slurm allocation launches through our srun
        "SLURM_JOBID": str(task.job_id),
    }
    if task.rank == 0:  # the script is the step's first task: srun's tasks get their own
        env.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE=str(ntasks), LOCAL_WORLD_SIZE=str(per_node))
    if "cpus_per_task" in options:
        env["SLURM_CPUS_PER_TASK"] = str(options["cpus_per_task"])
    if options.get("submit_dir"):
        env["SLURM_SUBMIT_DIR"] = options["submit_dir"]
    if options.get("submit_host"):
        env["SLURM_SUBMIT_HOST"] = options["submit_host"]
    return env


def parse_signal(text: str) -> tuple[int, int, bool]:
    """``[B:]SIG[@SECONDS]`` (Slurm's ``--signal``): signal number, seconds before the
    time limit (default 60), whether only the batch shell gets it (``B:``). ``ValueError``
    when malformed; also for a signal without ``B:``, which Slurm sends to the steps'
    tasks on every node, and Corral cannot (yet)."""
    spec = text.strip()
    batch_only = spec.startswith(("B:", "b:"))
    name, _, when = spec.removeprefix("B:").removeprefix("b:").partition("@")
    try:
        seconds = int(when) if when else DEFAULT_SIGNAL_TIME
    except ValueError:
        raise ValueError(f"--signal={text}: @TIME is a number of seconds") from None
    if not 0 <= seconds <= 65535:
        raise ValueError(f"--signal={text}: @TIME from 0 to 65535 seconds")
    number = signal_number(name)
    if number is None:
        raise ValueError(f"--signal={text}: {name!r} is not a signal name or number")
    if not batch_only:
        raise ValueError(
            f"--signal={text}: without B: Slurm signals the tasks of every job step, which "
            f"Corral cannot do yet; --signal=B:{name}@{seconds} signals the batch script's "
            "shell, which may pass it on (trap ... kill)"
        )
    return number, seconds, batch_only


def signal_number(name: str) -> int | None:
    """``USR1``, ``SIGUSR1`` or ``10`` -> 10; None when it names no signal."""
    if name.isdigit():
        number = int(name)
        return number if 0 < number < signals.NSIG else None
    upper = name.upper()
    found = getattr(signals, upper if upper.startswith("SIG") else "SIG" + upper, None)
    return int(found) if isinstance(found, signals.Signals) else None


def exported(
    export: str | None, environ: Mapping[str, str], everything: Callable[[str, str], bool]
) -> tuple[dict[str, str], list[str]]:
    """Slurm's ``--export`` (``sbatch``'s and ``srun``'s): ``ALL`` (the default when
    ``export`` is empty) gives every variable of ``environ`` that ``everything(name,
    value)`` accepts, ``NONE`` none; the named ones (``NAME`` from ``environ``,
    ``NAME=VALUE`` as given) are added either way. Also returns the variables ``ALL`` left
    out for values too long for a job (``MAX_VALUE``)."""
    items = [item for item in (export or "ALL").split(",") if item]
    out: dict[str, str] = {}
    too_long: list[str] = []
    if "ALL" in {item.upper() for item in items}:
        for name, value in environ.items():
            if not name or "=" in name or not everything(name, value):
                continue
            if len(value) > MAX_VALUE:
                too_long.append(name)
                continue
            out[name] = value
    for item in items:
        if item.upper() in ("ALL", "NONE"):
            continue
        name, eq, value = item.partition("=")
        if eq:
            out[name] = value
        elif name in environ:
            out[name] = environ[name]
    return out, sorted(too_long)


def tasks_per_node(ntasks: int, nodes: int, per_node: int | None, over: str) -> int:
    """Tasks on each of ``nodes`` nodes for ``-n ntasks`` (Corral runs as many on each
    node; Slurm may run uneven counts), checked against ``--ntasks-per-node``; ``over``
    names the nodes in messages (``-N 2``, ``2 nodes``). ``ValueError`` saying what to
    give instead (sbatch and srun alike)."""
    if ntasks % nodes:
        raise ValueError(
            f"-n {ntasks} over {over}: Corral runs the same number of tasks on each node; "
            f"give -n a multiple of {nodes}"
        )
    if per_node is not None and per_node != ntasks // nodes:
        raise ValueError(
            f"-n {ntasks}, -N {nodes} and --ntasks-per-node {per_node} disagree "
            f"({ntasks // nodes} tasks per node)"
        )
    return ntasks // nodes
