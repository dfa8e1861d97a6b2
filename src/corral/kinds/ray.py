"""``kind: ray``: a Ray cluster on the job's nodes, the job's command as its driver.

One Ray node per machine of the job (``tasks_per_node`` must be 1). The task of the
``head`` role (rank 0: ``MASTER_ADDR``) runs ``ray start --head`` with the GCS on
``MASTER_PORT``, waits until every Ray node of the job has joined, then runs the job's
command as the Ray driver with ``RAY_ADDRESS`` set (``ray.init()`` needs no arguments);
the driver's exit status is the head task's, hence the job's. Every other role is a
daemon role of Ray workers (``ray start --address``): when the driver ends, the head
stops its Ray node and Corral stops the workers. A worker role's own ``command``, if it
has one, runs beside its Ray node once that node has joined (a sidecar or setup step,
with ``RAY_ADDRESS`` set too); its failure fails the job, its success leaves the Ray
node running.

Each Ray node is declared the task's own allocation: ``--num-gpus`` its GPUs (whose
``CUDA_VISIBLE_DEVICES`` Corral has already narrowed; a shared GPU or a MIG instance is
one GPU to Ray), ``--num-cpus`` the role's ``resources.cpus`` when given (else Ray counts
the machine's), and with ``resources.memory`` Ray's memory and object store split it
(70 / 30). What runs inside the tasks is ``corral.kinds.ray_node``; the control plane
only computes its arguments here (pure).

A job without roles (``nodes: N``) becomes a ``head`` role of one node and a ``worker``
role of ``N - 1`` nodes of the same shape. With roles, the role named ``head`` (one
node) is the head, listed first so that it holds rank 0, and the others are workers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from corral.core.job import JobSpec, RoleSpec
from corral.core.units import parse_duration
from corral.kinds.base import Launch, TaskContext, check_keys, corral_python

HEAD = "head"
WORKER = "worker"
RUNTIME = "corral.kinds.ray_node"
DASHBOARD_PORT = 8265  # Ray's own default
DEFAULT_WAIT = 300.0  # seconds the head waits for every Ray node to join
OBJECT_STORE_SHARE = 0.3  # of a role's resources.memory, as Ray does of a machine's
MIN_OBJECT_STORE = 100 * 1024**2  # below this, Ray's own default is left alone

OPTIONS: dict[str, type | tuple] = {
    "dashboard": bool,
    "dashboard_port": int,
    "wait_for_nodes": (int, float, str),
    "start_args": list,
    "head_args": list,
    "python": str,
}
DEFAULTS: dict[str, Any] = {  # (no dashboard_port: 8265 with the dashboard, else any)
    "dashboard": False,
    "wait_for_nodes": DEFAULT_WAIT,
    "start_args": [],
    "head_args": [],
}


class RayKind:
    name = "ray"
    summary = "a Ray head and workers on the job's nodes; the command runs as the driver"

    def options(self, block: Mapping[str, Any]) -> dict[str, Any]:
        """``ray: {dashboard, dashboard_port, wait_for_nodes, start_args, head_args,
        python}``: see the module docs and ``docs/job-kinds.md``."""
        check_keys(self.name, block, OPTIONS)
        options = {**DEFAULTS, **block}
        options["wait_for_nodes"] = parse_duration(options["wait_for_nodes"])
        for key in ("start_args", "head_args"):
            if not all(isinstance(arg, str) and arg for arg in options[key]):
                raise ValueError(f"ray.{key}: a list of `ray start` arguments (strings)")
        port = options.get("dashboard_port")
        if port is not None and not 1024 <= port <= 65535:
            raise ValueError(f"ray.dashboard_port: {port} is not a port in 1024..65535")
        if "python" in options and not options["python"].strip():
            raise ValueError("ray.python: the interpreter to run Corral's Ray runtime with")
        return options

    def expand(self, spec: JobSpec) -> JobSpec:
        if spec.tpu is not None:
            raise ValueError("kind ray runs on GPU or CPU nodes, not on a TPU slice")
        if not spec.roles:
            _one_per_node("the job", spec.tasks_per_node)
            return replace(spec, roles=default_roles(spec))
        head = next((role for role in spec.roles if role.name == HEAD), None)
        if head is None:
            names = ", ".join(role.name for role in spec.roles)
            raise ValueError(
                f"kind ray: one role must be named {HEAD!r}: the Ray head, which runs the "
                f"driver (roles given: {names})"
            )
        if head.nodes != 1:
            raise ValueError(f"kind ray: the {HEAD} role has one node (got nodes: {head.nodes})")
        for role in spec.roles:
            _one_per_node(f"role {role.name}", role.tasks_per_node)
        workers = tuple(replace(role, daemon=True) for role in spec.roles if role is not head)
        return replace(spec, roles=(replace(head, daemon=False), *workers))

    def launch(self, task: TaskContext) -> Launch:
        options = {**DEFAULTS, **task.options()}
        head = task.role.name == HEAD
        args = list(corral_python(options.get("python"), RUNTIME, HEAD if head else WORKER))
        if head:
            args += ["--nodes", str(task.spec.node_count)]
            port = options.get("dashboard_port")
            if options["dashboard"]:
                args += ["--dashboard", "--dashboard-port", str(port or DASHBOARD_PORT)]
            elif port:
                args += ["--dashboard-port", str(port)]
        args += ["--wait", f"{options['wait_for_nodes']:g}"]
        args += [f"--start-arg={arg}" for arg in start_args(task)]
        extra = [*options["start_args"], *(options["head_args"] if head else [])]
        args += [f"--start-arg={arg}" for arg in extra]
        command = task.role.command if head else _own_command(task)
        if command is not None:
            args += ["--", *_argv(command)]
        env = {
            "RAY_ADDRESS": f"{task.master_addr}:{task.master_port}",
            "RAY_USAGE_STATS_ENABLED": "0",
        }
        return Launch(tuple(args), env)


def default_roles(spec: JobSpec) -> tuple[RoleSpec, ...]:
    """A head of one node and ``nodes - 1`` workers, each of the job's shape."""
    shape = {
        "gpus": spec.gpus,
        "gpu_model": spec.gpu_model,
        "gpu_memory": spec.gpu_memory,
        "cpus": spec.cpus,
        "memory": spec.memory,
    }
    roles = [RoleSpec(HEAD, nodes=1, **shape)]
    if spec.nodes > 1:
        roles.append(RoleSpec(WORKER, nodes=spec.nodes - 1, daemon=True, **shape))
    return tuple(roles)


