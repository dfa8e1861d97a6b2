"""``--report out.html``: one self-contained HTML file with plots and the metrics table.

Three plots, one line per configuration (overlaid when several): GPUs allocated over time,
pending jobs over time, and the CDF of job completion times (left out when the workload's
times are made up, as ``Workload.timed`` says). With pools, the allocation plot draws the
GPUs paid for over time (fixed and pool nodes) instead of a fixed capacity, and a table
gives each pool's bill. Plots are PNG images made
with matplotlib's Agg renderer (no pyplot, no global backend switch) and embedded as
base64, so the file needs no network and no JavaScript. matplotlib is optional
(``pip install 'corral[report]'``) and imported only here, when a report is written.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from corral.errors import ValidationError
from corral.sim.metrics import Metrics
from corral.sim.render import POOL_COLUMNS, metric_rows, pool_cells
from corral.sim.result import SimResult

_MISSING = "--report needs matplotlib: pip install 'corral[report]'"
_UNITS = (("s", 1.0), ("min", 60.0), ("h", 3600.0), ("days", 86400.0))

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto;
       max-width: 60em; padding: 0 1em; color: #222; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; }
h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ddd; }
.meta { color: #666; margin-top: 0; }
table { border-collapse: collapse; font-variant-numeric: tabular-nums; }
th, td { padding: 0.25em 0.8em; text-align: right; }
th:first-child, td:first-child { text-align: left; }
thead th { border-bottom: 2px solid #444; }
tr.section td { border-top: 1px solid #ccc; }
td.best { font-weight: bold; color: #1a7f37; }
figure { margin: 1em 0; }
figure img { max-width: 100%; }
figcaption, .note { color: #666; font-size: 0.9em; }
"""


def _time_unit(span: float) -> tuple[str, float]:
    """A readable unit for an axis that covers ``span`` seconds."""
    if span <= 120:
        return _UNITS[0]
    if span <= 2 * 3600:
        return _UNITS[1]
    if span <= 3 * 86400:
        return _UNITS[2]
    return _UNITS[3]


def _png(figure: Any) -> str:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(figure)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", metadata={"Software": None})
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _figure(title: str) -> tuple[Any, Any]:
    from matplotlib.figure import Figure

    figure = Figure(figsize=(9, 3.6), dpi=100, layout="constrained")
    axes = figure.add_subplot()
    axes.set_title(title)
    axes.grid(True, alpha=0.3)
    return figure, axes


def _over_time(results: Sequence[tuple[str, SimResult]], what: str) -> str:
    """Step plot of a sample attribute (``allocated_gpus`` or ``pending_jobs``)."""
    title, ylabel = {
        "allocated_gpus": ("GPU allocation over time", "Allocated GPUs"),
        "pending_jobs": ("Queue length over time", "Pending jobs"),
    }[what]
    figure, axes = _figure(title)
    times = [s.time for _, r in results for s in r.samples]
    unit, scale = _time_unit(max(times, default=0.0))
    for name, result in results:
        if result.samples:
            xs = [s.time / scale for s in result.samples]
            ys = [getattr(s, what) for s in result.samples]
            (line,) = axes.step(xs, ys, where="post", label=name, linewidth=1.2)
            paid = [s.paid_gpus for s in result.samples]
            if what == "allocated_gpus" and result.pools:  # what it paid for, over time
                color = line.get_color()
                axes.step(xs, paid, where="post", label=f"{name}: paid", color=color, ls="--")
    if what == "allocated_gpus":
        fixed = [r for _, r in results if not r.pools]
        for capacity in sorted({r.capacity_gpus for r in fixed}):
            axes.axhline(capacity, color="grey", linestyle="--", linewidth=1)
            axes.annotate(
                f"capacity {capacity:g} GPUs",
                (0.0, capacity),
                xycoords=("axes fraction", "data"),
                xytext=(4, 4),
                textcoords="offset points",
                color="grey",
            )
    if not times:
        axes.text(0.5, 0.5, "no samples", transform=axes.transAxes, ha="center")
    if what == "pending_jobs":
        from matplotlib.ticker import MaxNLocator

        axes.yaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_xlabel(f"Time since start ({unit})")
    axes.set_ylabel(ylabel)
    top = max([r.capacity_gpus for _, r in results] if what == "allocated_gpus" else [0.0])
    top = max([top, 1.0, *(getattr(s, what) for _, r in results for s in r.samples)])
    if what == "allocated_gpus" and any(r.pools for _, r in results):  # the paid GPUs
        top = max([1.0, *(s.paid_gpus or s.allocated_gpus for _, r in results for s in r.samples)])
    axes.set_ylim(0, top * 1.08)
    if times:
        axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return _png(figure)


