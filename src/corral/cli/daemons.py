"""The long-running processes: ``corral server`` (the control plane) and ``corral agent``
(a node). Every option is also an environment variable (``CORRAL_*``), so that unit files
(``deploy/``) keep settings and secrets out of the command line."""

from __future__ import annotations

import logging
import os
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from corral.client.config import (
    DEFAULT_PORT,
    corral_home,
    resolve_ca_cert,
    resolve_join_token,
    resolve_servers,
)
from corral.errors import ValidationError
from corral.logsetup import Format, Level
from corral.logsetup import configure as configure_logging

if TYPE_CHECKING:
    from corral.agent.hooks import HookSettings

app = typer.Typer()

LogLevel = Annotated[
    Level,
    typer.Option(
        "--log-level",
        envvar="CORRAL_LOG_LEVEL",
        case_sensitive=False,
        help="write log records of this level and above (to stderr)",
    ),
]
LogFormat = Annotated[
    Format,
    typer.Option(
        "--log-format",
        envvar="CORRAL_LOG_FORMAT",
        case_sensitive=False,
        help="text, or json: one object per line (time, level, logger, message, exception)",
    ),
]


@app.command()
def server(
    db: Annotated[
        str | None,
        typer.Option(
            "--db",
            envvar="CORRAL_DB",
            help="sqlite:///path or postgresql://USER[:PASSWORD]@HOST[:PORT]/DB (default: "
            "SQLite in $CORRAL_HOME); a password belongs in the environment, not the command "
            "line",
        ),
    ] = None,
    host: Annotated[
        str, typer.Option(envvar="CORRAL_HOST", help="address to listen on (0.0.0.0: all)")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(envvar="CORRAL_PORT", help="port to listen on")] = (
        DEFAULT_PORT
    ),
    config: Annotated[
        Path | None, typer.Option("--config", envvar="CORRAL_CONFIG", help="scheduler.yaml")
    ] = None,
    node_timeout: Annotated[
        float,
        typer.Option(
            "--node-timeout",
            envvar="CORRAL_NODE_TIMEOUT",
            help="seconds without a heartbeat before a node is lost",
        ),
    ] = 30.0,
    sync_interval: Annotated[
        float,
        typer.Option(
            "--sync-interval", envvar="CORRAL_SYNC_INTERVAL", help="seconds between agent syncs"
        ),
    ] = 2.0,
    telemetry_retention: Annotated[
        str,
        typer.Option(
            "--telemetry-retention",
            envvar="CORRAL_TELEMETRY_RETENTION",
            help="GPU telemetry kept in memory: AGE or AGE/RESOLUTION, e.g. 1h/10s (the default)",
        ),
    ] = "1h/10s",
    lease_ttl: Annotated[
        float,
        typer.Option(
            "--lease-ttl",
            envvar="CORRAL_LEASE_TTL",
            help="seconds the scheduler leader's lease lasts unrenewed (replicas take over "
            "after it)",
        ),
    ] = 4.0,
    advertise: Annotated[
        str | None,
        typer.Option(
            envvar="CORRAL_ADVERTISE",
            help="URL other replicas and clients reach this one at (shown in health)",
        ),
    ] = None,
    tls_cert: Annotated[
        Path | None,
        typer.Option(
            "--tls-cert", envvar="CORRAL_TLS_CERT", help="serve HTTPS with this certificate (PEM)"
        ),
    ] = None,
    tls_key: Annotated[
        Path | None,
        typer.Option(
            "--tls-key", envvar="CORRAL_TLS_KEY", help="the certificate's private key (PEM)"
        ),
    ] = None,
    max_grace_period: Annotated[
        str,
        typer.Option(
            "--max-grace-period",
            envvar="CORRAL_MAX_GRACE_PERIOD",
            help="the longest grace_period a job may ask for (longer: refused), e.g. 10m",
        ),
    ] = "10m",
    log_cap: Annotated[
        str,
        typer.Option(
            "--log-cap",
            envvar="CORRAL_LOG_CAP",
            help="bytes of each task's log kept (past it the oldest go), e.g. 100MB",
        ),
    ] = "100MB",
    allow_root_jobs: Annotated[
        bool,
        typer.Option(
            "--allow-root-jobs",
            envvar="CORRAL_ALLOW_ROOT_JOBS",
            help="run jobs whose Unix account is root (refused by default)",
        ),
    ] = False,
    pools: Annotated[
        Path | None,
        typer.Option(
            "--pools",
            envvar="CORRAL_POOLS",
            help="a cluster file whose pools: this server autoscales (its nodes: are ignored)",
        ),
    ] = None,
    grpc_port: Annotated[
        int | None,
        typer.Option(
            "--grpc-port",
            envvar="CORRAL_GRPC_PORT",
            help="also serve the gRPC API (corral.v1.Corral, docs/grpc.md) on this port",
        ),
    ] = None,
    log_level: LogLevel = Level.info,
    log_format: LogFormat = Format.text,
) -> None:
    """The control plane alone (REST API, state, scheduling loop).

    Several replicas may share one database (PostgreSQL, or a SQLite file on one host):
    all serve the API and one, elected through the database, runs the scheduling loop."""
    from corral.core.units import parse_duration, parse_size
    from corral.server.app import serve
    from corral.server.context import ServerSettings

    configure_logging(log_level, log_format)
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
    if grpc_port is not None and not (0 < grpc_port < 65536 and grpc_port != port):
        raise ValidationError(f"--grpc-port: a free port other than --port, got {grpc_port}")
    declared = _pools(pools)
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
            pools=declared,
            grpc_port=grpc_port,
        )
    )


