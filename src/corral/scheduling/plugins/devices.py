"""Built-in device selection inside a node.

Whole GPUs: each task takes its GPUs from one NVLink domain when they fit in one, choosing
the domain that fits most tightly (so larger domains stay whole), else from the fewest
domains. Fractions: the busiest shared device that still has room, else an idle one.
MIG: a free instance of the profile on the device with the fewest such free instances.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from corral.core.allocation import DevicePick
from corral.core.resources import GpuKind, model_matches
from corral.scheduling.framework import NodeRequest
from corral.scheduling.snapshot import NodeView


def pick_in_domains(free_by_domain: dict[int, list[int]], k: int) -> list[int] | None:
    """Take ``k`` indices from ``free_by_domain`` (mutated), preferring one domain.

    Best fit: the smallest domain with at least ``k`` free; otherwise the largest domains
    first, so the task spans as few domains as possible. None if fewer than ``k`` are free.
    """
    if sum(len(v) for v in free_by_domain.values()) < k:
        return None
    fitting = [d for d, free in free_by_domain.items() if len(free) >= k]
    if fitting:
        domain = min(fitting, key=lambda d: (len(free_by_domain[d]), d))
        taken, free_by_domain[domain] = free_by_domain[domain][:k], free_by_domain[domain][k:]
        return taken
    taken: list[int] = []
    for domain in sorted(free_by_domain, key=lambda d: (-len(free_by_domain[d]), d)):
        need = k - len(taken)
        taken += free_by_domain[domain][:need]
        free_by_domain[domain] = free_by_domain[domain][need:]
        if len(taken) == k:
            break
    return sorted(taken)


class NvlinkDeviceSelect:
    name = "nvlink-devices"

    def select(self, request: NodeRequest, node: NodeView) -> list[tuple[int, ...]] | None:
        if request.gpus.kind is GpuKind.NONE:
            return [()] * request.tasks
        if request.gpus.kind is GpuKind.FRACTION:
            return self._fraction(request, node)
        if request.gpus.kind is GpuKind.MIG:
            return self._mig(request, node)
        if request.gpus.kind is not GpuKind.WHOLE:
            return None
        free = set(node.free_whole(request.model))
        by_domain: dict[int, list[int]] = defaultdict(list)
        for device in node.node.devices:
            if device.index in free:
                by_domain[device.nvlink_domain].append(device.index)
        chosen = []
        for _ in range(request.tasks):
            picked = pick_in_domains(by_domain, request.gpus_per_task)
            if picked is None:
                return None
            chosen.append(tuple(picked))
        return chosen

    @staticmethod
    def _fraction(request: NodeRequest, node: NodeView) -> list[tuple[int, ...]] | None:
        best: tuple[int, int] | None = None  # (used, index)
        for pos, device in enumerate(node.node.devices):
            used = node.used_milli[pos]
            if device.mig or used + request.gpus.milli > 1000:
                continue
            if not model_matches(device.model, request.model):
                continue
            if used and not node.shared[pos]:
                continue
            if not node.share_memory_fits(pos, request.gpu_memory):
                continue
            if best is None or used > best[0]:
                best = (used, device.index)
        return None if best is None else [(best[1],)]

    @staticmethod
    def _mig(request: NodeRequest, node: NodeView) -> list[tuple[int, ...]] | None:
        """One free instance of the profile (one task per node): on the device with the
        fewest free instances of it (packing), lowest index on ties, lowest slot."""
        free = node.free_mig(request.gpus.mig_profile or "", request.model)
        if request.tasks != 1 or not free:
            return None
        per_device = Counter(index for index, _ in free)
        index, slot = min(free, key=lambda f: (per_device[f[0]], f[0], f[1]))
        return [DevicePick((index,), (slot,))]