def _jct_cdf(results: Sequence[tuple[str, SimResult]]) -> str:
    figure, axes = _figure("Job completion time CDF")
    jcts = {name: sorted(j.jct for j in r.jobs if j.jct is not None) for name, r in results}
    every = [v for values in jcts.values() for v in values]
    unit, scale = _time_unit(max(every, default=0.0))
    for name, values in jcts.items():
        if values:
            xs = [values[0] / scale] + [v / scale for v in values]
            ys = [0.0] + [(i + 1) / len(values) for i in range(len(values))]
            axes.step(xs, ys, where="post", label=name, linewidth=1.2)
    if every and min(every) > 0 and max(every) / min(every) >= 100:
        axes.set_xscale("log")
    if every:
        axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
    else:
        axes.text(0.5, 0.5, "no completed jobs", transform=axes.transAxes, ha="center")
    axes.set_xlabel(f"Job completion time ({unit})")
    axes.set_ylabel("Fraction of completed jobs")
    axes.set_ylim(0, 1.02)
    return _png(figure)


def _metrics_html(names: Sequence[str], metrics: Sequence[Metrics]) -> str:
    head = "".join(f"<th>{html.escape(n)}</th>" for n in names)
    lines = [f"<table><thead><tr><th>Metric</th>{head}</tr></thead><tbody>"]
    previous = None
    for row in metric_rows(metrics):
        css = ' class="section"' if previous is not None and row.section != previous else ""
        previous = row.section
        cells = "".join(
            f'<td class="best">{html.escape(c)}</td>'
            if i in row.best
            else f"<td>{html.escape(c)}</td>"
            for i, c in enumerate(row.cells)
        )
        lines.append(f"<tr{css}><td>{html.escape(row.label)}</td>{cells}</tr>")
    lines.append("</tbody></table>")
    return "\n".join(lines)


def _pools_html(results: Sequence[tuple[str, SimResult]]) -> str:
    """Each run's pools, a row each; empty without pools."""
    rows = [(name, pool) for name, result in results for pool in result.pools]
    if not rows:
        return ""
    several = len(results) > 1
    head = "".join(
        f"<th>{html.escape(c)}</th>" for c in (("Run",) if several else ()) + POOL_COLUMNS
    )
    lines = [f"\n<h2>Pools</h2>\n<table><thead><tr>{head}</tr></thead><tbody>"]
    for name, pool in rows:
        cells = ((name,) if several else ()) + pool_cells(pool)
        lines.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    note = (
        "A unit is paid from its request to its deletion; provisioning is the part before it "
        "was ready. Cost is node-hours times the pool's cost per hour."
    )
    lines.append(f'</tbody></table>\n<p class="note">{html.escape(note)}</p>')
    return "\n".join(lines)


def _image(data: str, alt: str, caption: str) -> str:
    return (
        f'<figure><img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'
        f"<figcaption>{html.escape(caption)}</figcaption></figure>"
    )


def write_report(
    path: Path, results: list[tuple[str, SimResult, Metrics]], notes: Sequence[str] = ()
) -> None:
    """Write the HTML report of one or several configurations run on the same workload.

    ``notes`` (the workload's) are shown above the metrics. Where the workload's times are
    made up (JCT not applicable), the JCT plot is left out. Raises ``ValidationError``
    when matplotlib is not installed.
    """
    try:
        import matplotlib  # noqa: F401  (optional dependency, checked here)
    except ImportError:
        raise ValidationError(_MISSING) from None

    runs = [(name, result) for name, result, _ in results]
    names = [name for name, _, _ in results]
    configs = "".join(
        f"<li><b>{html.escape(name)}</b>: {result.capacity_gpus:g} GPUs, "
        f"{len(result.jobs):,} jobs, seed {result.seed}</li>"
        for name, result, _ in results
    )
    several = len(results) > 1
    images = [
        _image(
            _over_time(runs, "allocated_gpus"),
            "GPU allocation over time",
            "GPUs held by running jobs; the dashed line is the cluster's capacity (with pools: "
            "the GPUs paid for, fixed and pool nodes).",
        ),
        _image(
            _over_time(runs, "pending_jobs"),
            "Queue length over time",
            "Jobs submitted and waiting to start.",
        ),
    ]
    if not any("avg_jct" in m.not_applicable for _, _, m in results):
        images.append(
            _image(
                _jct_cdf(runs),
                "Job completion time CDF",
                "Fraction of completed jobs that finished within a given time of their submission.",
            )
        )
    title = "Corral simulation report"
    notes_html = "".join(f'<p class="note">{html.escape(n)}</p>' for n in notes)
    subtitle = " vs ".join(names) if several else (names[0] if names else "")
    note = (
        "JCT is end minus submit time of completed jobs; wait is first start minus submit. "
        "The bounds relax the cluster into one server of its total GPUs (pooled SRPT for mean "
        "JCT, arriving work for makespan): no schedule beats them, so ratios are at least 1."
        + (" Best value of each row in bold green." if several else "")
    )
    document = f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{html.escape(title)}: {html.escape(subtitle)}</title>
<style>{_CSS}</style>
</head>
<body>
<h1>{html.escape(title)}</h1>
<p class="meta">{html.escape(subtitle)}</p>
<ul>{configs}</ul>
{notes_html}
<h2>Metrics</h2>
{_metrics_html(names, [m for _, _, m in results])}
<p class="note">{html.escape(note)}</p>{_pools_html(runs)}
<h2>Plots</h2>
{"".join(images)}
</body>
</html>
"""
    path.write_text(document, encoding="utf-8")