def _pools(path: Path | None) -> tuple:
    """The pools of the cluster file ``path`` (none without one), providers checked."""
    if path is None:
        return ()
    from corral.providers.registry import check_pools
    from corral.schemas.cluster import load_cluster

    if not path.is_file():
        raise ValidationError(f"--pools: no such file {path}")
    declared = load_cluster(path.read_text(), str(path)).to_pools()
    check_pools(declared, source=str(path))
    return declared


@app.command()
def agent(
    ctx: typer.Context,
    server: Annotated[
        str | None,
        typer.Option(
            "--server",
            envvar="CORRAL_SERVER",
            help="Server URL(s), comma-separated: the replicas, tried in turn. Default: the "
            "address `corral up` recorded.",
        ),
    ] = None,
    name: Annotated[
        str | None,
        typer.Option(envvar="CORRAL_NODE_NAME", help="node name (default: the short host name)"),
    ] = None,
    simulate: Annotated[
        str | None, typer.Option(envvar="CORRAL_SIMULATE", help="simulated GPUs, e.g. 8xH100")
    ] = None,
    node_file: Annotated[
        Path | None,
        typer.Option(
            "--node-file",
            envvar="CORRAL_NODE_FILE",
            help="declared node (JSON), as `corral up --cluster` writes",
        ),
    ] = None,
    labels: Annotated[
        str | None, typer.Option(envvar="CORRAL_LABELS", help="k=v,... node labels")
    ] = None,
    attributes: Annotated[
        str | None,
        typer.Option(
            envvar="CORRAL_ATTRIBUTES",
            help="k=v,... numeric node attributes for scoring plugins, e.g. cost_per_hour=3.5",
        ),
    ] = None,
    network: Annotated[
        str | None,
        typer.Option(
            envvar="CORRAL_NETWORK",
            help="path in the network tree, outermost first: zone-a/spine-1/leaf-1",
        ),
    ] = None,
    address: Annotated[
        str | None,
        typer.Option(
            envvar="CORRAL_ADDRESS",
            help="address other nodes reach this one at (MASTER_ADDR of jobs whose rank 0 is "
            "here); default: the source address this host uses to reach the server",
        ),
    ] = None,
    join_token_file: Annotated[
        Path | None,
        typer.Option(
            "--join-token-file",
            envvar="CORRAL_JOIN_TOKEN_FILE",
            help="file holding the join token (instead of --join-token; without either: "
            "$CORRAL_HOME/join-token)",
        ),
    ] = None,
    join_token: Annotated[
        str | None,
        typer.Option(
            "--join-token",
            envvar="CORRAL_JOIN_TOKEN",
            help="the join token itself; on the command line every local user sees it in the "
            "process list: set it in the environment or use --join-token-file",
        ),
    ] = None,
    checkpoint_root: Annotated[
        Path | None,
        typer.Option(
            "--checkpoint-root",
            envvar="CORRAL_CHECKPOINT_ROOT",
            help="where CORRAL_CHECKPOINT_DIR lives (shared storage; default "
            "$CORRAL_HOME/checkpoints, or /var/lib/corral/checkpoints when run as root)",
        ),
    ] = None,
    cgroups: Annotated[
        bool,
        typer.Option(
            "--cgroups/--no-cgroups",
            envvar="CORRAL_CGROUPS",
            help="one cgroup per task: memory, CPU and process limits, and nothing a task "
            "starts outlives it (where the host allows)",
        ),
    ] = True,
    max_pids: Annotated[
        int,
        typer.Option(
            "--max-pids",
            envvar="CORRAL_MAX_PIDS",
            min=1,
            help="processes and threads per task (cgroups)",
        ),
    ] = 4096,
    ca_cert: Annotated[
        Path | None,
        typer.Option(
            "--ca-cert",
            envvar="CORRAL_CA_CERT",
            help="CA certificate of an HTTPS server (default: $CORRAL_HOME/ca.pem if present, "
            "else the public CAs of certifi, or the bundle $SSL_CERT_FILE names)",
        ),
    ] = None,
    keep_tasks_on_stop: Annotated[
        bool,
        typer.Option(
            "--keep-tasks-on-stop",
            envvar="CORRAL_KEEP_TASKS_ON_STOP",
            help="on SIGTERM, exit and leave the running tasks to the next start of this agent, "
            "which re-adopts them (a service restart); without it they are stopped and their "
            "jobs handed back",
        ),
    ] = False,
    prolog: Annotated[
        Path | None,
        typer.Option(
            "--prolog",
            envvar="CORRAL_PROLOG",
            help="program run as this agent's account before a job's first task on this node "
            "(once per job attempt), with the job's CORRAL_* and SLURM_* variables; if it "
            "fails (non-zero exit, time limit) the node is drained with its last output line "
            "as the reason and the job is requeued elsewhere (docs/hooks.md)",
        ),
    ] = None,
    epilog: Annotated[
        Path | None,
        typer.Option(
            "--epilog",
            envvar="CORRAL_EPILOG",
            help="program run as this agent's account once a job's last task on this node "
            "ended (once per job attempt); if it fails the node is drained",
        ),
    ] = None,
    hook_timeout: Annotated[
        str,
        typer.Option(
            "--hook-timeout",
            envvar="CORRAL_HOOK_TIMEOUT",
            help="time limit of each prolog or epilog run, e.g. 300s or 5m: past it the hook's "
            "process group is killed and the run counts as failed",
        ),
    ] = "5m",
    image_cache: Annotated[
        Path | None,
        typer.Option(
            "--image-cache",
            envvar="CORRAL_IMAGE_CACHE",
            help="where container images are unpacked (default /var/lib/corral/images when "
            "run as root, else $CORRAL_HOME/agents/NODE/images); docs/containers.md",
        ),
    ] = None,
    image_cache_size: Annotated[
        str,
        typer.Option(
            "--image-cache-size",
            envvar="CORRAL_IMAGE_CACHE_SIZE",
            help="size of the image cache, e.g. 50GB: past it the least recently used images "
            "no task uses are removed",
        ),
    ] = "50GB",
    log_level: LogLevel = Level.info,
    log_format: LogFormat = Format.text,
) -> None:
    """A node agent: registers its GPUs, runs the tasks placed on it, reports them.

    With --prolog/--epilog (or prolog:/epilog: on a node in cluster.yaml) it runs an
    administrator's node hooks around each job, like Slurm's Prolog and Epilog."""
    import socket

    from corral.agent.agent import Agent, AgentSettings
    from corral.agent.host import describe_host, load_node_file
    from corral.cli.common import parse_pairs
    from corral.privatefiles import private_dir

    configure_logging(log_level, log_format)
    servers = resolve_servers(server)
    source = ctx.get_parameter_source("join_token")
    if getattr(source, "name", None) == "COMMANDLINE":  # (not from $CORRAL_JOIN_TOKEN)
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
        address=address or _published_address(servers),
        node=node,
        home=home / "agents" / node_name,
        checkpoint_root=checkpoint_root,
        read_gpu_health=node_file is None and simulate is None,
        simulated=node_file is not None or simulate is not None,
        ca_cert=resolve_ca_cert(ca_cert),
        contain=cgroups,
        max_pids=max_pids,
        keep_tasks_on_stop=keep_tasks_on_stop,
        hooks=_hook_settings(prolog, epilog, hook_timeout),
        image_cache=image_cache,
        image_cache_size=_image_cache_size(image_cache_size),
    )
    worker = Agent(settings)
    signal.signal(signal.SIGTERM, lambda *_: worker.stop())
    signal.signal(signal.SIGINT, lambda *_: worker.stop())
    worker.run()


