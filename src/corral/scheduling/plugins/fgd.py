"""Fragmentation-aware placement of GPU requests (fragmentation gradient descent, ATC'23).

A node's fragmentation ``F(n)`` for a target mix of request classes is the share-weighted
sum over the classes of the free GPU milli on the node that the class cannot use: all of
it when the class needs no GPU or cannot fit the node at all (no matching model, too few
free CPUs, fewer fitting GPUs than it needs), else the free milli of the GPUs that have
less free than the class needs per GPU (or whose model it does not accept).
:class:`FragmentationScore` scores a node by how much placing the request there changes
``F``: ``trunc(100 * sigmoid((F(n) - F(n')) / 1000))``, ``n'`` the node after placing
(CPU-only requests too: taking CPUs can leave a class unable to fit), so 50 means neutral
and higher means the placement removes fragmentation. :class:`FragmentationDeviceSelect`
puts a shared request on the lowest-index device that gives the node's best score. MIG
devices and TPU chips are out of scope (ignored; MIG requests and TPU slices score 50).

:class:`Fragmentation` computes ``F`` for one mix from a node's state alone (device
models, free milli per device, free CPUs) and memoizes it by that state, so identical
nodes cost one computation: the memo is a cache of a pure function, not state. Pure: no
I/O.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from corral.core.job import JobSpec, PlacementPolicy
from corral.core.resources import MILLI, GpuKind, model_matches
from corral.core.tpu import GPU
from corral.errors import ValidationError
from corral.scheduling.framework import NodeRequest
from corral.scheduling.plugins.devices import NvlinkDeviceSelect
from corral.scheduling.plugins.scoring import PackingScore
from corral.scheduling.snapshot import NodeView

MEMO_LIMIT = 200_000  # entries per memo before it is cleared (bounds memory)
EPSILON = 1e-9  # CPU comparisons: counts are sums of floats


@dataclass(frozen=True)
class RequestClass:
    """One class of the expected workload: ``gpus`` GPUs on one node (0: CPU-only), each
    needing ``gpu_milli`` free (1000: a whole GPU), ``cpus`` free CPUs, GPUs whose model
    matches ``model`` (None: any; ``A|B``: either), weighted by ``share``."""

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
ClassKey = tuple[float, int, int, str]  # a request class: (cpus, gpu_milli, gpus, model or "")


def parse_mix(
    mix: Sequence[RequestClass | Mapping[str, object]] | None,
    empty_ok: bool = False,
) -> tuple[RequestClass, ...]:
    """The mix as request classes (from classes or configuration mappings), shares
    renormalised to sum to 1; None: :data:`DEFAULT_MIX`; an empty one is refused unless
    ``empty_ok`` (then it stays empty)."""
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
        lowest = 0 if c.gpus == 0 else 1  # a CPU-only class may say gpu_milli: 0
        if c.share <= 0 or c.gpus < 0 or c.cpus < 0 or not lowest <= c.gpu_milli <= MILLI:
            raise ValidationError(
                f"plugins: fgd: mix[{i}]: needs share > 0, gpus >= 0, cpus >= 0 and "
                f"0 < gpu_milli <= {MILLI} (0 allowed with gpus: 0)"
            )
    if not classes and not empty_ok:
        raise ValidationError("plugins: fgd: mix: needs at least one request class")
    total = sum(c.share for c in classes)
    return tuple(
        RequestClass(c.gpu_milli, c.gpus, c.cpus, c.model, c.share / total) for c in classes
    )


def request_class_key(spec: JobSpec) -> ClassKey | None:
    """``(cpus, gpu_milli, gpus, model)`` of one node of ``spec``: its request class;
    None for MIG and TPU requests, which fragmentation does not model."""
    gpus = spec.gpus
    if gpus.kind is GpuKind.MIG or spec.tpu:
        return None
    cpus = float(spec.cpus or 0.0)
    if gpus.kind is GpuKind.NONE:
        return (cpus, 0, 0, "")
    model = spec.model_pattern or ""
    if gpus.kind is GpuKind.FRACTION:
        return (cpus, gpus.milli, 1, model)
    return (cpus, MILLI, gpus.count, model)


def mix_of(specs: Iterable[JobSpec], coverage: float = 0.95) -> tuple[RequestClass, ...]:
    """A target mix from requests seen (a trace, or the jobs pending and running): the
    most frequent request classes (:func:`request_class_key`) that together cover at
    least ``coverage`` of them (ties: the smaller key first), shares renormalised over the
    kept classes; :data:`DEFAULT_MIX` when there is none."""
    counts = Counter(k for k in map(request_class_key, specs) if k is not None)
    return classes_of(counts, coverage) or DEFAULT_MIX


def classes_of(counts: Mapping[ClassKey, int], coverage: float = 0.95) -> tuple[RequestClass, ...]:
    """The most frequent classes of ``counts`` (by :func:`request_class_key`) that together
    cover at least ``coverage`` of them (ties: the smaller key first), shares renormalised
    over the kept classes; empty when there are none."""
    total = sum(counts.values())
    kept: list[tuple[ClassKey, int]] = []
    covered = 0
    for key, count in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        if count <= 0:
            break
        kept.append((key, count))
        covered += count
        if covered >= coverage * total - 1e-9:
            break
    return tuple(
        RequestClass(gpu_milli=milli, gpus=n, cpus=cpus, model=model or None, share=c / covered)
        for (cpus, milli, n, model), c in kept
    )


# A node's state as fragmentation sees it: the (model, free milli) of each device not in
# MIG mode, sorted (F does not depend on the order), and the free CPUs.
Frees = tuple[tuple[str, int], ...]


def frees_of(view: NodeView, used: Sequence[int] | None = None) -> Frees:
    """``(model, free milli)`` of the view's devices not in MIG mode, sorted; ``used``
    replaces the view's per-device use (a trial placement)."""
    used = view.used_milli if used is None else used
    return tuple(
        sorted(
            (d.model, MILLI - u)
            for d, u in zip(view.node.devices, used, strict=True)
            if not d.mig and d.kind == GPU
        )
    )


