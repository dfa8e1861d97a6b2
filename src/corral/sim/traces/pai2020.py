"""Alibaba PAI cluster-trace-gpu-v2020: the job table (PATH), the task table and, when
present, the machine list. The tables have no header row (a first row repeating the
column names is allowed):

- jobs ``pai_job_table.csv``: ``job_name,inst_id,user,status,start_time,end_time``;
- tasks ``pai_task_table.csv``: ``job_name,task_name,inst_num,status,start_time,end_time,
  plan_cpu,plan_mem,plan_gpu,gpu_type``;
- machines ``pai_machine_spec.csv``: ``machine,gpu_type,cap_cpu,cap_mem,cap_gpu``.

Times are epoch seconds. A job submits at its ``start_time`` and runs ``end_time -
start_time`` (``duration=tasks``: from its first task's start to its last task's end);
jobs without those times, or without tasks, are skipped and counted. Its queue is its
``user``, also kept as who submitted it (``SimJob.user``).

A job's demand is the sum over its tasks of ``inst_num`` instances of ``plan_gpu``
percent of a GPU (100 = one GPU, 50 = half), ``plan_cpu`` percent of a core and
``plan_mem`` GB. Below one GPU it is a share of one GPU; above, a whole number of GPUs
(a fractional total rounds up, counted in the source text) on one node, or a gang of
``ceil(gpus / gpus_per_node)`` nodes past one node, CPUs and memory split evenly. The
``gpu_type`` of its GPU tasks (``T4``, ``V100``, ``MISC``...) becomes a ``gpu_model``
constraint, as a glob when they differ.

The machine list (``machines=``) becomes the cluster: nodes named by ``machine`` with
``cap_gpu`` GPUs of ``gpu_type``, ``cap_cpu`` CPUs and ``cap_mem`` GB.

Options: ``tasks=PATH`` (default ``pai_task_table.csv`` next to the job table),
``machines=PATH`` (default ``pai_machine_spec.csv`` there, when present; ``none``: no
cluster), ``queue=user|none``, ``states=A,B`` (job statuses to keep, e.g.
``states=Terminated``), ``duration=job|tasks``, ``gpus_per_node=N`` (default: the GPUs per
node of ``corral sim --cluster``, else 8; a job table's own machine list does not set it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from corral.core.node import Node
from corral.errors import ValidationError
from corral.sim.traces.common import (
    DEFAULT_QUEUE,
    GB,
    GPUS_PER_NODE,
    NO_QUEUE,
    JobMaker,
    choice_option,
    cluster_summary,
    fail,
    gang,
    int_option,
    make_node,
    model_glob,
    number,
    path_option,
    read_table,
    states_option,
    timestamp,
)
from corral.sim.workload import Workload

NAME = "pai2020"
OPTIONS = frozenset({"tasks", "machines", "queue", "states", "duration", "gpus_per_node"})
JOB_COLUMNS = ("job_name", "inst_id", "user", "status", "start_time", "end_time")
TASK_COLUMNS = (
    "job_name",
    "task_name",
    "inst_num",
    "status",
    "start_time",
    "end_time",
    "plan_cpu",
    "plan_mem",
    "plan_gpu",
    "gpu_type",
)
MACHINE_COLUMNS = ("machine", "gpu_type", "cap_cpu", "cap_mem", "cap_gpu")
DEFAULT_TASKS = "pai_task_table.csv"
DEFAULT_MACHINES = "pai_machine_spec.csv"
CPU_ONLY = "CPU"  # the gpu_type of machines without GPUs


@dataclass(slots=True)
class _Demand:
    """The summed demand of one job's tasks."""

    gpus: float = 0.0
    cpus: float = 0.0
    memory: float = 0.0  # GB
    models: tuple[str, ...] = ()
    first_start: float | None = None
    last_end: float | None = None


