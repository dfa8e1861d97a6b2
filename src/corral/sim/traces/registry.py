"""``FORMAT:PATH[?key=value&...]`` -> the format's reader -> a ``Workload``.

The formats are a fixed table (no run-time registration): each is a module with a
``read(path, options, seed)`` function and its ``OPTIONS``. Every format also takes
``limit=N``: keep the first N jobs by submit time. A format with a ``gpus_per_node``
option also takes ``gpus_per_node=`` as a keyword: its default for that option.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType

from corral.errors import ValidationError
from corral.sim.traces import gavel, helios, openb, pai2020, philly
from corral.sim.traces.common import check_file, int_option
from corral.sim.workload import Workload

COMMON_OPTIONS = frozenset({"limit"})
PER_NODE = "gpus_per_node"
EXAMPLE = "philly:jobs.csv or openb:pods.csv?nodes=nodes.csv"


@dataclass(frozen=True)
class TraceFormat:
    """A trace format: its name, its reader, the options it takes, what it reads."""

    name: str
    read: Callable[..., Workload]  # (path, options, seed[, *, gpus_per_node])
    options: frozenset[str]
    summary: str

    @property
    def all_options(self) -> frozenset[str]:
        return self.options | COMMON_OPTIONS


FORMATS: Mapping[str, TraceFormat] = MappingProxyType(
    {
        fmt.name: fmt
        for fmt in (
            TraceFormat(
                openb.NAME,
                openb.read,
                openb.OPTIONS,
                "Alibaba GPU 2023 pod list (and node list)",
            ),
            TraceFormat(
                philly.NAME,
                philly.read,
                philly.OPTIONS,
                "CSV job list with timestamp, duration and num_gpus",
            ),
            TraceFormat(
                gavel.NAME,
                gavel.read,
                gavel.OPTIONS,
                "Gavel .trace with its throughput table",
            ),
            TraceFormat(
                pai2020.NAME,
                pai2020.read,
                pai2020.OPTIONS,
                "Alibaba PAI 2020 job and task tables (and machine list)",
            ),
            TraceFormat(
                helios.NAME,
                helios.read,
                helios.OPTIONS,
                "SenseTime Helios cluster_log.csv",
            ),
        )
    }
)


@dataclass(frozen=True)
class TraceSpec:
    """A parsed ``FORMAT:PATH?options`` string."""

    format: TraceFormat
    path: Path
    options: Mapping[str, str]


def parse_trace_spec(spec: str) -> TraceSpec:
    """Split and check ``FORMAT:PATH[?key=value&...]``; the file is not opened here.

    The query starts at the first ``?`` after the format; a path cannot contain ``?``.
    """
    name, colon, rest = spec.partition(":")
    name = name.strip().lower()
    if not colon or not name or not rest.strip():
        raise ValidationError(f"trace {spec!r}: expected FORMAT:PATH, e.g. {EXAMPLE}")
    fmt = FORMATS.get(name)
    if fmt is None:
        raise ValidationError(
            f"trace {spec!r}: unknown format {name!r}; expected one of {', '.join(sorted(FORMATS))}"
        )
    location, _, query = rest.partition("?")
    if not location.strip():
        raise ValidationError(f"trace {spec!r}: expected FORMAT:PATH, e.g. {EXAMPLE}")
    options: dict[str, str] = {}
    for part in query.split("&") if query else ():
        key, equals, value = part.partition("=")
        key = key.strip()
        if not equals or not key:
            raise ValidationError(f"{name} trace: option {part!r}: expected key=value")
        if key not in fmt.all_options:
            raise ValidationError(
                f"{name} trace: unknown option {key!r}; expected one of "
                f"{', '.join(sorted(fmt.all_options))}"
            )
        if key in options:
            raise ValidationError(f"{name} trace: option {key!r} is given twice")
        options[key] = value.strip()
    return TraceSpec(fmt, Path(location.strip()).expanduser(), MappingProxyType(options))


def read_trace(spec: str, seed: int = 0, *, gpus_per_node: int | None = None) -> Workload:
    """The workload of a trace, e.g. ``read_trace("philly:jobs.csv?limit=1000")``.

    ``seed`` matters only where a format shuffles (openb ``arrival=shuffle``).
    ``gpus_per_node`` (the cluster's, from ``cluster_gpus_per_node``) replaces the default
    of the formats that cut jobs into gangs by GPUs per node; the trace's own option
    ``gpus_per_node=N`` still wins. Raises ``ValidationError`` with a one-line reason
    (file, line, what was expected).
    """
    parsed = parse_trace_spec(spec)
    fmt = parsed.format
    limit = int_option(fmt.name, parsed.options, "limit", 0)  # 0: no limit
    check_file(parsed.path, f"{fmt.name} trace")
    options = {k: v for k, v in parsed.options.items() if k not in COMMON_OPTIONS}
    from_cluster = gpus_per_node is not None and PER_NODE in fmt.options and PER_NODE not in options
    if from_cluster:
        workload = fmt.read(parsed.path, options, seed, gpus_per_node=gpus_per_node)
        workload = replace(
            workload, source=f"{workload.source}; {gpus_per_node} GPUs per node (the cluster's)"
        )
    else:
        workload = fmt.read(parsed.path, options, seed)
    if limit and len(workload.jobs) > limit:
        workload = replace(
            workload,
            jobs=workload.jobs[:limit],
            source=f"{workload.source}; first {limit} jobs kept (limit={limit})",
        )
    return workload
