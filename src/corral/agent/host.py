"""What a node agent registers: its devices, CPUs, memory, network path and labels."""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlparse

from corral.agent.discovery import discover, host_cpus, host_memory_bytes
from corral.schemas.agent import DeviceIn
from corral.schemas.cluster import default_cpus, default_memory
from corral.schemas.common import Strict, validate


class NodeDescription(Strict):
    """The node as declared (``--node-file``) or discovered; the register body minus ids."""

    devices: list[DeviceIn] = []
    cpus: float
    memory: int
    network: list[str] = []
    labels: dict[str, str] = {}
    attributes: dict[str, float] = {}  # static ones (cost_per_hour); readings come with syncs


def describe_host(simulate: str | None, labels: dict[str, str]) -> NodeDescription:
    """Discovered (NVML) GPUs with this host's CPUs and memory; or simulated GPUs
    (``8xH100``) on a node sized like a typical server for them (12 CPUs and 128GB of
    memory per GPU), since the whole node is what is simulated."""
    gpus = discover(simulate)
    simulated = bool(simulate)
    return NodeDescription(
        devices=[
            DeviceIn(
                index=g.index,
                model=g.model,
                memory=g.memory_bytes,
                nvlink_domain=g.nvlink_domain,
                uuid=g.uuid,
                mig=list(g.mig),
                mig_uuids=list(g.mig_uuids),
            )
            for g in gpus
        ],
        cpus=default_cpus(len(gpus)) if simulated else host_cpus(),
        memory=default_memory(len(gpus)) if simulated else host_memory_bytes(),
        labels=labels,
    )


def load_node_file(path: Path) -> NodeDescription:
    """A declared node written by ``corral up --cluster`` (JSON)."""
    return validate(NodeDescription, json.loads(path.read_text()), str(path))


def local_address(server_urls: str | Sequence[str]) -> str:
    """The address other nodes reach this host at (``corral agent --address``'s default):
    the source address this host uses to reach the server, i.e. the address of the
    interface its route to the server leaves through, as the kernel picks it. The servers
    (replicas) are tried in order until one's name resolves and has a route; IPv4 is
    preferred. A server on loopback means a one-host cluster: ``127.0.0.1``. With none
    usable: the address the host name resolves to."""
    urls = [server_urls] if isinstance(server_urls, str) else list(server_urls)
    for url in urls:
        host = urlparse(url if "://" in url else f"http://{url}").hostname or "127.0.0.1"
        if host in ("localhost", "127.0.0.1", "::1"):
            return "127.0.0.1"
        try:
            found = socket.getaddrinfo(host, 9, type=socket.SOCK_DGRAM)
        except (OSError, UnicodeError):
            continue  # (name does not resolve now)
        for family, _, _, _, sockaddr in sorted(found, key=lambda a: a[0] != socket.AF_INET):
            try:
                with socket.socket(family, socket.SOCK_DGRAM) as probe:
                    probe.connect(sockaddr)  # no packet is sent for a UDP connect
                    return str(probe.getsockname()[0]).split("%")[0]
            except OSError:
                continue  # (no route)
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def free_ports(count: int = 4) -> list[int]:
    """Ports free on this host right now (for MASTER_PORT of jobs whose rank 0 lands here)."""
    ports = []
    for _ in range(count):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("", 0))
            ports.append(sock.getsockname()[1])
    return ports


def gpu_readings() -> dict[str, float]:
    """Health readings of this host's GPUs through NVML, for scoring plugins:
    ``gpu_temperature_c`` (the hottest GPU) and ``memory_errors`` (uncorrected ECC errors,
    volatile, summed). Empty when NVML is not usable; never raises."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # no driver, no library: nothing to read
        return {}
    try:
        temperatures, errors = [], 0.0
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            temperatures.append(
                pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU)
            )
            with contextlib.suppress(pynvml.NVMLError):  # ECC not supported on this GPU
                errors += pynvml.nvmlDeviceGetTotalEccErrors(
                    handle, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC
                )
        readings = {"memory_errors": errors}
        if temperatures:
            readings["gpu_temperature_c"] = float(max(temperatures))
        return readings
    except Exception:
        return {}
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()
