"""Fragmentation-aware placement of GPU requests (fragmentation gradient descent, ATC'23).

A node's fragmentation ``F(n)`` for a target mix of request classes is the share-weighted
sum over the classes of the free GPU milli on the node that the class cannot use: all of
it when the class needs no GPU or cannot fit the node at all (no matching model, too few
free CPUs, fewer fitting GPUs than it needs), else the free milli of the GPUs that have
less free than the class needs per GPU (or whose model it does not accept).
:class:`FragmentationScore` scores a node by how much placing the request there changes
``F``: ``trunc(100 * sigmoid((F(n) - F(n')) / 1000))``, ``n'`` the node after placing, so
50 means neutral and higher means the placement removes fragmentation.
:class:`FragmentationDeviceSelect` puts a shared request on the device of the node that
leaves the least fragmentation. MIG devices are out of scope (ignored). Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from corral.core.node import Device
from corral.core.resources import MILLI, GpuKind, model_matches
from corral.errors import ValidationError
from corral.scheduling.framework import NodeRequest
from corral.scheduling.plugins.devices import NvlinkDeviceSelect
from corral.scheduling.snapshot import NodeView


@dataclass(frozen=True)
class RequestClass:
    """One class of the expected workload: ``gpus`` GPUs on one node (0: CPU-only), each
    needing ``gpu_milli`` free (1000: a whole GPU), ``cpus`` free CPUs, GPUs whose model
    matches ``model`` (None: any), weighted by ``share``."""

    gpu_milli: int = MILLI
    gpus: int = 1
    cpus: float = 0.0
    model: str | None = None
    share: float = 1.0


# The built-in target mix: shares of a GPU (0.25, 0.5) and whole 1/2/4/8-GPU requests,
# weighted towards small requests as in shared inference/notebook clusters.
DEFAULT_MIX: tuple[RequestClass, ...] = (
    RequestClass(gpu_milli=250, gpus=1, share=0.2),
    RequestClass(gpu_milli=500, gpus=1, share=0.2),
    RequestClass(gpu_milli=MILLI, gpus=1, share=0.25),
    RequestClass(gpu_milli=MILLI, gpus=2, share=0.15),
    RequestClass(gpu_milli=MILLI, gpus=4, share=0.1),
    RequestClass(gpu_milli=MILLI, gpus=8, share=0.1),
)

_CLASS_KEYS = {"gpu_milli", "gpus", "cpus", "model", "share"}


def parse_mix(
    mix: Sequence[RequestClass | Mapping[str, object]] | None,
) -> tuple[RequestClass, ...]:
    """The mix as request classes (from classes or configuration mappings), shares
    renormalised to sum to 1; None: :data:`DEFAULT_MIX`."""
    if mix is None:
        return DEFAULT_MIX
    classes: list[RequestClass] = []
    for i, item in enumerate(mix):
        if isinstance(item, RequestClass):
            classes.append(item)
            continue
        if not isinstance(item, Mapping):
            raise ValidationError(f"plugins: fgd: mix[{i}]: expected a mapping, got {item!r}")
        unknown = sorted(set(item) - _CLASS_KEYS)
        if unknown:
            raise ValidationError(f"plugins: fgd: mix[{i}]: unknown keys {unknown}")
        try:
            model = item.get("model")
            classes.append(
                RequestClass(
                    gpu_milli=int(item.get("gpu_milli", MILLI)),  # type: ignore[call-overload]
                    gpus=int(item.get("gpus", 1)),  # type: ignore[call-overload]
                    cpus=float(item.get("cpus", 0.0)),  # type: ignore[arg-type]
                    model=None if model is None else str(model),
                    share=float(item.get("share", 1.0)),  # type: ignore[arg-type]
                )
            )
        except (TypeError, ValueError) as exc:
            raise ValidationError(f"plugins: fgd: mix[{i}]: {exc}") from None
    for i, c in enumerate(classes):
        if c.share <= 0 or c.gpus < 0 or c.cpus < 0 or not 0 < c.gpu_milli <= MILLI:
            raise ValidationError(
                f"plugins: fgd: mix[{i}]: needs share > 0, gpus >= 0, cpus >= 0 and "
                f"0 < gpu_milli <= {MILLI}"
            )
    if not classes:
        raise ValidationError("plugins: fgd: mix: needs at least one request class")
    total = sum(c.share for c in classes)
    return tuple(
        RequestClass(c.gpu_milli, c.gpus, c.cpus, c.model, c.share / total) for c in classes
    )


def _fragmentation(
    devices: Sequence[Device],
    used: Sequence[int],
    free_cpus: float,
    mix: Sequence[RequestClass],
) -> float:
    frees = [(d, MILLI - u) for d, u in zip(devices, used, strict=True) if not d.mig]
    total = sum(f for _, f in frees)
    if total <= 0:
        return 0.0
    result = 0.0
    for c in mix:
        if c.gpus == 0 or c.cpus > free_cpus + 1e-9:
            result += c.share * total
            continue
        usable = [f for d, f in frees if f >= c.gpu_milli and model_matches(d.model, c.model)]
        if len(usable) < c.gpus:
            result += c.share * total
        else:
            result += c.share * (total - sum(usable))
    return result


def node_fragmentation(view: NodeView, mix: Sequence[RequestClass] = DEFAULT_MIX) -> float:
    """``F(n)``: the share-weighted free GPU milli of ``view`` that the mix cannot use."""
    return _fragmentation(view.node.devices, view.used_milli, view.free_cpus, mix)


def _share_fits(request: NodeRequest, view: NodeView, pos: int) -> bool:
    """The constraints of ``NvlinkDeviceSelect._fraction`` for device ``pos``."""
    device, used = view.node.devices[pos], view.used_milli[pos]
    if device.mig or used + request.gpus.milli > MILLI:
        return False
    if not model_matches(device.model, request.model):
        return False
    if used and not view.shared[pos]:
        return False
    return not (request.gpu_memory and device.memory < request.gpu_memory)


def best_share_position(
    request: NodeRequest, view: NodeView, mix: Sequence[RequestClass]
) -> tuple[int, float] | None:
    """``(position, F(n'))`` of the fitting device whose use for the fractional request
    leaves the least fragmentation (lowest position on ties); None if none fits."""
    free_cpus = view.free_cpus - request.cpus
    best: tuple[int, float] | None = None
    for pos in range(len(view.node.devices)):
        if not _share_fits(request, view, pos):
            continue
        used = list(view.used_milli)
        used[pos] += request.gpus.milli
        after = _fragmentation(view.node.devices, used, free_cpus, mix)
        if best is None or after < best[1] - 1e-9:
            best = (pos, after)
    return best


def _sigmoid_score(delta: float) -> float:
    x = max(-50.0, min(50.0, delta / 1000.0))
    return float(math.trunc(100.0 / (1.0 + math.exp(-x))))


class FragmentationScore:
    """Score: ``trunc(100 * sigmoid((F(n) - F(n')) / 1000))`` for GPU requests (whole or
    fractional), 50 for the others. ``n'`` assumes the devices the fgd device selection
    would take: for a share the device leaving the least fragmentation (the node's best
    FGD score), for whole GPUs the NVLink best fit."""

    name = "fgd"

    def __init__(
        self,
        weight: float = 1.0,
        mix: Sequence[RequestClass | Mapping[str, object]] | None = None,
    ) -> None:
        self.weight = weight
        self.mix = parse_mix(mix)
        self._whole = NvlinkDeviceSelect()

    def score(self, request: NodeRequest, node: NodeView) -> float:
        kind = request.gpus.kind
        if kind not in (GpuKind.FRACTION, GpuKind.WHOLE):
            return 50.0
        before = node_fragmentation(node, self.mix)
        if kind is GpuKind.FRACTION:
            best = best_share_position(request, node, self.mix)
            if best is None:
                return 0.0
            return _sigmoid_score(before - best[1])
        picks = self._whole.select(request, node)
        if picks is None:
            return 0.0
        used = list(node.used_milli)
        for pick in picks:
            for index in pick:
                used[node.position(index)] = MILLI
        after = _fragmentation(node.node.devices, used, node.free_cpus - request.cpus, self.mix)
        return _sigmoid_score(before - after)


class FragmentationDeviceSelect:
    """DeviceSelect: a share goes to the fitting device that leaves the node's
    fragmentation lowest (lowest index on ties); everything else as ``nvlink-devices``."""

    name = "fgd-devices"

    def __init__(self, mix: Sequence[RequestClass | Mapping[str, object]] | None = None) -> None:
        self.mix = parse_mix(mix)
        self._inner = NvlinkDeviceSelect()

    def select(self, request: NodeRequest, node: NodeView) -> list[tuple[int, ...]] | None:
        if request.gpus.kind is not GpuKind.FRACTION:
            return self._inner.select(request, node)
        best = best_share_position(request, node, self.mix)
        return None if best is None else [(node.node.devices[best[0]].index,)]