def _image_cache_size(text: str) -> int:
    from corral.core.units import parse_size

    try:
        size = parse_size(text)
    except ValueError as exc:
        raise ValidationError(f"--image-cache-size: {exc}") from None
    if size < 1:
        raise ValidationError(f"--image-cache-size: must be positive, got {text}")
    return size


def _published_address(servers: list[str]) -> str:
    """``--address``'s default: the source address this host uses to reach the server;
    a warning when that is loopback while a server is not (other nodes could not reach
    jobs here)."""
    from urllib.parse import urlparse

    from corral.agent.host import local_address

    found = local_address(servers)
    remote = [s for s in servers if urlparse(s).hostname not in ("localhost", "127.0.0.1", "::1")]
    if found.startswith("127.") and remote:
        logging.getLogger("corral.agent").warning(
            "this node's address is %s (loopback: %s is on this host, or has no route): "
            "other nodes cannot reach jobs here; set --address (CORRAL_ADDRESS) if there are any",
            found,
            ", ".join(remote),
        )
    return found


def _hook_settings(prolog: Path | None, epilog: Path | None, timeout: str) -> HookSettings:
    """The agent's node hooks, as absolute paths (a hook runs in ``/``); a hook that is not
    an executable file now is only warned about (it may live on storage mounted later:
    each run that cannot start it fails, and drains the node)."""
    from corral.agent.hooks import HookSettings
    from corral.core.units import parse_duration

    try:
        seconds = parse_duration(timeout)
    except ValueError as exc:
        raise ValidationError(f"--hook-timeout: {exc}") from None
    if seconds <= 0:
        raise ValidationError(f"--hook-timeout: must be positive, got {timeout}")
    paths = {}
    for flag, path in (("prolog", prolog), ("epilog", epilog)):
        if path is None or not str(path):
            continue
        paths[flag] = path = path.expanduser().absolute()
        if not (path.is_file() and os.access(path, os.X_OK)):
            logging.getLogger("corral.agent").warning(
                "--%s %s is not an executable file (yet): each %s run will fail and drain "
                "this node",
                flag,
                path,
                flag,
            )
    return HookSettings(timeout=seconds, **paths)