def start_args(task: TaskContext) -> list[str]:
    """The ``ray start`` arguments that declare ``task``'s allocation."""
    role = task.spec.roles[task.role.index] if task.spec.roles else None
    cpus = role.cpus if role else task.spec.cpus
    memory = role.memory if role else task.spec.memory
    args = [f"--num-gpus={len(task.gpus)}"]
    if cpus is not None:
        args.append(f"--num-cpus={math.floor(cpus)}")
    if memory:
        store = int(memory * OBJECT_STORE_SHARE)
        if store >= MIN_OBJECT_STORE:
            args += [f"--object-store-memory={store}", f"--memory={memory - store}"]
        else:
            args.append(f"--memory={memory}")
    address = next((node.address for node in task.nodes if node.name == task.node), None)
    if address:
        args.append(f"--node-ip-address={address}")
    return args


def _own_command(task: TaskContext) -> tuple[str, ...] | str | None:
    """A worker role's own command (not the job's: that is the driver's)."""
    if not task.spec.roles:
        return None
    return task.spec.roles[task.role.index].command


def _argv(command: tuple[str, ...] | str) -> tuple[str, ...]:
    return ("/bin/sh", "-c", command) if isinstance(command, str) else tuple(command)


def _one_per_node(what: str, tasks_per_node: int) -> None:
    if tasks_per_node != 1:
        raise ValueError(
            f"kind ray: {what} has tasks_per_node {tasks_per_node}, but Ray runs one node per "
            "machine, which holds all the machine's GPUs given to the job and starts its own "
            "worker processes: set tasks_per_node to 1"
        )
