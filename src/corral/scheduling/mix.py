"""The request mix the ``corral`` sharing policy measures fragmentation against, learned
from the jobs seen instead of written in the configuration.

The FGD paper (ATC'23) takes its target workload from the pod list: the most frequent
request classes ``(cpus, gpu_milli, gpus, model)`` that together cover 95% of the pods,
shares renormalised over them. :class:`MixLearner` does the same over the jobs a
scheduler knows: those pending and running (``live``, by id) and a bounded window of
the last ones to end (``recent``), counting each job once, by the class of one of its
nodes (``fgd.request_class_key``; MIG and TPU requests are not counted). The GPU supply
is the GPUs per model of the nodes (:func:`gpu_supply`).

Updating is incremental (a job added, ended or synced costs O(1)); the mix itself is
recomputed only every few changes, and :meth:`MixLearner.refresh` hands a new one back
only when it differs **materially** from the last one handed back
(:meth:`LearnedMix.differs`: shares moved by more than ``tolerance`` in all, or the GPU
models changed), so the caller rebuilds its profile rarely. Deterministic: the same
sequence of calls gives the same mixes. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass

from corral.core.job import JobSpec
from corral.core.node import Node
from corral.core.tpu import GPU
from corral.scheduling.config import SchedulerConfig
from corral.scheduling.plugins.fgd import ClassKey, RequestClass, classes_of, request_class_key

COVERAGE = 0.95  # the kept classes cover at least this share of the jobs counted
DEFAULT_WINDOW = 1000  # jobs that ended, remembered
DEFAULT_TOLERANCE = 0.05  # total variation between two mixes that is worth a new profile
DEFAULT_CHURN = 0.25  # and changes since the last new mix, as a share of the jobs counted
LEARNING_POLICY = "corral"  # the sharing policy that takes a learned mix

Supply = tuple[tuple[str, int], ...]  # (GPU model, GPUs), sorted by model


def gpu_supply(nodes: Iterable[Node]) -> dict[str, int]:
    """GPUs per model over ``nodes`` (devices in MIG mode and TPU chips left out)."""
    supply: Counter[str] = Counter()
    for node in nodes:
        for device in node.devices:
            if not device.mig and device.kind == GPU:
                supply[device.model] += 1
    return dict(sorted(supply.items()))


def _key(c: RequestClass) -> ClassKey:
    return (c.cpus, c.gpu_milli, c.gpus, c.model or "")


def _variation(p: Mapping[Hashable, float], q: Mapping[Hashable, float]) -> float:
    """Total variation distance: half the sum of the differences (0: same, 1: disjoint)."""
    return 0.5 * sum(abs(p.get(k, 0.0) - q.get(k, 0.0)) for k in p.keys() | q.keys())


@dataclass(frozen=True)
class LearnedMix:
    """What the sharing policy is told: the request classes with their shares (empty:
    nothing seen yet) and the GPUs per model; ``jobs``: the jobs counted."""

    classes: tuple[RequestClass, ...] = ()
    supply: Supply = ()
    jobs: int = 0

    @property
    def empty(self) -> bool:
        return not self.classes

    def shares(self) -> dict[ClassKey, float]:
        return {_key(c): c.share for c in self.classes}

    def distance(self, other: LearnedMix) -> float:
        """Total variation between the two mixes' shares (1 when one is empty and the
        other not)."""
        if self.empty or other.empty:
            return 0.0 if self.empty == other.empty else 1.0
        return _variation(self.shares(), other.shares())

    def differs(self, other: LearnedMix, tolerance: float = DEFAULT_TOLERANCE) -> bool:
        """Whether ``other`` calls for a new profile: the shares moved by more than
        ``tolerance`` in all (a new class as large, or one gone), one is empty and the
        other not, or the GPU models changed, or their shares of the GPUs moved by more
        than ``tolerance``."""
        if self.distance(other) > tolerance:
            return True
        mine, theirs = dict(self.supply), dict(other.supply)
        if mine.keys() != theirs.keys():
            return True
        total, others = sum(mine.values()), sum(theirs.values())
        if not total or not others:
            return total != others
        share = {m: n / total for m, n in mine.items()}
        return _variation(share, {m: n / others for m, n in theirs.items()}) > tolerance

    def arguments(self) -> dict[str, object]:
        """The ``corral`` plugin's arguments this mix gives (``mix``, ``supply``)."""
        return {"mix": self.classes, "supply": dict(self.supply)}


def learned_arguments(config: SchedulerConfig, learned: LearnedMix | None) -> dict[str, object]:
    """The arguments a learned mix adds to the sharing policy's score plugin (the
    configured ones win over them): for ``corral``, the learned ``mix`` and ``supply``
    (an empty mix when there is none yet, which places as ``packing``); none for the
    other policies."""
    if config.policy.sharing != LEARNING_POLICY:
        return {}
    return (learned or LearnedMix()).arguments()


