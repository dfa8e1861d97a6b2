"""Philly-style job lists: a CSV with a header naming at least a submit time, a run time and
a GPU count, as the job lists derived from Microsoft's Philly trace come (Tiresias' and
Gavel's inputs, ``60_job.csv`` and the like).

Columns, in lower case (the first alias present wins; other columns are ignored):

- submit time: ``timestamp``, ``submit_time``, ``submitted_time``, ``submission_time``,
  ``arrival_time`` or ``time``: seconds, or date-times such as ``2017-10-03 14:00:00``;
- run time: ``duration``, ``run_time``, ``runtime`` or ``running_time``, in seconds;
- GPUs: ``num_gpus``, ``num_gpu``, ``gpus``, ``gpu_num`` or ``gpu``: a whole number, or a
  fraction below one; 0 is a CPU-only job;
- optional: the name (``job_id``, ``jobid``, ``name``, ``job_name`` or ``id``), the queue
  (``vc``, ``virtual_cluster`` or ``user``), CPUs (``num_cpus``, ``cpus`` or ``cpu_num``,
  for the whole job) and who submitted it (``user``).

A job with more GPUs than a node has is a gang of ``ceil(gpus / gpus_per_node)`` nodes
with the GPUs split evenly (16 -> 2 x 8, 12 -> 2 x 6); where they do not divide, each
node gets the rounded-up share (9 -> 2 x 5), counted in the source text. Rows with an
empty submit or run time are skipped and counted.

Options: ``gpus_per_node=N`` (default: the GPUs per node of ``corral sim --cluster``,
else 8); ``queue=COLUMN`` to take the queue from that
column, or ``queue=none`` for one ``default`` queue.
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
    timestamp,
)
from corral.sim.workload import Workload

NAME = "philly"
OPTIONS = frozenset({"gpus_per_node", "queue"})
SUBMIT = ("timestamp", "submit_time", "submitted_time", "submission_time", "arrival_time", "time")
DURATION = ("duration", "run_time", "runtime", "running_time")
GPUS = ("num_gpus", "num_gpu", "gpus", "gpu_num", "gpu")
JOB_NAME = ("job_id", "jobid", "name", "job_name", "id")
QUEUE = ("vc", "virtual_cluster", "user")
CPUS = ("num_cpus", "cpus", "cpu_num")


def read(
    path: Path, options: Mapping[str, str], seed: int = 0, *, gpus_per_node: int = GPUS_PER_NODE
) -> Workload:
    """The workload of the trace at ``path``; ``gpus_per_node`` is the default of the
    option of that name (the cluster's, when ``corral sim`` is given one)."""
    header, rows = read_table(path, f"{NAME} trace")
    submit_col = find_column(header, SUBMIT, path)
    duration_col = find_column(header, DURATION, path)
    gpus_col = find_column(header, GPUS, path)
    name_col = maybe_column(header, JOB_NAME)
    cpus_col = maybe_column(header, CPUS)
    user_col = maybe_column(header, ("user",))
    queue_col = queue_column(options, header, QUEUE, path)
    per_node = int_option(NAME, options, "gpus_per_node", gpus_per_node)

    maker = JobMaker(NAME, path)
    count = 0
    for index, row in enumerate(rows):
        count += 1
        submit = timestamp(row, submit_col)
        if submit is None:
            maker.skip("no submit time")
            continue
        if not row.get(duration_col):
            maker.skip("no run time")
            continue
        duration = number(row, duration_col)
        gpus = number(row, gpus_col)
        if gpus > 1 and gpus != int(gpus):
            raise row.error(gpus_col, "a whole number of GPUs, or a fraction below one")
        shape = gang(gpus, per_node)
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
        )
    return maker.workload(count)
