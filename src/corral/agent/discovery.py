"""Accelerator discovery for a node: NVML on real hardware, or a simulated spec.

Everything here is read-only with respect to the host. Only :func:`discover_nvml` and
:func:`nvml_available` touch NVML; the parsing and grouping helpers are pure functions.

**MIG.** A GPU whose current MIG mode (``nvmlDeviceGetMigMode``) is enabled is reported
with its MIG devices, in NVML's MIG device index order (``nvmlDeviceGetMaxMigDeviceCount``
slots, each read with ``nvmlDeviceGetMigDeviceHandleByIndex``; an empty slot is skipped):
``mig`` holds their profiles, which is what the scheduler hands out (a slot is a position
in that tuple), and ``mig_uuids`` their UUIDs (``nvmlDeviceGetUUID`` on the MIG handle,
``MIG-<uuid>``, or ``MIG-GPU-<uuid>/<gi>/<ci>`` on drivers before R470), which is what a
task gets in ``CUDA_VISIBLE_DEVICES``. A profile is named, first found first:

1. from the MIG device's name (``nvmlDeviceGetName``: ``"NVIDIA A100-SXM4-80GB MIG
   3g.40gb"``, or ``"MIG 3g.40gb"``);
2. else from its attributes (``nvmlDeviceGetAttributes``: GPU-instance slices ``g``,
   compute-instance slices ``c``, memory): the name of the parent's GPU-instance profile
   (``nvmlDeviceGetGpuInstanceProfileInfo``, version 2 carries ``"MIG 3g.40gb"``) with ``g``
   slices and the memory nearest the instance's; failing that ``<g>g.<memory in GiB,
   rounded up>gb`` (NVIDIA's names for A100, H100, H200 and B200 profiles except A100 and
   H100 ``7g.80gb``, which reports 78.5 GiB).

A ``+me`` (media extensions) suffix is dropped: such an instance serves a plain request. A
compute instance smaller than its GPU instance is named ``<c>c.<g>g.<n>gb`` (as NVML and
``nvidia-smi -L`` do); no request names that form, so the scheduler never hands it out as
a whole GPU instance. A GPU in MIG mode none of whose instances can be read (or that has
none) is left out: CUDA cannot use it whole, and there is nothing to hand out. A GPU on
which the MIG query is not supported (``NVMLError_NotSupported``, or a driver without the
function) is a plain GPU.
"""

from __future__ import annotations

import contextlib
import math
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
_MIG_NAME_RE = re.compile(r"(?<![\w.])(?:(\d+)c\.)?(\d+)g\.(\d+)gb(?![\w.])", re.IGNORECASE)


@dataclass(frozen=True)
class DiscoveredGpu:
    """One accelerator of this node.

    ``nvlink_domain``: GPUs connected by NVLink share a domain id (0, 1, ... numbered by
    their lowest member index); a GPU without NVLink peers has a domain of its own.
    ``mig``: the profiles of its MIG instances when it is in MIG mode (empty otherwise),
    and ``mig_uuids`` their UUIDs, aligned.
    """

    index: int
    model: str
    memory_bytes: int
    uuid: str | None
    nvlink_domain: int
    mig: tuple[str, ...] = ()
    mig_uuids: tuple[str, ...] = ()


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


def mig_profile_name(text: str) -> str | None:
    """The MIG profile an NVML name mentions, or None.

    ``"NVIDIA A100-SXM4-80GB MIG 3g.40gb"`` and ``"MIG 3g.40gb"`` -> ``"3g.40gb"``;
    ``"MIG 1g.10gb+me"`` -> ``"1g.10gb"``; ``"MIG 1c.3g.40gb"`` (a compute instance on a
    third of a ``3g.40gb``) -> ``"1c.3g.40gb"``; ``"NVIDIA A100-SXM4-80GB"`` -> None.
    """
    match = _MIG_NAME_RE.search(text)
    if match is None:
        return None
    compute, slices, memory = (int(g) if g else 0 for g in match.groups())
    name = f"{slices}g.{memory}gb"
    return f"{compute}c.{name}" if 0 < compute < slices else name


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
        migs = [_mig_instances(pynvml, h) for h in handles]
        domains = _nvml_domains(pynvml, handles)
    except pynvml.NVMLError as exc:
        raise RuntimeError(f"NVML device query failed: {exc}") from exc
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()
    return [
        DiscoveredGpu(
            index=i,
            model=model,
            memory_bytes=mem,
            uuid=uuid,
            nvlink_domain=domains[i],
            mig=tuple(profile for profile, _ in mig or ()),
            mig_uuids=tuple(instance for _, instance in mig or ()),
        )
        for i, ((model, mem, uuid), mig) in enumerate(zip(infos, migs, strict=True))
        if mig != []  # in MIG mode with nothing to hand out: unusable
    ]


def _mig_instances(pynvml: ModuleType, handle: Any) -> list[tuple[str, str]] | None:
    """``(profile, uuid)`` of each MIG device of a GPU in MIG mode, in MIG device index
    order (unreadable ones left out); None when the GPU is not in MIG mode."""
    try:
        current, _pending = pynvml.nvmlDeviceGetMigMode(handle)
    except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound):
        return None  # not MIG-capable, or a driver without MIG
    if current != pynvml.NVML_DEVICE_MIG_ENABLE:
        return None
    try:
        slots = pynvml.nvmlDeviceGetMaxMigDeviceCount(handle)
    except pynvml.NVMLError:
        return []
    instances = []
    for slot in range(slots):
        try:
            mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
            uuid = _text(pynvml.nvmlDeviceGetUUID(mig))
        except pynvml.NVMLError:  # NotFound: no MIG device in this slot
            continue
        profile = _mig_profile(pynvml, handle, mig)
        if profile is not None and uuid:
            instances.append((profile, uuid))
    return instances


def _mig_profile(pynvml: ModuleType, parent: Any, mig: Any) -> str | None:
    """A MIG device's profile: from its name, else from its slices and memory (see the
    module's docstring); None if NVML tells neither."""
    with contextlib.suppress(pynvml.NVMLError):
        named = mig_profile_name(_text(pynvml.nvmlDeviceGetName(mig)))
        if named:
            return named
    try:
        attributes = pynvml.nvmlDeviceGetAttributes(mig)
    except pynvml.NVMLError:
        return None
    slices = int(attributes.gpuInstanceSliceCount)
    compute = int(attributes.computeInstanceSliceCount)
    memory_mb = int(attributes.memorySizeMB)
    if slices <= 0 or memory_mb <= 0:
        return None
    name = _gpu_instance_profile(pynvml, parent, slices, memory_mb)
    name = name or f"{slices}g.{math.ceil(memory_mb / 1024)}gb"
    return f"{compute}c.{name}" if 0 < compute < slices else name


def _gpu_instance_profile(
    pynvml: ModuleType, parent: Any, slices: int, memory_mb: int
) -> str | None:
    """The named GPU-instance profile of ``parent`` with ``slices`` slices whose memory is
    nearest ``memory_mb`` (the lowest profile id on ties: the plain one before ``+me``)."""
    best: tuple[int, str] | None = None
    for profile in range(getattr(pynvml, "NVML_GPU_INSTANCE_PROFILE_COUNT", 0)):
        try:
            info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(parent, profile)
        except pynvml.NVMLError:  # not supported on this GPU, or no such profile id
            continue
        name = mig_profile_name(_text(getattr(info, "name", b"")))
        if name is None or int(info.sliceCount) != slices:
            continue
        gap = abs(int(info.memorySizeMB) - memory_mb)
        if best is None or gap < best[0]:
            best = (gap, name)
    return best[1] if best else None


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
