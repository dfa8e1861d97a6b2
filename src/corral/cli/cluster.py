"""Cluster commands: up, down, server, agent, status, nodes, queues, drain, undrain."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from pathlib import Path
from typing import Annotated

import typer

from corral.cli.common import Output, OutputOpt, ServerOpt, TokenOpt, client, console, print_json
from corral.cli.render import nodes_table, queues_table, replicas_table
from corral.client.config import (
    DEFAULT_PORT,
    TOKEN_FILE,
    corral_home,
    resolve_ca_cert,
    resolve_join_token,
    resolve_servers,
)
from corral.errors import ConnectionFailedError, ValidationError

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
    embedded = EmbeddedCluster(home, launches, port, db, config)
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
    console.print(f"  API       {state.server_url}/api/v1   (docs: {state.server_url}/api/v1/docs)")
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
        f"  corral submit --nodes {len(launches)} --tasks-per-node {max(per_node, 1)} "
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
def server(
    db: Annotated[
        str | None, typer.Option("--db", help="sqlite:///path or postgresql://...")
    ] = None,
    host: Annotated[str, typer.Option(help="address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port to listen on")] = DEFAULT_PORT,
    config: Annotated[Path | None, typer.Option("--config", help="scheduler.yaml")] = None,
    node_timeout: Annotated[
        float,
        typer.Option("--node-timeout", help="seconds without a heartbeat before a node is lost"),
    ] = 30.0,
    sync_interval: Annotated[
        float, typer.Option("--sync-interval", help="seconds between agent syncs")
    ] = 2.0,
    telemetry_retention: Annotated[
        str,
        typer.Option(
            "--telemetry-retention",
            help="GPU telemetry kept in memory: AGE or AGE/RESOLUTION, e.g. 1h/10s (the default)",
        ),
    ] = "1h/10s",
    lease_ttl: Annotated[
        float,
        typer.Option(
            "--lease-ttl",
            help="seconds the scheduler leader's lease lasts unrenewed (replicas take over "
            "after it)",
        ),
    ] = 4.0,
    advertise: Annotated[
        str | None,
        typer.Option(help="URL other replicas and clients reach this one at (shown in health)"),
    ] = None,
    tls_cert: Annotated[
        Path | None, typer.Option("--tls-cert", help="serve HTTPS with this certificate (PEM)")
    ] = None,
    tls_key: Annotated[
        Path | None, typer.Option("--tls-key", help="the certificate's private key (PEM)")
    ] = None,
    max_grace_period: Annotated[
        str,
        typer.Option(
            "--max-grace-period",
            help="the longest grace_period a job may ask for (longer: refused), e.g. 10m",
        ),
    ] = "10m",
    log_cap: Annotated[
        str,
        typer.Option(
            "--log-cap", help="bytes of each task's log kept (past it the oldest go), e.g. 100MB"
        ),
    ] = "100MB",
    allow_root_jobs: Annotated[
        bool,
        typer.Option(
            "--allow-root-jobs",
            help="run jobs whose Unix account is root (refused by default)",
        ),
    ] = False,
) -> None:
    """The control plane alone (REST API, state, scheduling loop).

    Several replicas may share one database (PostgreSQL, or a SQLite file on one host):
    all serve the API and one, elected through the database, runs the scheduling loop."""
    from corral.core.units import parse_duration, parse_size
    from corral.server.app import serve
    from corral.server.context import ServerSettings

    home = corral_home()
    if config is not None and not config.is_file():
        raise ValidationError(f"--config: no such file {config}")
    age_text, _, step_text = telemetry_retention.partition("/")
    try:
        age, step = parse_duration(age_text), parse_duration(step_text or "10s")
    except ValueError as exc:
        raise ValidationError(f"--telemetry-retention: {exc}") from None
    if age <= 0:
        raise ValidationError("--telemetry-retention: the age must be positive")
    if lease_ttl < 1:
        raise ValidationError(f"--lease-ttl: at least 1 second, got {lease_ttl:g}")
    if (tls_cert is None) != (tls_key is None):
        raise ValidationError("--tls-cert and --tls-key go together")
    for flag, path in (("--tls-cert", tls_cert), ("--tls-key", tls_key)):
        if path is not None and not path.is_file():
            raise ValidationError(f"{flag}: no such file {path}")
    try:
        grace_cap = parse_duration(max_grace_period)
    except ValueError as exc:
        raise ValidationError(f"--max-grace-period: {exc}") from None
    try:
        cap = parse_size(log_cap)
    except ValueError as exc:
        raise ValidationError(f"--log-cap: {exc}") from None
    if cap < 1024:
        raise ValidationError(f"--log-cap: at least 1KB, got {log_cap}")
    serve(
        ServerSettings(
            db_url=db or f"sqlite:///{home / 'corral.db'}",
            home=home,
            host=host,
            port=port,
            config_path=config,
            node_timeout=node_timeout,
            sync_interval=sync_interval,
            telemetry_max_age=age,
            telemetry_resolution=step,
            telemetry_max_samples=int(age / step) + 2 if step > 0 else 100_000,
            lease_ttl=lease_ttl,
            advertise=advertise,
            tls_cert=tls_cert,
            tls_key=tls_key,
            max_grace_period=grace_cap,
            log_cap=cap,
            allow_root_jobs=allow_root_jobs,
        )
    )


@app.command()
def agent(
    server: ServerOpt = None,
    name: Annotated[str | None, typer.Option(help="node name (default: the host name)")] = None,
    simulate: Annotated[str | None, typer.Option(help="simulated GPUs, e.g. 8xH100")] = None,
    node_file: Annotated[
        Path | None,
        typer.Option("--node-file", help="declared node (JSON), as `corral up --cluster` writes"),
    ] = None,
    labels: Annotated[str | None, typer.Option(help="k=v,... node labels")] = None,
    attributes: Annotated[
        str | None,
        typer.Option(
            help="k=v,... numeric node attributes for scoring plugins, e.g. cost_per_hour=3.5"
        ),
    ] = None,
    network: Annotated[
        str | None,
        typer.Option(help="path in the network tree, outermost first: zone-a/spine-1/leaf-1"),
    ] = None,
    address: Annotated[
        str | None, typer.Option(help="address other nodes reach this one at")
    ] = None,
    join_token_file: Annotated[
        Path | None,
        typer.Option(
            "--join-token-file",
            help="file holding the join token (default: $CORRAL_JOIN_TOKEN, else "
            "$CORRAL_HOME/join-token)",
        ),
    ] = None,
    join_token: Annotated[
        str | None,
        typer.Option(
            "--join-token",
            help="the join token itself: visible to every local user in the process list; "
            "prefer --join-token-file",
        ),
    ] = None,
    checkpoint_root: Annotated[
        Path | None,
        typer.Option(
            "--checkpoint-root",
            help="where CORRAL_CHECKPOINT_DIR lives (shared storage; default "
            "$CORRAL_HOME/checkpoints, or /var/lib/corral/checkpoints when run as root)",
        ),
    ] = None,
    cgroups: Annotated[
        bool,
        typer.Option(
            "--cgroups/--no-cgroups",
            help="one cgroup per task: memory, CPU and process limits, and nothing a task "
            "starts outlives it (where the host allows)",
        ),
    ] = True,
    max_pids: Annotated[
        int,
        typer.Option("--max-pids", min=1, help="processes and threads per task (cgroups)"),
    ] = 4096,
    ca_cert: Annotated[
        Path | None,
        typer.Option("--ca-cert", help="CA certificate of an HTTPS server (or $CORRAL_CA_CERT)"),
    ] = None,
) -> None:
    """A node agent: registers its GPUs, runs the tasks placed on it, reports them."""
    import socket

    from corral.agent.agent import Agent, AgentSettings
    from corral.agent.host import describe_host, load_node_file, local_address
    from corral.cli.common import parse_pairs
    from corral.privatefiles import private_dir

    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    servers = resolve_servers(server)
    if join_token is not None:
        logging.getLogger("corral.agent").warning(
            "--join-token is visible to every user of this host (ps, /proc); "
            "use --join-token-file or $CORRAL_JOIN_TOKEN"
        )
    if join_token_file is not None:
        try:
            join_token = join_token_file.read_text().strip()
        except OSError as exc:
            raise ValidationError(
                f"--join-token-file: cannot read {join_token_file}: {exc}"
            ) from None
    token = resolve_join_token(join_token)
    if not token:
        raise ValidationError(
            "no join token: pass --join-token-file, set CORRAL_JOIN_TOKEN, or run on the "
            "server's host"
        )
    label_map = parse_pairs([p for p in (labels or "").split(",") if p], "--labels")
    node = load_node_file(node_file) if node_file else describe_host(simulate, label_map)
    if node_file and label_map:
        node.labels.update(label_map)
    if network:
        node.network = [part for part in network.replace(",", "/").split("/") if part]
    for key, value in parse_pairs(
        [p for p in (attributes or "").split(",") if p], "--attributes"
    ).items():
        try:
            node.attributes[key] = float(value)
        except ValueError:
            raise ValidationError(f"--attributes: {key} must be a number, got {value!r}") from None
    node_name = name or socket.gethostname().split(".")[0]
    home = private_dir(corral_home())
    if checkpoint_root is None:
        as_root = os.geteuid() == 0
        checkpoint_root = Path("/var/lib/corral/checkpoints") if as_root else home / "checkpoints"
    settings = AgentSettings(
        servers=servers,
        join_token=token,
        name=node_name,
        address=address or local_address(servers[0]),
        node=node,
        home=home / "agents" / node_name,
        checkpoint_root=checkpoint_root,
        read_gpu_health=node_file is None and simulate is None,
        simulated=node_file is not None or simulate is not None,
        ca_cert=resolve_ca_cert(ca_cert),
        contain=cgroups,
        max_pids=max_pids,
    )
    worker = Agent(settings)
    signal.signal(signal.SIGTERM, lambda *_: worker.stop())
    signal.signal(signal.SIGINT, lambda *_: worker.stop())
    worker.run()


@app.command()
def nodes(
    server: ServerOpt = None, token: TokenOpt = None, output: OutputOpt = Output.table
) -> None:
    """Nodes with free and used devices."""
    found = client(server, token).nodes()
    if output is Output.json:
        print_json({"nodes": found})
    elif not found:
        console.print("no nodes registered (start agents with `corral agent` or `corral up`)")
    else:
        console.print(nodes_table(found, time.time()))


@app.command()
def status(
    server: ServerOpt = None, token: TokenOpt = None, output: OutputOpt = Output.table
) -> None:
    """Each server replica: reachable, version, and which one leads the scheduling loop."""
    found = client(server, token).replicas()
    if output is Output.json:
        print_json({"replicas": found})
    else:
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
