"""Cluster commands: up, down, status, nodes, queues, drain, undrain (``corral server`` and
``corral agent`` are in ``cli.daemons``)."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from corral.cli.common import Output, OutputOpt, ServerOpt, TokenOpt, client, console, print_json
from corral.cli.watch import IntervalOpt, WatchOpt
from corral.cli.watch import watch as show_again
from corral.client.config import (
    DEFAULT_PORT,
    TOKEN_FILE,
    corral_home,
)
from corral.errors import ConnectionFailedError

if TYPE_CHECKING:
    from rich.console import RenderableType

    from corral.schemas.api import NodeOut

app = typer.Typer()


@app.command()
def up(
    nodes: Annotated[int | None, typer.Option(help="simulated nodes")] = None,
    gpus_per_node: Annotated[
        int | None, typer.Option("--gpus-per-node", help="GPUs per simulated node")
    ] = None,
    gpu_model: Annotated[
        str | None, typer.Option("--gpu-model", help="model of the simulated GPUs")
    ] = None,
    cluster: Annotated[
        Path | None, typer.Option("--cluster", help="cluster.yaml declaring the nodes")
    ] = None,
    port: Annotated[
        int | None, typer.Option(help=f"API port (default {DEFAULT_PORT}, or a free one)")
    ] = None,
    db: Annotated[
        str | None, typer.Option("--db", help="database URL (default: SQLite in $CORRAL_HOME)")
    ] = None,
    config: Annotated[Path | None, typer.Option("--config", help="scheduler.yaml")] = None,
    detach: Annotated[
        bool, typer.Option("--detach", "-d", help="return once ready; stop with `corral down`")
    ] = False,
    grpc_port: Annotated[
        int | None,
        typer.Option("--grpc-port", help="also serve the gRPC API on this port (docs/grpc.md)"),
    ] = None,
) -> None:
    """An embedded cluster on this host: the control plane plus one agent per node."""
    from corral.agent.discovery import discover, nvml_available
    from corral.embedded.cluster import EmbeddedCluster, pick_port, plan_nodes
    from corral.server.ui import dashboard_url

    home = corral_home()
    home.mkdir(parents=True, exist_ok=True)
    real = len(discover(None)) if nvml_available() else 0
    launches = plan_nodes(nodes, gpus_per_node, gpu_model, cluster, home, real)
    if port is None:
        port = pick_port(DEFAULT_PORT)
    pooled = _has_pools(cluster)
    embedded = EmbeddedCluster(
        home, launches, port, db, config, pools_file=pooled, grpc_port=grpc_port
    )
    gpus = sum(n.gpus for n in launches)
    with console.status(f"starting the control plane and {len(launches)} agent(s)..."):
        state = embedded.start()
    kind = "simulated" if any(n.simulate or n.node_file for n in launches) else "detected"
    models = ", ".join(sorted({n.model for n in launches if n.model})) or "no GPUs"
    chips = sum(n.tpu_chips for n in launches)
    tpus = f", {chips} TPU chip(s) in pods" if chips else ""
    console.print(
        f"[bold green]Corral is up[/]: {len(launches)} node(s), {gpus} GPU(s) ({models}, {kind})"
        + tpus
    )
    if pooled is not None:
        console.print("  Pools     autoscaled by the server (corral pools)", markup=False)
    console.print(f"  API       {state.server_url}/api/v1   (docs: {state.server_url}/api/v1/docs)")
    if grpc_port:
        console.print(f"  gRPC      grpc://127.0.0.1:{grpc_port}   (corral.v1.Corral, reflection)")
    token = (home / TOKEN_FILE).read_text().strip()  # the admin token the server made
    console.print(
        f"  Dashboard {dashboard_url(state.server_url, token)}",
        markup=False,
        soft_wrap=True,
        highlight=False,
    )
    console.print(f"  Home      {home}   (token, database, logs)")
    console.print("Submit a job:")
    per_node = launches[0].gpus if launches else 0
    console.print(
        f"  corral submit --nodes {max(len(launches), 1)} --tasks-per-node {max(per_node, 1)} "
        f"--gpus {per_node} "
        "-- python -c 'import os; print(os.environ[\"RANK\"])'",
        markup=False,
    )
    console.print("  corral jobs --all; corral show JOB; corral logs JOB", markup=False)
    if detach:
        console.print("Stop it with: corral down", markup=False)
        return
    console.print("Press Ctrl-C to stop.")
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    try:
        while not stopping.is_set():
            if embedded.server and embedded.server.poll() is not None:
                console.print("[red]the server exited[/]; see the logs in", str(home / "logs"))
                break
            stopping.wait(0.5)
    except KeyboardInterrupt:
        pass
    with console.status("stopping agents (their tasks get their grace period) and the server..."):
        embedded.stop()
    console.print("Corral stopped.")


@app.command()
def down() -> None:
    """Stop what `corral up --detach` started."""
    from corral.embedded.cluster import down as stop_cluster

    home = corral_home()
    with console.status("stopping agents and the server..."):
        state = stop_cluster(home)
    if state is None:
        console.print(f"no cluster started by `corral up` is recorded in {home}")
        return
    console.print(f"stopped the cluster at {state.server_url} ({len(state.agent_pids)} agent(s))")


@app.command()
def nodes(
    watch: WatchOpt = False,
    interval: IntervalOpt = 2.0,
    server: ServerOpt = None,
    token: TokenOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """Nodes with free and used devices."""
    c = client(server, token)

    def draw(found: list[NodeOut]) -> RenderableType:
        from rich.text import Text

        from corral.cli.render import nodes_table

        if not found:
            return Text("no nodes registered (start agents with `corral agent` or `corral up`)")
        return nodes_table(found, time.time())

    def dump(found: list[NodeOut]) -> dict[str, list[NodeOut]]:
        return {"nodes": found}

    if watch:
        show_again(c.nodes, draw, dump, interval, output)
        return
    found = c.nodes()
    print_json(dump(found)) if output is Output.json else console.print(draw(found))


@app.command()
def status(
    server: ServerOpt = None, token: TokenOpt = None, output: OutputOpt = Output.table
) -> None:
    """Each server replica: reachable, version, and which one leads the scheduling loop."""
    found = client(server, token).replicas()
    if output is Output.json:
        print_json({"replicas": found})
    else:
        from corral.cli.render import replicas_table

        console.print(replicas_table(found))
    if not any(r.reachable for r in found):
        raise ConnectionFailedError(f"no server reachable at {', '.join(r.address for r in found)}")


@app.command()
def queues(
    server: ServerOpt = None, token: TokenOpt = None, output: OutputOpt = Output.table
) -> None:
    """Queues with quota, usage and pending count."""
    found = client(server, token).queues()
    if output is Output.json:
        print_json({"queues": found})
    else:
        from corral.cli.render import queues_table

        console.print(queues_table(found))


@app.command()
def drain(
    node: Annotated[str, typer.Argument(metavar="NODE")],
    server: ServerOpt = None,
    token: TokenOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """Stop placing new work on a node (running work stays)."""
    result = client(server, token).drain(node)
    print_json(result) if output is Output.json else console.print(f"node {node}: {result.state}")


@app.command()
def undrain(
    node: Annotated[str, typer.Argument(metavar="NODE")],
    server: ServerOpt = None,
    token: TokenOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """Let a drained node take new work again."""
    result = client(server, token).undrain(node)
    print_json(result) if output is Output.json else console.print(f"node {node}: {result.state}")


def _has_pools(cluster: Path | None) -> Path | None:
    """The cluster file, if it declares pools (checked, with their providers)."""
    if cluster is None:
        return None
    from corral.providers.registry import check_pools
    from corral.schemas.cluster import load_cluster

    pools = load_cluster(cluster.read_text(), str(cluster)).to_pools()
    if not pools:
        return None
    check_pools(pools, source=str(cluster))
    return cluster.absolute()
