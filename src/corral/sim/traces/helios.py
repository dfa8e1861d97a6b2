"""SenseTime Helios job logs (SC'21, ``cluster_log.csv`` of the Venus, Earth, Saturn, Uranus
and Philly clusters): ``job_id,user,vc,jobname,gpu_num,cpu_num,node_num,state,
submit_time,start_time,end_time,duration,queue``.

Times are date-times (``2020-04-01 08:00:05``, read as UTC) or epoch seconds. A job
submits at ``submit_time`` and runs ``end_time - start_time``, or ``duration`` where the
log has no start and end columns; a job that never started (an empty ``start_time``) or
has no end is skipped and counted. Its queue is ``vc``. The log's ``queue`` column is
the time the job waited, not a queue name, and is ignored.

``gpu_num`` GPUs (and ``cpu_num`` CPUs) are split evenly over ``node_num`` nodes; where
they do not divide, each node gets the rounded-up share (3 GPUs on 2 nodes -> 2 x 2),
counted in the source text. Without ``node_num`` (or 0), a job past ``gpus_per_node``
GPUs is a gang of ``ceil(gpu_num / gpus_per_node)`` nodes.

The ``jobname`` column, when present, is the job's command (what run-time predictions
look at; the ``job_id`` names it).

Options: ``queue=COLUMN`` (default ``vc``) or ``queue=none``; ``states=A,B`` keeps only
jobs in these states (e.g. ``states=COMPLETED``); ``gpus_per_node=N`` (default: the GPUs
per node of ``corral sim --cluster``, else 8). A job's ``user`` is kept (``SimJob.user``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from corral.sim.traces.common import (
    DEFAULT_QUEUE,
    GPUS_PER_NODE,
    JobMaker,
    find_column,
    gang,
    int_option,
    maybe_column,
    number,
    optional_number,
    queue_column,
    read_table,
    states_option,
    timestamp,
)
from corral.sim.workload import Workload

NAME = "helios"
OPTIONS = frozenset({"queue", "states", "gpus_per_node"})
QUEUE = ("vc", "user")


def read(
    path: Path, options: Mapping[str, str], seed: int = 0, *, gpus_per_node: int = GPUS_PER_NODE
) -> Workload:
    """The workload of the trace at ``path``; ``gpus_per_node`` is the default of the
    option of that name (the cluster's, when ``corral sim`` is given one)."""
    header, rows = read_table(path, f"{NAME} trace")
    find_column(header, ("submit_time",), path)
    find_column(header, ("gpu_num",), path)
    timed = "start_time" in header and "end_time" in header
    if not timed:
        find_column(header, ("duration",), path)
    name_col = maybe_column(header, ("job_id", "jobname"))
    jobname_col = maybe_column(header, ("jobname",))
    nodes_col = maybe_column(header, ("node_num",))
    cpus_col = maybe_column(header, ("cpu_num",))
    user_col = maybe_column(header, ("user",))
    state_col = maybe_column(header, ("state", "status"))
    queue_col = queue_column(options, header, QUEUE, path)
    states = states_option(options)
    per_node = int_option(NAME, options, "gpus_per_node", gpus_per_node)

    maker = JobMaker(NAME, path)
    count = 0
    for index, row in enumerate(rows):
        count += 1
        if states is not None and row.get(state_col).lower() not in states:
            maker.skip("state not kept")
            continue
        submit = timestamp(row, "submit_time")
        if submit is None:
            maker.skip("no submit time")
            continue
        if timed:
            start, end = timestamp(row, "start_time"), timestamp(row, "end_time")
            span = maker.span(start, end, no_start="never started")
            if span is None:
                continue
            duration = span
        else:
            if not row.get("duration"):
                maker.skip("no end time")
                continue
            duration = number(row, "duration")
        gpus = number(row, "gpu_num", whole=True)
        nodes = optional_number(row, nodes_col, whole=True)
        shape = gang(gpus, per_node, nodes=int(nodes) if nodes else None)
        cpus = optional_number(row, cpus_col)
        maker.add(
            row,
            name=row.get(name_col) or f"job-{index}",
            submit=submit,
            duration=duration,
            queue=row.get(queue_col) or DEFAULT_QUEUE,
            shape=shape,
            cpus=cpus / shape.nodes if cpus is not None else None,
            user=row.get(user_col),
            command=row.get(jobname_col) or None,
        )
    return maker.workload(count)
