"""Accelerator discovery for a node: NVML on real hardware, or a simulated spec.

Everything here is read-only with respect to the host. Only :func:`discover_nvml` and
:func:`nvml_available` touch NVML; the parsing and grouping helpers are pure functions.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

GB = 1000**3
"""Model names and specs count memory in decimal GB, like ``corral.core.units`` and the vendors'
marketing names (a real "80GB" H100 reports about 85.5e9 bytes, so simulated GPUs never have
more memory than the real ones they stand for)."""

GIB = 1024**3

DEFAULT_MEMORY_BYTES = 80 * GB
"""Memory of a simulated GPU whose model is not in :data:`KNOWN_MODEL_MEMORY_GB`."""

KNOWN_MODEL_MEMORY_GB: dict[str, int] = {
    "H100": 80,
    "H200": 141,
    "A100": 80,
    "V100": 32,
    "L4": 24,
    "L40S": 48,
    "A10": 24,
    "T4": 16,
    "B200": 192,
    "MI300X": 192,
}
"""Memory per GPU for known models, keyed by the upper-cased first ``-`` token of the model."""

SIMULATE_SPEC_FORM = "COUNTxMODEL[:MEMORY][/NVLINK_GROUP]"

_SPEC_RE = re.compile(
    r"(?P<count>\d+)[xX](?P<model>[A-Za-z0-9][A-Za-z0-9._-]*)"
    r"(?::(?P<memory>\d+)(?P<unit>GB|G|GIB)?)?"
    r"(?:/(?P<group>\d+))?",
    re.IGNORECASE,
)
_NAME_MEMORY_RE = re.compile(r"(\d+)\s*GB", re.IGNORECASE)


@dataclass(frozen=True)
class DiscoveredGpu:
    """One accelerator of this node.

    ``nvlink_domain``: GPUs connected by NVLink share a domain id (0, 1, ... numbered by
    their lowest member index); a GPU without NVLink peers has a domain of its own.
    """

    index: int
    model: str
    memory_bytes: int
    uuid: str | None
    nvlink_domain: int


def _spec_error(spec: str, reason: str) -> ValueError:
    return ValueError(
        f"invalid GPU simulation spec {spec!r}: {reason}; expected {SIMULATE_SPEC_FORM}, "
        "e.g. 8xH100, 4xA100:40GB or 8xH100/4"
    )


def model_memory_bytes(model: str) -> int:
    """Memory of one GPU of ``model``: an ``NNGB`` inside the name wins, then the known-model
    table (matched on the first ``-``-separated token, case-insensitive), else 80 GB."""
    match = _NAME_MEMORY_RE.search(model)
    if match and int(match.group(1)) > 0:
        return int(match.group(1)) * GB
    base = model.split("-", 1)[0].upper()
    if base in KNOWN_MODEL_MEMORY_GB:
        return KNOWN_MODEL_MEMORY_GB[base] * GB
    return DEFAULT_MEMORY_BYTES


def parse_simulate_spec(spec: str) -> list[DiscoveredGpu]:
    """Parse ``COUNTxMODEL[:MEMORY][/NVLINK_GROUP]`` into simulated GPUs.

    ``8xH100`` is eight H100s (80 GB each) in NVLink domain 0. ``4xA100:40GB`` sets the
    memory explicitly (``GB``, ``G`` or no unit: 10**9 bytes; ``GiB``: 2**30 bytes).
    ``8xH100/4`` splits the GPUs into NVLink domains of four (0-3 -> domain 0, 4-7 -> domain 1).
    Raises ``ValueError`` quoting ``spec`` if malformed: the count, memory and group must be
    positive and the group must divide the count.
    """
    text = spec.strip()
    match = _SPEC_RE.fullmatch(text)
    if match is None:
        raise _spec_error(spec, "malformed")
    count = int(match["count"])
    if count <= 0:
        raise _spec_error(spec, "COUNT must be at least 1")
    model = match["model"]
    if match["memory"] is not None:
        memory_gb = int(match["memory"])
        if memory_gb <= 0:
            raise _spec_error(spec, "MEMORY must be positive")
        memory = memory_gb * (GIB if (match["unit"] or "").upper() == "GIB" else GB)
    else:
        memory = model_memory_bytes(model)
    group = count if match["group"] is None else int(match["group"])
    if group <= 0 or count % group != 0:
        raise _spec_error(spec, f"NVLINK_GROUP {group} must be positive and divide COUNT {count}")
    return [
        DiscoveredGpu(
            index=i, model=model, memory_bytes=memory, uuid=None, nvlink_domain=i // group
        )
        for i in range(count)
    ]


def normalize_model_name(name: str) -> str:
    """NVML device name -> model id: drop a leading ``NVIDIA ``, join words with ``-``.

    ``"NVIDIA H100 80GB HBM3"`` -> ``"H100-80GB-HBM3"``.
    """
    words = name.split()
    if len(words) > 1 and words[0].upper() == "NVIDIA":
        words = words[1:]
    return "-".join(words)


def group_nvlink_domains(n: int, linked: Callable[[int, int], bool]) -> list[int]:
    """Domain id per GPU index ``0..n-1``: connected components of the ``linked`` relation.

    ``linked(a, b)`` is asked at most once per pair, always with ``a < b``, and treated as
    symmetric; pairs already known to be connected are not asked. Domain ids are numbered
    0, 1, ... in the order of each component's lowest member index.
    """
    parent = list(range(n))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for a in range(n):
        for b in range(a + 1, n):
            if root(a) != root(b) and linked(a, b):
                parent[max(root(a), root(b))] = min(root(a), root(b))
    ids: dict[int, int] = {}
    return [ids.setdefault(root(i), len(ids)) for i in range(n)]


def _text(value: str | bytes) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def nvml_available() -> bool:
    """True when pynvml imports and ``nvmlInit()`` succeeds (a driver is present); never raises."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return False
    with contextlib.suppress(Exception):
        pynvml.nvmlShutdown()
    return True