class Fragmentation:
    """``F`` for one mix, memoized by node state (a cache of a pure function).

    Each class counts with its ``share``; a subclass may set other ``weights``.
    """

    def __init__(
        self,
        mix: Sequence[RequestClass | Mapping[str, object]] | None = None,
        empty_ok: bool = False,
    ) -> None:
        self.mix = parse_mix(mix, empty_ok)
        self.weights: tuple[float, ...] = tuple(c.share for c in self.mix)
        self._memo: dict[tuple[Frees, float], float] = {}
        self._match: dict[tuple[str | None, str], bool] = {}

    def matches(self, pattern: str | None, model: str) -> bool:
        key = (pattern, model)
        hit = self._match.get(key)
        if hit is None:
            hit = self._match[key] = model_matches(model, pattern)
        return hit

    def value(self, frees: Frees, free_cpus: float) -> float:
        """``F`` of a node whose devices have ``frees`` and which has ``free_cpus`` free."""
        key = (frees, free_cpus)
        hit = self._memo.get(key)
        if hit is not None:
            return hit
        if len(self._memo) >= MEMO_LIMIT:
            self._memo.clear()
        result = self._memo[key] = self._compute(frees, free_cpus)
        return result

    def _compute(self, frees: Frees, free_cpus: float) -> float:
        total = sum(f for _, f in frees)
        if total <= 0:
            return 0.0
        result = 0.0
        for c, weight in zip(self.mix, self.weights, strict=True):
            if c.gpus == 0 or c.cpus > free_cpus + EPSILON:
                result += weight * total
                continue
            count, usable = 0, 0
            for model, free in frees:
                if free >= c.gpu_milli and self.matches(c.model, model):
                    count += 1
                    usable += free
            result += weight * (total if count < c.gpus else total - usable)
        return result

    def of(self, view: NodeView) -> float:
        """``F(n)`` of a node as the snapshot sees it."""
        return self.value(frees_of(view), view.free_cpus)


def node_fragmentation(view: NodeView, mix: Sequence[RequestClass] = DEFAULT_MIX) -> float:
    """``F(n)``: the share-weighted free GPU milli of ``view`` that the mix cannot use."""
    return Fragmentation(mix).of(view)


def share_fits(request: NodeRequest, view: NodeView, pos: int) -> bool:
    """Whether device ``pos`` can take the fractional request (the constraints of
    ``NvlinkDeviceSelect._fraction``)."""
    device, used = view.node.devices[pos], view.used_milli[pos]
    if device.mig or used + request.gpus.milli > MILLI:
        return False
    if not model_matches(device.model, request.model):
        return False
    if used and not view.shared[pos]:
        return False
    return view.share_memory_fits(pos, request.gpu_memory)


def share_outcomes(
    request: NodeRequest, view: NodeView, frag: Fragmentation
) -> list[tuple[int, float]]:
    """``(position, F(n'))`` for every device that can take the fractional request, in
    position order (devices of the same model and use computed once)."""
    free_cpus = view.free_cpus - request.cpus
    seen: dict[tuple[str, int], float] = {}
    result: list[tuple[int, float]] = []
    for pos, device in enumerate(view.node.devices):
        if not share_fits(request, view, pos):
            continue
        key = (device.model, view.used_milli[pos])
        after = seen.get(key)
        if after is None:
            used = list(view.used_milli)
            used[pos] += request.gpus.milli
            after = seen[key] = frag.value(frees_of(view, used), free_cpus)
        result.append((pos, after))
    return result


def best_share_position(
    request: NodeRequest, view: NodeView, mix: Sequence[RequestClass]
) -> tuple[int, float] | None:
    """``(position, F(n'))`` of the fitting device whose use for the fractional request
    leaves the least fragmentation (lowest position on ties); None if none fits."""
    outcomes = share_outcomes(request, view, Fragmentation(mix))
    if not outcomes:
        return None
    return min(outcomes, key=lambda o: (o[1], o[0]))


