"""``srun`` inside a Corral batch job (``corral sbatch``): a job step over the job's nodes
with Slurm's task environment.

``corral.kinds.batch_run`` puts this on the batch script's ``PATH`` as ``srun``. It works
out the step's nodes and tasks from Slurm's options and the job's (``SLURM_NTASKS``,
``SLURM_NTASKS_PER_NODE``, ``SLURM_JOB_NODELIST``), starts a job step
(``Client.start_step``) whose tasks see ``SLURM_PROCID``/``RANK``, ``SLURM_LOCALID``/
``LOCAL_RANK``, ``SLURM_NODEID``/``NODE_RANK``, ``SLURM_STEP_ID`` and the step's counts,
and the caller's environment (``--export``, default all but what is the caller's own node's
or task's), relays their output (``-l`` prefixes the task id), and exits with the step's
exit code. Ctrl-C, SIGTERM and SIGHUP cancel the step.
"""

from __future__ import annotations

import argparse
import os
import sys

from corral.core.hostlist import compress, expand
from corral.errors import CorralError
from corral.kinds.batch import exported, tasks_per_node

# Variables of the caller that are its own node's or task's: never passed to a step's
# tasks (each has its node's own, or the step sets them).
LOCAL = frozenset(
    {
        "CUDA_VISIBLE_DEVICES",
        "NVIDIA_VISIBLE_DEVICES",
        "ROCR_VISIBLE_DEVICES",
        "CORRAL_NODE",
        "CORRAL_PYTHON",
        "CORRAL_CA_CERT",
        "CORRAL_JOB_TOKEN",
        "CORRAL_SIM_LOAD_FILE",
        "CORRAL_GPU_FRACTION",
        "CORRAL_GPU_MEMORY",
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
        "CORRAL_ROLE_RANK",
        "HOSTNAME",
        "SLURMD_NODENAME",
        "SLURM_GPUS_ON_NODE",
        "TPU_WORKER_ID",
        "TMPDIR",
        "PWD",
        "OLDPWD",
        "SHLVL",
        "_",
    }
)
# set per task by the step's command (below), from the CORRAL_STEP_* variables
PER_TASK = (
    ("SLURM_PROCID", "$CORRAL_STEP_RANK"),
    ("RANK", "$CORRAL_STEP_RANK"),
    ("SLURM_LOCALID", "$CORRAL_STEP_LOCAL_RANK"),
    ("LOCAL_RANK", "$CORRAL_STEP_LOCAL_RANK"),
    ("SLURM_NODEID", "$CORRAL_STEP_NODE_RANK"),
    ("NODE_RANK", "$CORRAL_STEP_NODE_RANK"),
    ("GROUP_RANK", "$CORRAL_STEP_NODE_RANK"),
    ("SLURM_STEP_ID", "$((CORRAL_STEP_ID - 1))"),
    ("SLURM_STEPID", "$((CORRAL_STEP_ID - 1))"),
)
IGNORED = {"--cpu-bind", "--cpu_bind", "--gpu-bind", "--distribution", "-m", "--mpi"}


class SrunError(CorralError):
    """Options srun cannot honour in this job."""


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="srun",
        description="Run a job step across the nodes of this Corral batch job (Slurm's srun).",
        allow_abbrev=False,
        exit_on_error=False,
    )
    p.add_argument("-N", "--nodes", type=_count, help="nodes of the step (default: as needed)")
    p.add_argument("-n", "--ntasks", type=_count, help="tasks of the step")
    p.add_argument("--ntasks-per-node", type=_count, help="tasks on each node")
    p.add_argument("-c", "--cpus-per-task", type=_count, help="told to the tasks")
    p.add_argument("-w", "--nodelist", help="the step's nodes (a hostlist)")
    p.add_argument("-x", "--exclude", help="nodes not to use (a hostlist)")
    p.add_argument("-D", "--chdir", help="working directory of the tasks")
    p.add_argument("--export", default="ALL", help="ALL (default), NONE or NAME[=VALUE],...")
    p.add_argument("-l", "--label", action="store_true", help="prefix lines with the task id")
    p.add_argument("-q", "--quiet", action="store_true", help="no messages, only output")
    p.add_argument(
        "-K",
        "--kill-on-bad-exit",
        action="store_true",
        help="a task exiting non-zero stops the others (=0 turns it off)",
    )
    p.add_argument("-u", "--unbuffered", action="store_true", help="(output is always relayed)")
    p.add_argument("-J", "--job-name", help="(accepted; steps have no names)")
    p.add_argument("--exact", action="store_true", help="(accepted; steps share the job's)")
    p.add_argument("--overlap", action="store_true", help="(accepted; steps always overlap)")
    p.add_argument(
        "-O", "--overcommit", action="store_true", help="more tasks per node than the job's"
    )
    for name in sorted(IGNORED):
        p.add_argument(name, dest=name.strip("-").replace("-", "_"), help="(accepted, ignored)")
    p.add_argument("command", nargs=argparse.REMAINDER, help="the program and its arguments")
    return p


