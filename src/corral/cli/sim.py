"""``corral sim``: replay a workload through the production scheduler (SPEC section 5)."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from corral.cli.common import Output, OutputOpt, console, err_console, print_json
from corral.errors import ValidationError

if TYPE_CHECKING:
    from corral.core.node import Node
    from corral.core.pools import Pool

app = typer.Typer()


class Checkpoint(StrEnum):
    auto = "auto"
    signal = "signal"
    none = "none"


@app.command()
def sim(
    cluster: Annotated[
        Path | None, typer.Option("--cluster", help="cluster.yaml (SPEC section 3)")
    ] = None,
    jobs: Annotated[
        Path | None, typer.Option("--jobs", help="jobs file, YAML or JSON (SPEC section 5)")
    ] = None,
    trace: Annotated[
        str | None,
        typer.Option(
            "--trace", help="FORMAT:PATH[?options]: openb, philly, gavel, pai2020, helios"
        ),
    ] = None,
    config: Annotated[Path | None, typer.Option("--config", help="scheduler.yaml")] = None,
    compare: Annotated[
        list[Path] | None,
        typer.Option("--compare", help="several scheduler.yaml, side by side (repeatable)"),
    ] = None,
    report: Annotated[
        Path | None, typer.Option("--report", help="write an HTML report with plots")
    ] = None,
    seed: Annotated[int, typer.Option(help="seed for trace sampling (same seed, same output)")] = 0,
    oracle: Annotated[
        bool,
        typer.Option(
            "--oracle",
            help="reveal true run times as runtime_estimate (the shortest-first oracle baseline)",
        ),
    ] = False,
    checkpoint: Annotated[
        Checkpoint,
        typer.Option(
            "--checkpoint",
            help="how preempted jobs without a checkpoint_interval resume: signal (they save "
            "when signalled, then pay a restore time), none (from zero); auto: signal for "
            "traces, none for jobs files",
        ),
    ] = Checkpoint.auto,
    output: OutputOpt = Output.table,
) -> None:
    """Simulate a workload on a declared cluster with the production scheduler."""
    from corral.schemas.config import load_config
    from corral.sim.engine import simulate
    from corral.sim.metrics import compute_metrics, jobs_json, pools_json
    from corral.sim.render import compare_table, metrics_table, pools_table

    declared, pools = _cluster(cluster)
    workload = _workload(jobs, trace, seed, _with_templates(declared, pools))
    nodes = _nodes(declared, workload)
    if checkpoint is Checkpoint.signal or (checkpoint is Checkpoint.auto and trace is not None):
        workload = workload.saving_on_preemption()
    if oracle:
        workload = workload.with_true_runtimes()
    configs = [config] if config else []
    configs += list(compare or [])
    runs = []
    for path in configs or [None]:
        text = path.read_text() if path else None
        name = (path.stem if path else "default") + (" (oracle)" if oracle else "")
        with _progress(output, name, len(workload.jobs)) as tick:
            result = simulate(
                nodes, workload, load_config(text, str(path or "")), name, seed, tick, pools
            )
        runs.append((name, result, compute_metrics(result, timed=workload.timed)))
    notes = list(workload.notes)
    if report is not None:
        from corral.sim.report import write_report

        write_report(report, runs, notes)
    if output is Output.json:
        if len(runs) == 1:
            name, result, metrics = runs[0]
            data = {"jobs": jobs_json(result), "metrics": metrics.to_json(), "notes": notes}
            print_json({**data, **({"pools": pools_json(result)} if pools else {})})
        else:
            configs = [
                {"name": n, "jobs": jobs_json(r), "metrics": m.to_json()}
                | ({"pools": pools_json(r)} if pools else {})
                for n, r, m in runs
            ]
            print_json({"configs": configs, "notes": notes})
    else:
        from rich.text import Text

        console.print(Text(workload.source or "workload", style="bold"))
        for note in notes:
            console.print(Text(f"note: {note}", style="yellow"))
        refused = sum(1 for j in runs[0][1].jobs if j.state.value == "refused")
        if refused:
            console.print(
                f"{refused} job(s) refused: they can never fit this cluster or name an unknown "
                "queue or priority class (see -o json for each reason)"
            )
        if len(runs) == 1:
            console.print(metrics_table(runs[0][2], runs[0][0]))
        else:
            console.print(compare_table([(n, m) for n, _, m in runs]))
        for name, _, metrics in runs:
            if metrics.pools is not None:
                console.print(pools_table(metrics.pools, f"Pools: {name}"))
    if report is not None and output is not Output.json:
        console.print(f"report written to {report}")


def _workload(  # noqa: ANN202
    jobs: Path | None, trace: str | None, seed: int, nodes: list[Node] | None
):
    """The jobs file's or the trace's workload; a trace that cuts jobs into gangs by GPUs
    per node takes that count from the cluster (``nodes``) unless its options give it."""
    from corral.sim.jobs_file import load_jobs

    if (jobs is None) == (trace is None):
        raise ValidationError("give exactly one of --jobs FILE or --trace FORMAT:PATH")
    if jobs is not None:
        try:
            return load_jobs(jobs.read_text(), str(jobs))
        except OSError as exc:
            raise ValidationError(f"--jobs: cannot read {jobs}: {exc.strerror}") from None
    from corral.sim.traces.common import cluster_gpus_per_node
    from corral.sim.traces.registry import read_trace

    per_node = cluster_gpus_per_node(nodes) if nodes is not None else None
    return read_trace(str(trace), seed, gpus_per_node=per_node)


def _cluster(cluster: Path | None) -> tuple[list[Node] | None, tuple[Pool, ...]]:
    """The nodes (None without ``--cluster``) and pools of ``--cluster``."""
    from corral.schemas.cluster import load_cluster

    if cluster is None:
        return None, ()
    try:
        declared = load_cluster(cluster.read_text(), str(cluster))
    except OSError as exc:
        raise ValidationError(f"--cluster: cannot read {cluster}: {exc.strerror}") from None
    return declared.to_nodes(), declared.to_pools()


def _with_templates(declared: list[Node] | None, pools: tuple[Pool, ...]) -> list[Node] | None:
    """The declared nodes and one unit of each pool: what a trace cuts its gangs for."""
    if declared is None:
        return None
    return [*declared, *(n for p in pools for n in p.template)]


def _nodes(declared: list[Node] | None, workload):  # noqa: ANN001, ANN202
    if declared is not None:  # (a cluster file declares nodes, pools or both)
        return declared
    if workload.nodes:
        return list(workload.nodes)
    raise ValidationError("--cluster is required: this workload does not come with a cluster")


class _progress:
    """A progress bar on stderr for long runs (none for -o json or small workloads)."""

    def __init__(self, output: Output, name: str, total: int) -> None:
        self.bar = None
        if total >= 2000 and err_console.is_terminal:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            self.bar = Progress(
                TextColumn(f"simulating [bold]{name}[/]"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=err_console.real,
                transient=True,
            )
        self.total = total

    def __enter__(self):  # noqa: ANN204
        if self.bar is None:
            return None
        self.bar.start()
        self.task = self.bar.add_task("jobs", total=self.total)
        return lambda done, _total: self.bar.update(self.task, completed=done)

    def __exit__(self, *_exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()