def read(
    path: Path, options: Mapping[str, str], seed: int = 0, *, gpus_per_node: int = GPUS_PER_NODE
) -> Workload:
    """The workload of the trace at ``path``; ``gpus_per_node`` is the default of the
    option of that name (the cluster's, when ``corral sim`` is given one)."""
    tasks_path = path_option(options, "tasks", path, DEFAULT_TASKS)
    if tasks_path is None:
        raise ValidationError(
            f"{NAME} trace: no task table: expected {DEFAULT_TASKS} next to {path} "
            "or the option tasks=PATH"
        )
    machines_path = path_option(options, "machines", path, DEFAULT_MACHINES)
    queue = choice_option(NAME, options, "queue", ("user", NO_QUEUE), "user")
    source = choice_option(NAME, options, "duration", ("job", "tasks"), "job")
    states = states_option(options)
    per_node = int_option(NAME, options, "gpus_per_node", gpus_per_node)

    demands, task_models = _read_tasks(tasks_path)
    nodes = read_machines(machines_path) if machines_path else None
    universe = task_models | {d.model for n in nodes or () for d in n.devices}

    maker = JobMaker(NAME, path)
    globs: dict[tuple[str, ...], tuple[str | None, bool]] = {(): (None, True)}
    _, jobs = read_table(path, f"{NAME} job table", columns=JOB_COLUMNS)
    count = 0
    for row in jobs:
        count += 1
        name = row.get("job_name")
        if not name:
            raise row.error("job_name", "a job name")
        if states is not None and row.get("status").lower() not in states:
            maker.skip("status not kept")
            continue
        demand = demands.get(name)
        if demand is None:
            maker.skip("no tasks")
            continue
        submit = timestamp(row, "start_time")
        if source == "tasks":
            start, end = demand.first_start, demand.last_end
        else:
            start, end = submit, timestamp(row, "end_time")
        if maker.span(start, end) is None:
            continue
        shape = gang(demand.gpus, per_node)
        if demand.models not in globs:
            globs[demand.models] = model_glob(demand.models, universe)
        model, exact = globs[demand.models]
        if not exact:
            maker.notes["gpu_type sets narrowed to their first model"] += 1
        maker.add(
            row,
            name=name,
            submit=submit if submit is not None else start,
            duration=end - start,
            queue=row.get("user") if queue == "user" else DEFAULT_QUEUE,
            shape=shape,
            gpu_model=model,
            cpus=demand.cpus / shape.nodes,
            memory=demand.memory * GB / shape.nodes,
            user=row.get("user"),
        )
    extra = f"tasks {tasks_path.name}"
    if nodes is not None and machines_path is not None:
        extra += f"; {cluster_summary(machines_path, nodes)}"
    return maker.workload(count, extra=extra, nodes=nodes)


def _read_tasks(path: Path) -> tuple[dict[str, _Demand], set[str]]:
    """Each job's summed demand, and every GPU type the task table names."""
    _, rows = read_table(path, f"{NAME} task table", columns=TASK_COLUMNS)
    demands: dict[str, _Demand] = {}
    models: set[str] = set()
    for row in rows:
        model = row.get("gpu_type")
        if model:
            models.add(model)
        job = row.get("job_name")
        count = number(row, "inst_num", whole=True, default=1)
        demand = demands.setdefault(job, _Demand())
        gpus = number(row, "plan_gpu", default=0) / 100 * count
        demand.gpus += gpus
        demand.cpus += number(row, "plan_cpu", default=0) / 100 * count
        demand.memory += number(row, "plan_mem", default=0) * count
        if gpus and model and model not in demand.models:
            demand.models += (model,)
        start, end = timestamp(row, "start_time"), timestamp(row, "end_time")
        if start is not None and (demand.first_start is None or start < demand.first_start):
            demand.first_start = start
        if end is not None and (demand.last_end is None or end > demand.last_end):
            demand.last_end = end
    return demands, models


def read_machines(path: Path) -> tuple[Node, ...]:
    """The machine list as nodes."""
    _, rows = read_table(path, f"{NAME} machine list", columns=MACHINE_COLUMNS)
    nodes: list[Node] = []
    seen: set[str] = set()
    for row in rows:
        name = row.get("machine")
        if not name:
            raise row.error("machine", "a machine name")
        if name in seen:
            raise fail(path, f"machine: {name!r} is listed twice", row.line)
        seen.add(name)
        gpus = int(number(row, "cap_gpu", whole=True, default=0))
        model = row.get("gpu_type")
        if gpus and (not model or model == CPU_ONLY):
            raise row.error("gpu_type", f"the GPU model of a machine with {gpus} GPUs")
        nodes.append(
            make_node(
                name,
                gpus,
                model,
                cpus=number(row, "cap_cpu"),
                memory=int(number(row, "cap_mem") * GB),
            )
        )
    if not nodes:
        raise ValidationError(f"{path}: the machine list has no machines")
    return tuple(nodes)
