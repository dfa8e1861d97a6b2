"""Metrics as readable tables: Rich for the terminal, the same rows for the HTML report.

``metric_rows`` turns one or more ``Metrics`` into labelled, formatted rows (seconds as
``1h02m``, fractions as percentages; ``n/a`` for a metric the workload cannot give, ``-``
for one without jobs to measure) and, when several configurations are compared, says
which cells are the best of their row. ``metrics_table`` and ``compare_table`` lay those
rows out with Rich; ``corral.sim.report`` lays out the same rows in HTML. Runs with pools
get a ``pools`` section (cost, node-hours, paid and used GPU-hours, provisioning waits;
per pool when there are several), and ``pools_table`` one row per pool.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from rich.table import Table
from rich.text import Text

from corral.core.units import format_duration
from corral.sim.metrics import Metrics, PoolTotals
from corral.sim.result import PoolRecord

Better = Literal["low", "high"] | None
BEST_MARK = " *"
BEST_STYLE = "bold green"


@dataclass(frozen=True)
class MetricRow:
    """One metric across configurations: formatted cells, and the best ones' indexes."""

    section: str
    label: str
    cells: tuple[str, ...]
    best: frozenset[int] = frozenset()


def _count(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def _times(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _number(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 1 or value == 0:
        return f"{value:.2f}"
    return f"{value:.3g}"


def _index(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


_Getter = Callable[[Metrics], float | None]
# (section, label, a Metrics field or a getter, format, which way is better)
_Spec = tuple[str, str, str | _Getter, Callable[[float | None], str], Better]
NOT_APPLICABLE = "n/a"
_SPECS: tuple[_Spec, ...] = (
    ("jobs", "Jobs", "jobs", _count, None),
    ("jobs", "Completed", "completed", _count, "high"),
    ("jobs", "Failed", "failed", _count, "low"),
    ("jobs", "Refused", "refused", _count, None),
    ("jobs", "Unfinished", "unfinished", _count, "low"),
    ("jct", "JCT avg", "avg_jct", format_duration, "low"),
    ("jct", "JCT p50", "p50_jct", format_duration, "low"),
    ("jct", "JCT p95", "p95_jct", format_duration, "low"),
    ("jct", "JCT p99", "p99_jct", format_duration, "low"),
    ("wait", "Wait avg", "avg_wait", format_duration, "low"),
    ("wait", "Wait p50", "p50_wait", format_duration, "low"),
    ("wait", "Wait p95", "p95_wait", format_duration, "low"),
    ("wait", "Wait p99", "p99_wait", format_duration, "low"),
    ("wait", "Slowdown avg", "avg_slowdown", _times, "low"),
    ("cluster", "Makespan", "makespan", format_duration, "low"),
    ("cluster", "GPU utilization", "gpu_utilization", _percent, "high"),
    ("cluster", "Fragmentation avg", "avg_fragmentation", _percent, "low"),
    ("cluster", "Preemptions", "preemptions", _count, "low"),
    ("cluster", "GPU-hours lost", "lost_gpu_hours", _number, "low"),
    ("queues", "GPU-hours", "gpu_hours", _number, None),
)
_FAIRNESS: _Spec = ("queues", "Fairness (Jain)", "fairness", _index, "high")
_BOUNDS: tuple[_Spec, ...] = (
    ("bounds", "SRPT bound on JCT avg", "srpt_lower_bound", format_duration, None),
    ("bounds", "JCT avg / bound", "jct_ratio", _times, "low"),
    ("bounds", "JCT bound, with run times", "jct_lower_bound", format_duration, None),
    ("bounds", "JCT avg / that bound", "jct_bound_ratio", _times, "low"),
    ("bounds", "Makespan bound", "makespan_lower_bound", format_duration, None),
    ("bounds", "Makespan / bound", "makespan_ratio", _times, "low"),
)


def _total(name: str) -> _Getter:
    def getter(m: Metrics) -> float | None:
        return None if m.pools is None else getattr(m.pools, name)

    return getter


def _per_pool(pool: str, name: str) -> _Getter:
    def getter(m: Metrics) -> float | None:
        records = m.pools.by_pool if m.pools is not None else ()
        return next((getattr(r, name) for r in records if r.name == pool), None)

    return getter


def _money(value: float | None) -> str:
    return "-" if value is None else f"{value:,.2f}"


_POOLS: tuple[tuple[str, str, Callable[[float | None], str], Better], ...] = (
    ("Cost", "pool_cost", _money, "low"),
    ("Node-hours", "pool_node_hours", _number, "low"),
    ("Node-hours provisioning", "pool_provisioning_hours", _number, "low"),
    ("GPU-hours paid", "paid_gpu_hours", _number, "low"),
    ("GPU-hours used", "used_gpu_hours", _number, None),
    ("Units provisioned", "pool_units_provisioned", _count, None),
    ("Units interrupted", "pool_units_interrupted", _count, "low"),
    ("Jobs that waited on provisioning", "provisioning_wait_jobs", _count, "low"),
    ("Provisioning wait total", "provisioning_wait_total", format_duration, "low"),
    ("Provisioning wait avg", "provisioning_wait_avg", format_duration, "low"),
)


def _pool_rows(metrics: Sequence[Metrics]) -> list[_Spec]:
    """The pools' totals, and each pool's cost and node-hours when there are several."""
    if all(m.pools is None for m in metrics):
        return []
    rows: list[_Spec] = [("pools", lb, _total(key), f, b) for lb, key, f, b in _POOLS]
    names = sorted({r.name for m in metrics if m.pools for r in m.pools.by_pool})
    if len(names) > 1:
        for pool in names:
            rows.append(("pools", f"Cost, pool {pool}", _per_pool(pool, "cost"), _money, "low"))
            rows.append(
                ("pools", f"Node-hours, pool {pool}", _per_pool(pool, "node_hours"), _number, "low")
            )
    return rows


def _best(values: Sequence[float | None], better: Better) -> frozenset[int]:
    """Indexes of the best values; none when fewer than two are known or all are equal."""
    known = [(i, v) for i, v in enumerate(values) if v is not None]
    if better is None or len(known) < 2:
        return frozenset()
    pick = min if better == "low" else max
    target = pick(v for _, v in known)
    best = frozenset(i for i, v in known if math.isclose(v, target, rel_tol=1e-9, abs_tol=1e-12))
    return frozenset() if len(best) == len(known) else best


def _queue_hours(queues: Sequence[str]) -> _Getter:
    def getter(m: Metrics) -> float:
        hours = dict(m.queue_gpu_hours)
        return sum(hours.get(q, 0.0) for q in queues)

    return getter


def _queue_rows(metrics: Sequence[Metrics], max_queues: int) -> list[_Spec]:
    """GPU-hours per queue; past ``max_queues`` queues, the largest and one row for the rest."""
    totals: dict[str, float] = {}
    for m in metrics:
        for queue, hours in m.queue_gpu_hours:
            totals[queue] = totals.get(queue, 0.0) + hours
    queues, rest = sorted(totals), []
    if len(queues) > max_queues:
        largest = sorted(queues, key=lambda q: (-totals[q], q))
        queues, rest = sorted(largest[: max_queues - 1]), largest[max_queues - 1 :]
    rows: list[_Spec] = [
        ("queues", f"GPU-hours, queue {q}", _queue_hours([q]), _number, None) for q in queues
    ]
    if rest:
        rows.append(
            ("queues", f"GPU-hours, {len(rest)} other queues", _queue_hours(rest), _number, None)
        )
    return rows


def metric_rows(metrics: Sequence[Metrics], max_queues: int = 12) -> list[MetricRow]:
    """Rows for one or several configurations, in display order.

    Per-queue GPU-hours get a row each, up to ``max_queues`` rows: with more queues, the
    ones with the most GPU-hours and one row that sums the others.
    """
    rows = []
    specs = (*_SPECS, *_queue_rows(metrics, max_queues), _FAIRNESS, *_pool_rows(metrics), *_BOUNDS)
    for section, label, key, fmt, better in specs:
        values = [getattr(m, key) if isinstance(key, str) else key(m) for m in metrics]
        cells = tuple(
            NOT_APPLICABLE if isinstance(key, str) and key in m.not_applicable else fmt(v)
            for m, v in zip(metrics, values, strict=True)
        )
        rows.append(MetricRow(section, label, cells, _best(values, better)))
    return rows


def _layout(table: Table, rows: list[MetricRow], mark: bool) -> Table:
    previous = None
    for row in rows:
        if previous is not None and row.section != previous:
            table.add_section()
        previous = row.section
        cells = [
            Text(cell + BEST_MARK, style=BEST_STYLE) if mark and i in row.best else Text(cell)
            for i, cell in enumerate(row.cells)
        ]
        table.add_row(row.label, *cells)
    return table


def metrics_table(metrics: Metrics, title: str) -> Table:
    """One configuration's metrics: a Metric column and a Value column."""
    table = Table(title=title)
    table.add_column("Metric")
    table.add_column("Value", justify="right")
    return _layout(table, metric_rows([metrics]), mark=False)


def compare_table(rows: list[tuple[str, Metrics]], title: str = "Comparison") -> Table:
    """Configurations side by side, one column each; the best value of a row is marked."""
    table = Table(title=title, caption=f"{BEST_MARK.strip()} best of its row")
    table.add_column("Metric")
    for name, _ in rows:
        table.add_column(name, justify="right")
    return _layout(table, metric_rows([m for _, m in rows]), mark=True)


POOL_COLUMNS = (
    "Pool",
    "Min..max",
    "Peak units",
    "Provisioned",
    "Deleted",
    "Interrupted",
    "Node-hours",
    "Provisioning",
    "Cost",
    "GPU-h paid",
    "GPU-h used",
)


def pool_cells(pool: PoolRecord) -> tuple[str, ...]:
    """One pool's row of ``pools_table`` (and of the HTML report's)."""
    return (
        pool.name + (" (spot)" if pool.spot else ""),
        f"{pool.min}..{pool.max}",
        _count(pool.peak_units),
        _count(pool.units_provisioned),
        _count(pool.units_deleted),
        _count(pool.units_interrupted),
        _number(pool.node_hours),
        _number(pool.provisioning_hours),
        _money(pool.cost),
        _number(pool.gpu_hours_paid),
        _number(pool.gpu_hours_used),
    )


def pools_table(totals: PoolTotals, title: str) -> Table:
    """One run's pools, a row each (hours; cost in the pools' ``cost_per_hour`` unit)."""
    table = Table(title=title)
    for i, column in enumerate(POOL_COLUMNS):
        table.add_column(column, justify="left" if i == 0 else "right")
    for pool in totals.by_pool:
        table.add_row(*pool_cells(pool))
    return table
