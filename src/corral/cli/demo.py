"""``corral demo``: bring up a simulated cluster, run a distributed job on it, show it."""

from __future__ import annotations

import sys
import time
from typing import Annotated

import typer

from corral.cli.common import console
from corral.client.config import DEFAULT_PORT, corral_home

app = typer.Typer()


@app.command()
def demo(
    nodes: Annotated[int, typer.Option(help="simulated nodes")] = 2,
    gpus_per_node: Annotated[int, typer.Option("--gpus-per-node")] = 8,
    keep: Annotated[
        bool, typer.Option("--keep", help="leave the cluster running (stop with `corral down`)")
    ] = False,
) -> None:
    """Start an embedded cluster, run a 2-node gang job that meets over TCP, and show it."""
    from corral.cli.render import job_panel, jobs_table
    from corral.client.client import Client
    from corral.embedded.cluster import EmbeddedCluster, pick_port, plan_nodes

    home = corral_home()
    home.mkdir(parents=True, exist_ok=True)
    launches = plan_nodes(nodes, gpus_per_node, "H100", None, home, 0)
    cluster = EmbeddedCluster(home, launches, pick_port(DEFAULT_PORT))
    with console.status(f"starting a control plane and {nodes} simulated node(s)..."):
        state = cluster.start()
    console.print(
        f"[bold green]Corral is up[/] at {state.server_url} "
        f"with {nodes} x {gpus_per_node} simulated H100 GPUs"
    )
    try:
        with Client(state.server_url, (home / "token").read_text().strip()) as client:
            manifest = {
                "name": "hello-allreduce",
                "nodes": nodes,
                "tasks_per_node": gpus_per_node or 1,
                "resources": {"gpus": gpus_per_node},
                "command": [sys.executable, "-m", "corral.examples.allreduce"],
                "time_limit": "5m",
            }
            job = client.submit(manifest)
            console.print(f"submitted job {job.id}: {nodes} node(s) x {gpus_per_node or 1} task(s)")
            with console.status(f"job {job.id} running..."):
                done = client.wait(job.id, timeout=300)[0]
            console.print(jobs_table(client.list(all=True), time.time()))
            console.print(job_panel(client.get(job.id), time.time()))
            console.print(f"[bold]logs of task 0[/] (corral logs {job.id}):")
            sys.stdout.write(client.logs(job.id))
            console.print(f"job {job.id} {done.state}: {done.reason}")
    finally:
        if keep:
            console.print("the cluster keeps running; stop it with `corral down`", markup=False)
        else:
            with console.status("stopping the cluster..."):
                cluster.stop()
    if done.state != "succeeded":
        raise typer.Exit(1)