def discover_nvml() -> list[DiscoveredGpu]:
    """All GPUs visible to NVML, with NVLink domains from pairwise P2P NVLink status.

    If the P2P query is not supported, every GPU gets its own domain. Raises ``RuntimeError``
    if NVML cannot be used (no pynvml, no driver) or a device query fails.
    """
    try:
        import pynvml
    except ImportError as exc:
        raise RuntimeError("NVML is not usable: pynvml (nvidia-ml-py) is not installed") from exc
    try:
        pynvml.nvmlInit()
    except Exception as exc:
        raise RuntimeError(f"NVML is not usable: nvmlInit failed: {exc}") from exc
    try:
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        infos = [
            (
                normalize_model_name(_text(pynvml.nvmlDeviceGetName(h))),
                int(pynvml.nvmlDeviceGetMemoryInfo(h).total),
                _text(pynvml.nvmlDeviceGetUUID(h)),
            )
            for h in handles
        ]
        domains = _nvml_domains(pynvml, handles)
    except pynvml.NVMLError as exc:
        raise RuntimeError(f"NVML device query failed: {exc}") from exc
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()
    return [
        DiscoveredGpu(index=i, model=model, memory_bytes=mem, uuid=uuid, nvlink_domain=domains[i])
        for i, (model, mem, uuid) in enumerate(infos)
    ]


def _nvml_domains(pynvml: ModuleType, handles: list[Any]) -> list[int]:
    """NVLink domains via P2P NVLink status. A pair whose query fails counts as not linked; if
    the query is not supported at all, every GPU is its own domain."""

    def linked(a: int, b: int) -> bool:
        try:
            status = pynvml.nvmlDeviceGetP2PStatus(
                handles[a], handles[b], pynvml.NVML_P2P_CAPS_INDEX_NVLINK
            )
        except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound):
            raise
        except pynvml.NVMLError:
            return False
        return bool(status == pynvml.NVML_P2P_STATUS_OK)

    try:
        return group_nvlink_domains(len(handles), linked)
    except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound):
        return list(range(len(handles)))


def discover(simulate: str | None) -> list[DiscoveredGpu]:
    """GPUs of this node: ``parse_simulate_spec(simulate)`` when a non-empty spec is given,
    else NVML when available, else ``[]`` (a CPU-only node)."""
    if simulate:
        return parse_simulate_spec(simulate)
    if nvml_available():
        return discover_nvml()
    return []


def host_cpus() -> int:
    """Logical CPUs of the host (``os.cpu_count()``, at least 1)."""
    return os.cpu_count() or 1


def host_memory_bytes() -> int:
    """Physical memory of the host in bytes (page size x physical pages)."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
