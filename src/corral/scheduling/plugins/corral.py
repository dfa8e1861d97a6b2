"""Corral's sharing policy (``policy.sharing: corral``): fragmentation gradient descent
that also sees which GPUs are scarce and which nodes run short of CPUs.

FGD (``plugins/fgd.py``) places a request where it raises the node's fragmentation ``F``
least (free GPU milli that the expected mix of requests cannot use). On a real cluster
(the openb trace) two kinds of waste escape it:

- **Scarce models.** A class that accepts only some models (``gpu_model: T4``) sees every
  other node's free GPU as fragmentation, so FGD's gradient does steer other work away from
  the models it needs, but in proportion to the class's share of the mix only (a few
  percent), far too weakly when those models are a small part of the cluster: they fill
  with work that could have run anywhere, and the class's pods are then refused. Here each
  class's term is weighted by its **scarcity**: the cluster's GPUs over the GPUs it may use
  (``supply``: GPUs per model; 1 for classes that take any model, or without ``supply``).
- **CPU-starved GPUs.** A node whose CPUs are gone strands its idle GPUs. FGD only sees it
  when a class no longer fits at all. Here ``F`` gains a **balance** term: the free GPU
  milli that the node's free CPUs cannot feed at the mix's ratio ``r`` (CPUs per GPU milli
  of the GPU classes, share-weighted): ``max(0, free_milli - free_cpus / r)``, times
  ``balance``. CPU-only work thus goes where CPUs are plentiful for the GPUs left, and GPU
  work where CPUs run short.

So ``F*(n) = sum_c share_c * scarcity_c * frag_c(n) + balance * max(0, G(n) - C(n) / r)``
and the score is FGD's: ``trunc(100 * sigmoid((F*(n) - F*(n')) / 1000))`` (ties, which
the truncation makes common, go to the node-set selection's order). A share goes to the
device leaving ``F*`` lowest, then the busiest, then the lowest index. MIG requests and
TPU slices score 50; a request placed with ``spread`` is spread. Pure: no I/O (memoized by
node state).

The mix is the configured one (``args.mix``), else the one the control plane and the
simulator learn from the jobs they see (``scheduling/mix.py``, passed in by
``registry.build_profile``). An **empty** mix (nothing seen yet) places exactly as
``packing``: the ``packing`` score and the busiest fitting device.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from corral.core.resources import GpuKind
from corral.errors import ValidationError
from corral.scheduling.framework import NodeRequest
from corral.scheduling.plugins.devices import NvlinkDeviceSelect
from corral.scheduling.plugins.fgd import (
    Fragmentation,
    FragmentationScore,
    Frees,
    RequestClass,
    frees_of,
    share_fits,
    sigmoid_score,
)
from corral.scheduling.plugins.scoring import PackingScore
from corral.scheduling.snapshot import NodeView

DEFAULT_BALANCE = 1.0

Mix = Sequence[RequestClass | Mapping[str, object]] | None


def scarcity(request_class: RequestClass, supply: Mapping[str, int], frag: Fragmentation) -> float:
    """The cluster's GPUs over those whose model the class accepts: 1 for a class that
    takes any model (or needs none), or when no GPU in ``supply`` matches."""
    if not request_class.gpus or not request_class.model:
        return 1.0
    total = sum(supply.values())
    usable = sum(n for model, n in supply.items() if frag.matches(request_class.model, model))
    return total / usable if usable and total else 1.0


def cpus_per_milli(mix: Sequence[RequestClass]) -> float:
    """The mix's ratio ``r``: CPUs per GPU milli over its GPU classes (share-weighted);
    0 when they ask for no CPUs."""
    milli = sum(c.share * c.gpus * c.gpu_milli for c in mix if c.gpus)
    cpus = sum(c.share * c.cpus for c in mix if c.gpus)
    return cpus / milli if milli and cpus else 0.0


def _supply(value: Mapping[str, object] | None) -> dict[str, int]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValidationError(f"plugins: corral: supply: expected a mapping, got {value!r}")
    result: dict[str, int] = {}
    for model, count in value.items():
        if not isinstance(count, int | float) or isinstance(count, bool) or count < 0:
            raise ValidationError(
                f"plugins: corral: supply: {model}: expected a GPU count >= 0, got {count!r}"
            )
        result[str(model)] = int(count)
    return result


class CorralFragmentation(Fragmentation):
    """``F*``: FGD's ``F`` with scarcity-weighted classes plus the CPU balance term (an
    empty mix is allowed: it is what ``packing`` mode is told)."""

    def __init__(
        self,
        mix: Mix = None,
        supply: Mapping[str, object] | None = None,
        balance: float = DEFAULT_BALANCE,
    ) -> None:
        super().__init__(mix, empty_ok=True)
        if balance < 0:
            raise ValidationError("plugins: corral: balance must be >= 0")
        self.supply = _supply(supply)
        self.balance = balance
        self.ratio = cpus_per_milli(self.mix)
        self.weights = tuple(c.share * scarcity(c, self.supply, self) for c in self.mix)

    def stranded(self, free_milli: int, free_cpus: float) -> float:
        """Free GPU milli that ``free_cpus`` cannot feed at the mix's ratio."""
        if not self.ratio:
            return 0.0
        return max(0.0, free_milli - max(free_cpus, 0.0) / self.ratio)

    def _compute(self, frees: Frees, free_cpus: float) -> float:
        result = super()._compute(frees, free_cpus)
        if self.balance:
            result += self.balance * self.stranded(sum(f for _, f in frees), free_cpus)
        return result