def whole_after(
    request: NodeRequest, view: NodeView, picks: list[tuple[int, ...]]
) -> tuple[Frees, float]:
    """The node's state after whole GPUs ``picks`` (device indices) are taken."""
    used = list(view.used_milli)
    for pick in picks:
        for index in pick:
            used[view.position(index)] = MILLI
    return frees_of(view, used), view.free_cpus - request.cpus


def one_model_after(request: NodeRequest, frees: Frees, frag: Fragmentation) -> Frees | None:
    """The node's state after the request's whole GPUs are taken, when its GPUs are all
    of one model that the request accepts: which idle GPUs are taken does not change it,
    so there is no need to choose them. None when that does not hold or too few are idle
    (the caller then asks the device selection)."""
    if not frees or frees[0][0] != frees[-1][0] or not frag.matches(request.model, frees[0][0]):
        return None
    need = request.tasks * request.gpus_per_task
    if need > len(frees) or any(free != MILLI for _, free in frees[len(frees) - need :]):
        return None  # sorted: the idle GPUs are last
    return ((frees[0][0], 0),) * need + frees[: len(frees) - need]


def sigmoid_score(delta: float) -> float:
    """``trunc(100 * sigmoid(delta / 1000))``."""
    x = max(-50.0, min(50.0, delta / 1000.0))
    return float(math.trunc(100.0 / (1.0 + math.exp(-x))))


def spread_score(request: NodeRequest, node: NodeView) -> float | None:
    """The ``spread`` score for a request placed with ``spread`` (the sharing policies
    only decide for bin-packed requests); None for the others."""
    if request.placement is PlacementPolicy.SPREAD:
        return PackingScore().score(request, node)
    return None


class FragmentationScore:
    """Score: ``trunc(100 * sigmoid((F(n) - F(n')) / 1000))`` for whole, fractional and
    CPU-only requests, 50 for MIG. ``n'`` assumes the devices the fgd device selection
    would take: for a share the device giving the best score (lowest index on ties), for
    whole GPUs the NVLink best fit (the lowest-index idle GPUs on a flat node)."""

    name = "fgd"

    def __init__(
        self,
        weight: float = 1.0,
        mix: Sequence[RequestClass | Mapping[str, object]] | None = None,
    ) -> None:
        self.weight = weight
        self.fragmentation = Fragmentation(mix)
        self._whole = NvlinkDeviceSelect()

    @property
    def mix(self) -> tuple[RequestClass, ...]:
        return self.fragmentation.mix

    def arguments(self) -> dict[str, object]:
        """What a device selection needs to choose as this score assumes."""
        return {"mix": self.mix}

    def score(self, request: NodeRequest, node: NodeView) -> float:
        spread = spread_score(request, node)
        if spread is not None:
            return spread
        best = self.best(request, node)
        return 0.0 if best is None else best[1]

    def best(self, request: NodeRequest, node: NodeView) -> tuple[int | None, float] | None:
        """``(device position for a share, score)``; None if nothing fits."""
        kind, frag = request.gpus.kind, self.fragmentation
        if kind is GpuKind.MIG or request.gpus.tpu:
            return None, 50.0
        frees = frees_of(node)
        before = frag.value(frees, node.free_cpus)
        if kind is GpuKind.FRACTION:
            return self.best_share(request, node, before)
        if kind is GpuKind.NONE:
            after = frag.value(frees, node.free_cpus - request.cpus)
            return None, sigmoid_score(before - after)
        taken = one_model_after(request, frees, frag)  # the common case: no choice to make
        if taken is None:
            picks = self._whole.select(request, node)
            if picks is None:
                return None
            taken = whole_after(request, node, picks)[0]
        return None, sigmoid_score(before - frag.value(taken, node.free_cpus - request.cpus))

    def best_share(
        self, request: NodeRequest, node: NodeView, before: float
    ) -> tuple[int | None, float] | None:
        """``(position, score)`` of the device for a share: the lowest index with the
        best score; None if no device fits."""
        chosen: tuple[int | None, float] | None = None
        for pos, after in share_outcomes(request, node, self.fragmentation):
            score = sigmoid_score(before - after)
            if chosen is None or score > chosen[1]:
                chosen = (pos, score)
        return chosen


class FragmentationDeviceSelect:
    """DeviceSelect: a share goes to the lowest-index device giving the node's best fgd
    score; everything else as ``nvlink-devices``."""

    name = "fgd-devices"

    def __init__(self, mix: Sequence[RequestClass | Mapping[str, object]] | None = None) -> None:
        self._score = FragmentationScore(mix=mix)
        self._inner = NvlinkDeviceSelect()

    @property
    def mix(self) -> tuple[RequestClass, ...]:
        return self._score.mix

    def select(self, request: NodeRequest, node: NodeView) -> list[tuple[int, ...]] | None:
        if request.gpus.kind is not GpuKind.FRACTION:
            return self._inner.select(request, node)
        best = self._score.best(request, node)
        if best is None or best[0] is None:
            return None
        return [(node.node.devices[best[0]].index,)]