def learns_mix(config: SchedulerConfig) -> bool:
    """Whether the profile for ``config`` takes a learned mix: the sharing policy is
    ``corral`` and no configured ``corral`` plugin gives both ``mix`` and ``supply``."""
    if config.policy.sharing != LEARNING_POLICY:
        return False
    given: set[str] = set()
    for ref in config.plugins:
        if ref.name == LEARNING_POLICY:
            given |= {name for name, _ in ref.args}
    return not {"mix", "supply"} <= given


class MixLearner:
    """The request mix of the jobs live (pending or running) and of the last ``window``
    to end, learned incrementally (see the module)."""

    def __init__(
        self,
        window: int = DEFAULT_WINDOW,
        coverage: float = COVERAGE,
        tolerance: float = DEFAULT_TOLERANCE,
        churn: float = DEFAULT_CHURN,
    ) -> None:
        if window < 0 or not 0 < coverage <= 1 or not 0 <= tolerance < 1 or churn < 0:
            raise ValueError(
                "MixLearner: needs window >= 0, 0 < coverage <= 1, 0 <= tolerance < 1, churn >= 0"
            )
        self.window, self.coverage, self.tolerance = window, coverage, tolerance
        self.churn = churn
        self._live: dict[Hashable, ClassKey | None] = {}
        self._recent: deque[ClassKey | None] = deque()
        self._counts: Counter[ClassKey] = Counter()
        self._total = 0  # jobs counted (sum of _counts)
        self._changes = 0  # count changes since the mix was last computed
        self._since = 0  # count changes since the last new mix
        self._checked_supply: Supply | None = None
        self.current = LearnedMix()  # the mix last handed back by refresh
        self.seeded = False  # whether history was loaded (seed)

    # -- what is seen --------------------------------------------------------------

    def add(self, job_id: Hashable, spec: JobSpec) -> None:
        """A job is live (pending or running); once per id until it ends."""
        if job_id in self._live:
            return
        key = self._live[job_id] = request_class_key(spec)
        self._count(key, +1)

    def end(self, job_id: Hashable) -> None:
        """A live job ended (or left): it moves to the window of recent jobs."""
        if job_id not in self._live:
            return
        key = self._live.pop(job_id)
        self._count(key, -1)
        self._remember(key)

    def seed(self, ended: Iterable[JobSpec]) -> None:
        """Jobs that ended before this learner started (oldest first), as recent ones."""
        for spec in ended:
            self._remember(request_class_key(spec))
        self.seeded = True

    def sync(self, live: Iterable[tuple[Hashable, JobSpec]]) -> None:
        """The live jobs are exactly ``live`` (id, spec): new ones are added, the others
        ended (for a caller that reloads its state, like the control plane)."""
        seen: set[Hashable] = set()
        for job_id, spec in live:
            seen.add(job_id)
            if job_id not in self._live:
                self.add(job_id, spec)
        for job_id in [j for j in self._live if j not in seen]:
            self.end(job_id)

    def _remember(self, key: ClassKey | None) -> None:
        if not self.window:
            return
        self._recent.append(key)
        self._count(key, +1)
        if len(self._recent) > self.window:
            self._count(self._recent.popleft(), -1)

    def _count(self, key: ClassKey | None, sign: int) -> None:
        if key is None:
            return
        self._counts[key] += sign
        if not self._counts[key]:
            del self._counts[key]
        self._total += sign
        self._changes += 1
        self._since += 1

    # -- the mix -------------------------------------------------------------------

    @property
    def jobs(self) -> int:
        """Jobs counted (live and recent, MIG and TPU requests left out)."""
        return self._total

    def learned(self, supply: Mapping[str, int]) -> LearnedMix:
        """The mix now, with ``supply`` (GPUs per model, :func:`gpu_supply`)."""
        self._changes = 0
        return LearnedMix(
            classes_of(self._counts, self.coverage),
            tuple(sorted(supply.items())),
            self._total,
        )

    def refresh(self, supply: Mapping[str, int]) -> LearnedMix | None:
        """The mix now if it differs materially from :attr:`current` (which it then
        becomes), else None. Unless the supply changed, it is looked at only once the
        jobs counted changed by ``churn`` of their number since the last new mix (so a
        small, noisy history is not followed job by job) and by ``tolerance / 4`` since it
        was last computed (so calling this every cycle is cheap)."""
        key = tuple(sorted(supply.items()))
        if key == self._checked_supply and (
            self._changes < max(1, self.tolerance * self._total / 4)
            or self._since < max(1, self.churn * self._total)
        ):
            return None
        self._checked_supply = key
        fresh = self.learned(supply)
        if not self.current.differs(fresh, self.tolerance):
            return None
        self.current, self._since = fresh, 0
        return fresh
