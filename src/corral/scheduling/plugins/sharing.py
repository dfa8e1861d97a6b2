"""Sharing policies (``policy.sharing``): which node score and device choice place GPU
requests, shares above all.

- ``packing``: the ``packing`` score, busiest fitting device.
- ``bestfit``: :class:`BestFitScore`, the node left with the least free CPU and GPU,
  busiest fitting device.
- ``fgd``: fragmentation gradient descent (``plugins/fgd.py``).
- ``corral`` (the default): fragmentation-aware packing (``plugins/corral.py``) against
  the request mix learned from the jobs seen (``scheduling/mix.py``); ``packing`` until
  there is one.

The chosen score replaces ``packing`` for bin-packed requests; a request placed with
``spread`` is still spread. Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from corral.core.resources import MILLI, GpuKind
from corral.core.tpu import GPU
from corral.errors import ValidationError
from corral.scheduling.framework import NodeRequest, Score
from corral.scheduling.plugins.fgd import spread_score
from corral.scheduling.snapshot import NodeView

# policy.sharing -> (score plugin, device-select plugin wrapped by topology-devices)
POLICIES: dict[str, tuple[str, str]] = {
    "packing": ("packing", "nvlink-devices"),
    "bestfit": ("bestfit", "nvlink-devices"),
    "fgd": ("fgd", "fgd-devices"),
    "corral": ("corral", "corral-devices"),
}


def requested_milli(request: NodeRequest) -> int:
    """GPU milli the request takes on one node (MIG: none counted)."""
    if request.gpus.kind is GpuKind.WHOLE:
        return request.gpus.count * MILLI
    if request.gpus.kind is GpuKind.FRACTION:
        return request.gpus.milli
    return 0


def free_milli(node: NodeView) -> int:
    """Free GPU milli of the node's GPUs not in MIG mode."""
    return sum(
        MILLI - used
        for device, used in zip(node.node.devices, node.used_milli, strict=True)
        if not device.mig and device.kind == GPU
    )


def best_fit(
    free_cpus: float, cpus: float, free_gpu: int, gpu: int, cpu_scale: float, gpu_scale: float
) -> float:
    """``trunc(100 * (1 - [0.5 (free_cpus - cpus) / cpu_scale + 0.5 (free_gpu - gpu) /
    gpu_scale]))``: 100 for a node left empty of both, lower the more it keeps free."""
    left = 0.5 * (free_cpus - cpus) / cpu_scale + 0.5 * (free_gpu - gpu) / (gpu_scale * MILLI)
    return float(math.trunc(round(100.0 * (1.0 - left), 9)))


class BestFitScore:
    """Score: the node that the request leaves with the least free CPU and GPU (the
    FGD paper's BestFit baseline; ``cpu_scale`` CPUs and ``gpu_scale`` GPUs weigh one
    half each, by default the largest node of the openb trace)."""

    name = "bestfit"

    def __init__(self, weight: float = 1.0, cpu_scale: float = 128.0, gpu_scale: float = 8.0):
        if cpu_scale <= 0 or gpu_scale <= 0:
            raise ValidationError("plugins: bestfit: cpu_scale and gpu_scale must be positive")
        self.weight = weight
        self.cpu_scale = cpu_scale
        self.gpu_scale = gpu_scale

    def score(self, request: NodeRequest, node: NodeView) -> float:
        spread = spread_score(request, node)
        if spread is not None:
            return spread
        if request.gpus.tpu:
            return 50.0  # a TPU slice: the slice selection decides
        return best_fit(
            node.free_cpus,
            request.cpus,
            free_milli(node),
            requested_milli(request),
            self.cpu_scale,
            self.gpu_scale,
        )


def sharing_plugins(
    policy: str, registry: Any, extra: list[Score], defaults: Mapping[str, object] | None = None
) -> tuple[Score, Any]:
    """The node score and the inner device selection for ``policy.sharing``.

    A score plugin of the policy's own name among the configured ``extra`` ones is used
    (and taken out of ``extra``), so its arguments (such as ``mix``) apply; otherwise one
    is made with ``defaults`` (a learned mix). What its ``arguments()`` return, if it has
    that method, configures the device choice too.
    """
    if policy not in POLICIES:
        raise ValidationError(f"policy.sharing: unknown policy {policy!r}")
    score_name, devices_name = POLICIES[policy]
    score = next((p for p in extra if p.name == score_name), None)
    if score is None:
        score = registry.create(score_name, **dict(defaults or {}))
    else:
        extra.remove(score)
    arguments = score.arguments() if hasattr(score, "arguments") else {}
    return score, registry.create(devices_name, **arguments)
