"""Gavel's ``.trace`` files (OSDI'20, derived from Microsoft's Philly trace) with Gavel's
throughput table ``simulation_throughputs.json``.

A trace line has 7 tab-separated fields, ``job_type, command, num_steps_arg,
needs_data_dir, total_steps, arrival_time, scale_factor``, or the 9 of later Gavel
versions, ``job_type, command, num_steps_arg, needs_data_dir, total_steps, scale_factor,
priority_weight, SLO, arrival_time``. Job ``i`` (from 0, in file order) is ``job-i``. It
asks for ``scale_factor`` GPUs (a gang of ``scale_factor / gpus_per_node`` nodes past one
node) and runs ``total_steps / throughput`` seconds, where the throughput is the isolated
one (the ``null`` entry) of ``(job_type, scale_factor)`` on the GPU type ``gpu``.

The table maps GPU type -> ``"('ResNet-18 (batch size 32)', 1)"`` -> ``{"null": steps per
second, "<other job type>": [co-located throughputs]}``. It lacks many pairs that the
Philly traces use (every scale factor above 8, and multi-GPU A3C, CycleGAN and
Recommendation jobs). With ``missing=extrapolate`` (the default) such a job takes the
throughput of the largest measured scale factor below its own, scaled linearly (an
optimistic, perfect scaling), counted in the source text; ``missing=skip`` skips it. A
throughput of 0 (the job does not fit that GPU, e.g. ResNet-50 on a K80) skips the job.

Options: ``throughputs=PATH`` (default ``simulation_throughputs.json`` next to the trace),
``gpu=TYPE`` (a key of the table; default ``v100``), ``gpus_per_node=N`` (default: the
GPUs per node of ``corral sim --cluster``, else 8), ``missing=extrapolate|skip``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator, Mapping
from pathlib import Path

from corral.errors import ValidationError
from corral.sim.traces.common import (
    GPUS_PER_NODE,
    JobMaker,
    Row,
    choice_option,
    fail,
    gang,
    int_option,
    number,
    path_option,
    read_table,
    read_text,
)
from corral.sim.workload import Workload

NAME = "gavel"
OPTIONS = frozenset({"throughputs", "gpu", "gpus_per_node", "missing"})
DEFAULT_THROUGHPUTS = "simulation_throughputs.json"
DEFAULT_GPU = "v100"
FIELDS_7 = (
    "job_type",
    "command",
    "num_steps_arg",
    "needs_data_dir",
    "total_steps",
    "arrival_time",
    "scale_factor",
)
FIELDS_9 = (
    "job_type",
    "command",
    "num_steps_arg",
    "needs_data_dir",
    "total_steps",
    "scale_factor",
    "priority_weight",
    "slo",
    "arrival_time",
)
_KEY = re.compile(r"^\('(.*)', (\d+)\)$")

Throughputs = dict[tuple[str, int], float]


def read(
    path: Path, options: Mapping[str, str], seed: int = 0, *, gpus_per_node: int = GPUS_PER_NODE
) -> Workload:
    """The workload of the trace at ``path``; ``gpus_per_node`` is the default of the
    option of that name (the cluster's, when ``corral sim`` is given one)."""
    table_path = path_option(options, "throughputs", path, DEFAULT_THROUGHPUTS)
    if table_path is None:
        raise ValidationError(
            f"{NAME} trace: no throughput table: expected {DEFAULT_THROUGHPUTS} next to "
            f"{path} or the option throughputs=PATH"
        )
    tables = read_throughputs(table_path)
    gpu = choice_option(NAME, options, "gpu", sorted(tables), DEFAULT_GPU)
    table = tables[gpu]
    per_node = int_option(NAME, options, "gpus_per_node", gpus_per_node)
    missing = choice_option(NAME, options, "missing", ("extrapolate", "skip"), "extrapolate")

    maker = JobMaker(NAME, path)
    count = 0
    for index, row in enumerate(_rows(path)):
        count += 1
        job_type = row.get("job_type")
        if not job_type:
            raise row.error("job_type", "a job type such as 'ResNet-18 (batch size 32)'")
        steps = number(row, "total_steps", whole=True)
        scale = int(number(row, "scale_factor", minimum=1, whole=True))
        arrival = number(row, "arrival_time")
        throughput = table.get((job_type, scale))
        if throughput is None:
            if missing == "skip":
                maker.skip(f"no {gpu} throughput")
                continue
            throughput = _extrapolate(table, job_type, scale)
            if throughput is None:
                maker.skip(f"no {gpu} throughput")
                continue
            maker.notes[f"{gpu} throughputs extrapolated from a smaller scale factor"] += 1
        if throughput <= 0:
            maker.skip(f"cannot run on {gpu}")
            continue
        maker.add(
            row,
            name=f"job-{index}",
            submit=arrival,
            duration=steps / throughput,
            shape=gang(scale, per_node),
            command=f"{job_type}: {row.get('command')}".strip(": "),
        )
    extra = f"gpu={gpu}; throughputs {table_path.name}"
    return maker.workload(count, extra=extra)


def _rows(path: Path) -> Iterator[Row]:
    """The trace's lines; the layout (7 or 9 fields) is the first line's."""
    first = next((line for line in read_text(path, f"{NAME} trace").splitlines() if line), "")
    columns = FIELDS_9 if first.count("\t") == len(FIELDS_9) - 1 else FIELDS_7
    _, rows = read_table(path, f"{NAME} trace", columns=columns, delimiter="\t")
    return rows


def _extrapolate(table: Throughputs, job_type: str, scale: int) -> float | None:
    """The throughput of the largest measured scale below ``scale``, scaled linearly."""
    measured = [s for (t, s) in table if t == job_type and s < scale]
    if not measured:
        return None
    base = max(measured)
    return table[(job_type, base)] * scale / base


def read_throughputs(path: Path) -> dict[str, Throughputs]:
    """GPU type -> (job type, scale factor) -> isolated throughput (steps per second)."""
    try:
        data = json.loads(read_text(path, f"{NAME} throughput table"))
    except json.JSONDecodeError as exc:
        raise fail(path, f"not valid JSON: {exc.msg}", exc.lineno) from None
    if not isinstance(data, dict) or not data:
        raise fail(path, "expected an object of GPU types (k80, p100, v100)")
    tables: dict[str, Throughputs] = {}
    for gpu, jobs in data.items():
        if not isinstance(jobs, dict):
            raise fail(path, f"{gpu}: expected an object of job types")
        table: Throughputs = {}
        for key, entry in jobs.items():
            match = _KEY.match(key)
            isolated = entry.get("null") if isinstance(entry, dict) else None
            if match is None or not isinstance(isolated, int | float) or isolated < 0:
                raise fail(
                    path,
                    f"{gpu}: {key}: expected \"('JOB TYPE', SCALE)\": "
                    '{"null": steps per second, ...}',
                )
            if math.isfinite(isolated):
                table[(match.group(1), int(match.group(2)))] = float(isolated)
        tables[gpu] = table
    return tables
