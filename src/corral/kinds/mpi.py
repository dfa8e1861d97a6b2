"""``kind: mpi``: ``mpirun`` (Open MPI) in one launcher task starts the ranks on the job's
nodes through job steps, without ssh; ``mpi4py`` programs run unchanged.

The job's ``nodes`` x ``tasks_per_node`` with its resources are the ranks' slots. The job
becomes two roles, placed as one gang:

- ``worker``: those nodes and resources, a daemon role whose tasks only hold the slots
  (``sleep infinity``) until the job ends;
- ``launcher``: one task, no GPUs, a small CPU share (``mpi.launcher_cpus``), running
  ``corral.kinds.mpi_launch``: mpirun over the worker nodes, whose rsh agent
  (``corral.kinds.mpi_rsh``) starts Open MPI's daemon on each node as a job step. Its exit
  code is the job's.

Every rank sees its node's task environment (SPEC section 4), with ``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE`` set from Open MPI's, and
``CUDA_VISIBLE_DEVICES`` narrowed to its share of the node's GPUs (``bind_gpus``).

Options (``mpi: {...}``): ``ranks`` (default: nodes x tasks_per_node; must divide evenly
over the nodes), ``mpirun_args`` (a list, or a string split as a shell would),
``mpirun`` (the command; default ``mpirun``), ``python`` (the interpreter with Corral on
the nodes; default: the agent's own, else ``python3``), ``bind_gpus`` (default true),
``tcp_interfaces`` (Open MPI's TCP interfaces or CIDRs; default: loopback when every node
of the job has a loopback address, else Open MPI's choice), ``launcher_cpus`` (default 1).
"""

from __future__ import annotations

import ipaddress
import shlex
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from corral.core.job import JobSpec, RoleSpec
from corral.core.resources import GpuKind, GpuRequest
from corral.kinds.base import Launch, TaskContext, check_keys, corral_python, kind_options
from corral.kinds.mpi_launch import Plan

WORKER, LAUNCHER = "worker", "launcher"
# holds a slot until the job ends, pointing `corral logs JOB` (task 0) to the launcher's log
HOLD = (
    "echo \"corral mpi: this task holds MPI slots; the ranks' output is in the launcher's log:"
    ' corral logs $CORRAL_JOB_ID --task $((WORLD_SIZE - 1))"; exec sleep infinity'
)
WORKER_COMMAND = ("/bin/sh", "-c", HOLD)
LOOPBACK = ("127.0.0.0/8",)
MAX_RANKS = 1_000_000
OPTIONS: dict[str, type | tuple] = {
    "ranks": int,
    "mpirun_args": (list, str),
    "mpirun": str,
    "python": str,
    "bind_gpus": bool,
    "tcp_interfaces": (list, str),
    "launcher_cpus": (int, float),
}
DEFAULTS: dict[str, Any] = {
    "mpirun_args": [],
    "mpirun": "mpirun",
    "bind_gpus": True,
    "launcher_cpus": 1,
}
# mpirun options the launcher sets itself, and what to use instead
OWN_ARGS = {
    "-np": "mpi.ranks",
    "--np": "mpi.ranks",
    "-n": "mpi.ranks",
    "-c": "mpi.ranks",
    "--hostfile": "the job's nodes",
    "-hostfile": "the job's nodes",
    "--machinefile": "the job's nodes",
    "-machinefile": "the job's nodes",
    "--host": "the job's nodes",
    "-host": "the job's nodes",
    "-H": "the job's nodes",
}