class CorralScore(FragmentationScore):
    """Score: ``trunc(100 * sigmoid((F*(n) - F*(n')) / 1000))`` (see the module); FGD's
    score over ``F*``, with a share assumed on the device :func:`best_share` picks; with
    an empty mix, the ``packing`` score."""

    name = "corral"

    def __init__(
        self,
        weight: float = 1.0,
        mix: Mix = None,
        supply: Mapping[str, object] | None = None,
        balance: float = DEFAULT_BALANCE,
    ) -> None:
        super().__init__(weight)
        self.fragmentation = CorralFragmentation(mix, supply, balance)
        self._packing = None if self.fragmentation.mix else PackingScore()

    def score(self, request: NodeRequest, node: NodeView) -> float:
        if self._packing is not None:
            return self._packing.score(request, node)
        return super().score(request, node)

    def arguments(self) -> dict[str, object]:
        """What a device selection needs to choose as this score assumes."""
        frag = self.fragmentation
        return {"mix": frag.mix, "supply": frag.supply, "balance": frag.balance}

    def best_share(
        self, request: NodeRequest, node: NodeView, before: float
    ) -> tuple[int | None, float] | None:
        position = best_share(request, node, self.fragmentation)
        return None if position is None else (position[0], sigmoid_score(before - position[1]))


def best_share(
    request: NodeRequest, node: NodeView, frag: Fragmentation
) -> tuple[int, float] | None:
    """``(position, F(n'))`` of the device for a share: the least fragmentation after,
    then the busiest device, then the lowest position; None if no device fits."""
    free_cpus = node.free_cpus - request.cpus
    seen: dict[tuple[str, int], float] = {}
    chosen: tuple[float, int, int] | None = None
    for pos, device in enumerate(node.node.devices):
        if not share_fits(request, node, pos):
            continue
        used = node.used_milli[pos]
        after = seen.get((device.model, used))
        if after is None:
            trial = list(node.used_milli)
            trial[pos] += request.gpus.milli
            after = seen[(device.model, used)] = frag.value(frees_of(node, trial), free_cpus)
        rank = (after, -used, pos)
        if chosen is None or rank < chosen:
            chosen = rank
    return None if chosen is None else (chosen[2], chosen[0])


class CorralDeviceSelect:
    """DeviceSelect: a share goes to the device leaving ``F*`` lowest (then the busiest,
    then the lowest index); everything else, and shares when the mix is empty, as
    ``nvlink-devices``."""

    name = "corral-devices"

    def __init__(
        self,
        mix: Mix = None,
        supply: Mapping[str, object] | None = None,
        balance: float = DEFAULT_BALANCE,
    ) -> None:
        self.fragmentation = CorralFragmentation(mix, supply, balance)
        self._inner = NvlinkDeviceSelect()

    @property
    def mix(self) -> tuple[RequestClass, ...]:
        return self.fragmentation.mix

    def select(self, request: NodeRequest, node: NodeView) -> list[tuple[int, ...]] | None:
        if request.gpus.kind is not GpuKind.FRACTION or not self.fragmentation.mix:
            return self._inner.select(request, node)
        position = best_share(request, node, self.fragmentation)
        return None if position is None else [(node.node.devices[position[0]].index,)]