def _count(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError(text)
    return value


def layout(args: argparse.Namespace, env: dict[str, str]) -> tuple[list[str], int]:
    """The step's nodes (in the job's node order) and tasks per node, as Slurm would
    derive them; ``SrunError`` when Corral cannot start that shape."""
    job_nodes = expand(env.get("SLURM_JOB_NODELIST", "")) or [env.get("CORRAL_NODE", "")]
    nodes = list(job_nodes)
    if args.nodelist:
        wanted = _hosts("-w", args.nodelist)
        unknown = [n for n in wanted if n not in job_nodes]
        if unknown:
            raise SrunError(
                f"-w {args.nodelist}: {', '.join(unknown)} not in this job's nodes "
                f"({compress(job_nodes, sort=False)})"
            )
        nodes = [n for n in job_nodes if n in set(wanted)]
    if args.exclude:
        gone = set(_hosts("-x", args.exclude))
        nodes = [n for n in nodes if n not in gone]
    if not nodes:
        raise SrunError("no nodes left for the step (-w/-x)")
    job_per_node = int(env.get("SLURM_NTASKS_PER_NODE") or 1)
    count, ntasks, per_node = args.nodes, args.ntasks, args.ntasks_per_node
    if count is None and ntasks is not None:
        count = min(len(nodes), -(-ntasks // (per_node or job_per_node)))
        if args.nodelist and not per_node:
            count = len(nodes) if ntasks >= len(nodes) else ntasks
    if count is None:
        count = len(nodes)
    if count > len(nodes):
        raise SrunError(
            f"-N {count}: the step may use {len(nodes)} node{'s' * (len(nodes) > 1)} of this "
            f"job ({compress(nodes, sort=False)})"
        )
    if ntasks is not None:
        try:
            per_node = tasks_per_node(ntasks, count, per_node, f"{count} nodes")
        except ValueError as exc:
            raise SrunError(f"{exc} (or -N)" if ntasks % count else str(exc)) from None
    per_node = per_node or job_per_node
    if per_node > job_per_node and not getattr(args, "overcommit", False):
        raise SrunError(
            f"{per_node} tasks per node: more than the job's {job_per_node} "
            f"(SLURM_NTASKS_PER_NODE); use more nodes (-N), or -O/--overcommit"
        )
    return nodes[:count], per_node


def _hosts(option: str, hostlist: str) -> list[str]:
    try:
        return expand(hostlist)
    except ValueError as exc:
        raise SrunError(f"{option} {hostlist}: {exc}") from None


def forwarded(export: str, env: dict[str, str]) -> dict[str, str]:
    """The caller's variables a step's tasks get (``--export``): all but those of its own
    node or task (``LOCAL``, ``CORRAL_STEP_*``), none, or the named ones (``NAME`` or
    ``NAME=VALUE``, after ``ALL,`` also all)."""

    def shared(name: str, _value: str) -> bool:
        return name not in LOCAL and not name.startswith(("CORRAL_STEP_", "BASH_FUNC_"))

    return exported(export, env, shared)[0]


def step_env(nodes: list[str], per_node: int, cpus: int | None) -> dict[str, str]:
    """What every task of the step sees alike: its counts and node list."""
    ntasks = len(nodes) * per_node
    nodelist = compress(nodes, sort=False)
    env = {
        "SLURM_NTASKS": str(ntasks),
        "SLURM_NPROCS": str(ntasks),
        "SLURM_STEP_NUM_TASKS": str(ntasks),
        "SLURM_NTASKS_PER_NODE": str(per_node),
        "SLURM_TASKS_PER_NODE": f"{per_node}(x{len(nodes)})" if len(nodes) > 1 else str(per_node),
        "SLURM_STEP_TASKS_PER_NODE": f"{per_node}(x{len(nodes)})"
        if len(nodes) > 1
        else str(per_node),
        "SLURM_NNODES": str(len(nodes)),
        "SLURM_STEP_NUM_NODES": str(len(nodes)),
        "SLURM_NODELIST": nodelist,
        "SLURM_STEP_NODELIST": nodelist,
        "WORLD_SIZE": str(ntasks),
        "LOCAL_WORLD_SIZE": str(per_node),
        "NNODES": str(len(nodes)),
    }
    if cpus:
        env["SLURM_CPUS_PER_TASK"] = str(cpus)
    return env


def step_command(command: list[str]) -> list[str]:
    """``command`` run through ``/bin/sh``, which first sets each task's own ids."""
    exports = " ".join(f'{name}="{value}"' for name, value in PER_TASK)
    return ["/bin/sh", "-c", f'export {exports}; exec "$@"', "srun", *command]


def main(argv: list[str]) -> int:
    from corral.cli.steps import StepRelay, StepSignals, follow_step
    from corral.client import Client
    from corral.client.config import resolve_job

    p = parser()
    try:
        args, unknown = p.parse_known_args(_kill_flags(argv))
    except (argparse.ArgumentError, ValueError) as exc:
        print(f"srun: error: {exc}", file=sys.stderr)
        return 1
    unknown = [u for u in unknown if u.startswith("-")]
    if unknown:
        print(
            f"srun: error: {unknown[0]}: not an option Corral's srun supports "
            "(see `srun --help` and docs/slurm.md)",
            file=sys.stderr,
        )
        return 1
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        print("srun: error: no command to run: srun [OPTIONS] COMMAND [ARGS...]", file=sys.stderr)
        return 1
    if not os.environ.get("CORRAL_JOB_TOKEN"):
        print(
            "srun: error: not inside a Corral job; `corral run [options] -- COMMAND` "
            "starts one and streams its output",
            file=sys.stderr,
        )
        return 1
    env = dict(os.environ)
    try:
        nodes, per_node = layout(args, env)
        job = resolve_job()
        client = Client(job.server, job.token)
        guard = StepSignals()
        variables = {**forwarded(args.export, env), **step_env(nodes, per_node, args.cpus_per_task)}
        step = client.start_step(
            job.job_id,
            step_command(command),
            nodes,
            per_node,
            variables,
            args.chdir or os.getcwd(),
        )
    except CorralError as exc:
        print(f"srun: error: {exc}", file=sys.stderr)
        return 1
    relay = StepRelay(client, step, sys.stdout, args.label)
    return follow_step(client, step, relay, guard, args.kill_on_bad_exit)


def _kill_flags(argv: list[str]) -> list[str]:
    """``-K``'s value may only be attached (``-K0``, ``--kill-on-bad-exit=1``): as a flag
    for the parser, so that ``srun -K prog`` does not take ``prog`` for it."""
    takes_value = {
        name
        for action in parser()._actions
        if action.nargs is None
        for name in action.option_strings
    }
    out = []
    index = 0
    while index < len(argv):
        arg = argv[index]
        if not arg.startswith("-") or arg == "--":
            return out + argv[index:]
        index += 1
        head, eq, value = arg.partition("=")
        if head == "--kill-on-bad-exit" and eq or arg in ("-K0", "-K1"):
            value = value if eq else arg[2:]
            if value not in ("0", "1"):
                out.append(arg)  # refused by the parser
            elif value == "1":
                out.append("-K")
            continue
        out.append(arg)
        if arg in takes_value and index < len(argv):  # -n 4: its value, not the command
            out.append(argv[index])
            index += 1
    return out


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