class MpiKind:
    name = "mpi"
    summary = "mpirun (Open MPI) in a launcher task starts the ranks through job steps, no ssh"

    def options(self, block: Mapping[str, Any]) -> dict[str, Any]:
        check_keys(self.name, block, OPTIONS)
        options = {**DEFAULTS, **block}
        ranks = options.get("ranks")
        if ranks is not None and not 1 <= ranks <= MAX_RANKS:
            raise ValueError(f"mpi.ranks: between 1 and {MAX_RANKS:,} (got {ranks})")
        options["mpirun_args"] = _mpirun_args(options["mpirun_args"])
        for key in ("mpirun", "python"):
            if key in options and (not options[key].strip() or "\0" in options[key]):
                raise ValueError(f"mpi.{key}: must be a command (got {options[key]!r})")
        options["tcp_interfaces"] = _interfaces(options.get("tcp_interfaces", []))
        if not options["tcp_interfaces"]:
            del options["tcp_interfaces"]
        cpus = options["launcher_cpus"]
        if not 0 < cpus <= 1024:
            raise ValueError(f"mpi.launcher_cpus: more than 0, at most 1024 (got {cpus})")
        return options

    def expand(self, spec: JobSpec) -> JobSpec:
        if spec.roles:
            raise ValueError(
                "roles: kind mpi makes its own roles (worker: the ranks' nodes; launcher: "
                "mpirun); give nodes, tasks_per_node and resources at the top level instead"
            )
        if spec.tpu is not None:
            raise ValueError("resources.tpu: kind mpi runs on GPU or CPU nodes, not TPU slices")
        options = {**DEFAULTS, **kind_options(spec)}
        ranks = options.get("ranks") or spec.nodes * spec.tasks_per_node
        if ranks % spec.nodes:
            raise ValueError(
                f"mpi.ranks: {ranks} ranks do not divide evenly over the job's {spec.nodes} "
                f"nodes; give a multiple of {spec.nodes}"
            )
        per_node = ranks // spec.nodes
        gpus = spec.gpus
        if options["bind_gpus"] and gpus.kind is GpuKind.WHOLE and gpus.count % per_node:
            raise ValueError(
                f"mpi.ranks: {ranks} ranks are {per_node} per node, which cannot split each "
                f"node's {gpus.count} GPUs evenly; give ranks that do, or set "
                "mpi.bind_gpus: false (every rank then sees all its node's GPUs)"
            )
        worker = RoleSpec(
            name=WORKER,
            nodes=spec.nodes,
            tasks_per_node=spec.tasks_per_node,
            gpus=gpus,
            gpu_model=spec.gpu_model,
            gpu_memory=spec.gpu_memory,
            cpus=spec.cpus,
            memory=spec.memory,
            command=WORKER_COMMAND,
            daemon=True,
        )
        launcher = RoleSpec(name=LAUNCHER, gpus=GpuRequest(), cpus=float(options["launcher_cpus"]))
        return replace(spec, roles=(worker, launcher))

    def launch(self, task: TaskContext) -> Launch:
        if task.role.name != LAUNCHER:
            return Launch(task.role.command)
        options = {**DEFAULTS, **task.options()}
        workers = [node for node in task.nodes if node.role == WORKER]
        worker_role = task.spec.roles[0] if task.spec.roles else task.spec
        ranks = options.get("ranks") or worker_role.nodes * worker_role.tasks_per_node
        tcp = tuple(options.get("tcp_interfaces") or ())
        if not tcp and all(_loopback(node.address) for node in task.nodes):
            tcp = LOOPBACK  # one machine: Open MPI skips loopback interfaces otherwise
        plan = Plan(
            nodes=tuple(node.name for node in workers),
            ranks=ranks,
            mpirun=options["mpirun"],
            args=tuple(options["mpirun_args"]),
            tcp=tcp,
            bind_gpus=options["bind_gpus"],
        )
        command = task.role.command
        argv = ("/bin/sh", "-c", command) if isinstance(command, str) else tuple(command)
        launcher = corral_python(options.get("python"), "corral.kinds.mpi_launch", "--", *argv)
        return Launch(launcher, plan.to_env())


def _mpirun_args(value: list | str) -> list[str]:
    if isinstance(value, str):
        try:
            value = shlex.split(value)
        except ValueError as exc:
            raise ValueError(f"mpi.mpirun_args: {exc}") from None
    if not all(isinstance(arg, str) and "\0" not in arg for arg in value):
        raise ValueError("mpi.mpirun_args: a list of strings")
    for arg in value:
        name = arg.split("=", 1)[0]
        if name in OWN_ARGS:
            raise ValueError(
                f"mpi.mpirun_args: {name} is set by Corral (from {OWN_ARGS[name]}); "
                "remove it" + (", or set mpi.ranks" if OWN_ARGS[name] == "mpi.ranks" else "")
            )
    return list(value)


def _interfaces(value: list | str) -> list[str]:
    items = value.split(",") if isinstance(value, str) else value
    if not all(isinstance(item, str) for item in items):
        raise ValueError("mpi.tcp_interfaces: a list of interface names or CIDRs")
    found = [item.strip() for item in items if item.strip()]
    for item in found:
        if any(c.isspace() for c in item) or "\0" in item:
            raise ValueError(f"mpi.tcp_interfaces: {item!r} is not an interface name or CIDR")
    return found


def _loopback(address: str) -> bool:
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False
