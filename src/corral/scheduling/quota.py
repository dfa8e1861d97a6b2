"""Queue quotas: usage, nominal quota, cohort borrowing and admission. Pure.

Resource keys are ``"gpus"`` (every GPU) or a GPU model name (``"H100"``), as written in
a queue's ``quota`` and ``borrowing_limit``. Amounts are GPUs: a whole device counts 1, a
share ``milli / 1000``, a MIG instance ``Ng / 7`` of its profile (``3g.40gb``: 3/7). TPU
chips are not GPUs: no key counts them.

- **Usage** of a queue under a key is what its allocations hold: under ``"gpus"``
  everything, under a model key the devices whose model matches it (``model_matches``:
  ``H100`` matches ``H100-SXM-80GB``), read from the nodes the allocation runs on. A device
  matching several configured keys counts under each.
- **Nominal** quota is the queue's ``quota`` entry. A key the queue does not list is
  unlimited for it, and a queue with no ``quota`` at all is unlimited: configurations
  without quotas admit everything, as before.
- **Borrowing**: ``borrowed = max(0, usage - nominal)``. Queues sharing a ``cohort`` may
  borrow what the cohort's queues leave unused: for a key, ``sum(max(0, nominal - usage))
  - sum(borrowed)`` over the cohort's queues that have a nominal quota for it (what was
  already lent out is no longer there to lend), each borrower up to its
  ``borrowing_limit`` for the key (absent: no limit beyond the cohort's unused quota). A
  queue without a cohort never borrows; an unlimited queue neither lends nor borrows.
- **Reclaim**: a queue whose job would fit within its own nominal quota may take back
  what it lent: :meth:`QuotaBook.reclaimable` lists the allocations of the cohort's other
  queues while those queues borrow.

A job's demand (:meth:`QuotaBook.demand`) comes from its spec before placement: nodes x
GPUs per node under ``"gpus"``, and under a model key when its ``gpu_model`` (or the
``H100:8`` prefix; none: any model) pins that key, that is when every GPU model in the
cluster that the job may land on matches the key. When the job may land on models of
several keys, the demand names none of them; the placement's exact amounts
(:meth:`QuotaBook.amounts` of the trial allocation) then say which key it uses, so the
cycle should admit on the placement: ``book.admit(job, book.amounts(trial))``.

The book is a working copy for one cycle: ``assume`` and ``release`` change it and return
the undo, like the snapshot.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from corral.core.allocation import MIG_SLICES, Allocation
from corral.core.job import Job, JobSpec
from corral.core.node import Node
from corral.core.resources import MILLI, GpuKind, model_matches
from corral.scheduling.config import SchedulerConfig

GPUS = "gpus"
EPSILON = 1e-9
_MIG_SLICES = re.compile(r"^(\d+)g\.", re.IGNORECASE)

Amounts = Mapping[str, float]  # resource key -> GPUs


def mig_gpus(profile: str) -> float:
    """A MIG instance as a fraction of its GPU: ``3g.40gb`` -> 3/7 (at most 1)."""
    match = _MIG_SLICES.match(profile)
    slices = int(match.group(1)) if match else 1
    return min(1.0, slices / MIG_SLICES)


def gpus_per_node(spec: JobSpec) -> float:
    """GPUs one node of the job holds: the whole count, the share (``milli / 1000``), or
    the MIG instance by its profile (shares and MIG instances are one task per node)."""
    gpus = spec.gpus
    if gpus.kind is GpuKind.WHOLE:
        return float(gpus.count)
    if gpus.kind is GpuKind.FRACTION:
        return gpus.milli / MILLI
    if gpus.kind is GpuKind.MIG:
        return mig_gpus(gpus.mig_profile or "")
    return 0.0


def _fmt(amount: float, key: str) -> str:
    noun = "GPU" if abs(amount - 1) < EPSILON else "GPUs"
    return f"{amount:g} {noun}" if key == GPUS else f"{amount:g} {key} {noun}"


def has_quotas(config: SchedulerConfig) -> bool:
    """Whether any queue has a nominal quota (else every job is admitted: no book needed)."""
    return any(q.quota for q in config.queues)


@dataclass(frozen=True)
class QuotaRow:
    """One queue and key, for ``corral queues``: ``nominal`` None means unlimited."""

    queue: str
    key: str
    nominal: float | None
    usage: float
    borrowed: float
    borrowing_limit: float | None


class QuotaBook:
    """Usage and quotas per queue and key, for one cycle (see the module docstring)."""

    def __init__(
        self,
        config: SchedulerConfig,
        device_models: Mapping[str, Mapping[int, tuple[str, tuple[str, ...]] | None]],
    ) -> None:
        self.config = config
        self.version = 0  # moves with every change (caches keyed on the book's state)
        self._queues = {q.name: q for q in config.queues}
        self._nominal = {q.name: dict(q.quota) for q in config.queues}
        self._limit = {q.name: dict(q.borrowing_limit) for q in config.queues}
        keys = {GPUS}
        for q in config.queues:
            keys.update(k for k, _ in q.quota)
            keys.update(k for k, _ in q.borrowing_limit)
        self.keys: tuple[str, ...] = (GPUS, *sorted(keys - {GPUS}))
        self._model_keys = self.keys[1:]
        # node -> device index -> (model, MIG profiles); None: not a GPU (a TPU chip)
        self._devices = device_models
        self._models = sorted(
            {d[0] for devs in device_models.values() for d in devs.values() if d is not None}
        )
        self._amounts: dict[int, tuple[Allocation, dict[str, float]]] = {}
        self._usage: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self._holders: dict[str, dict[int, Allocation]] = defaultdict(dict)
        self._cohorts: dict[str, list[str]] = defaultdict(list)
        for q in config.queues:
            if q.cohort is not None:
                self._cohorts[q.cohort].append(q.name)

    @classmethod
    def build(
        cls, config: SchedulerConfig, allocations: Iterable[Allocation], nodes: Iterable[Node]
    ) -> QuotaBook:
        """The book for the allocations that hold resources on ``nodes``."""
        devices = {
            n.name: {
                d.index: (d.model, d.mig) if getattr(d, "kind", "gpu") == "gpu" else None
                for d in n.devices
            }
            for n in nodes
        }
        book = cls(config, devices)
        for alloc in allocations:
            book._add(alloc, +1)
        book.version = 0
        return book

    # --- amounts -------------------------------------------------------------------------

    def amounts(self, alloc: Allocation) -> dict[str, float]:
        """GPUs ``alloc`` holds under each key (keys it holds nothing under are left out).
        Memoized per job's allocation (they are immutable; do not mutate the result)."""
        entry = self._amounts.get(alloc.job_id)
        # (the same object, usually; trial placements of one job differ: compared then)
        if entry is None or (entry[0] is not alloc and entry[0] != alloc):
            entry = self._amounts[alloc.job_id] = (alloc, self._compute_amounts(alloc))
        return entry[1]

    def _compute_amounts(self, alloc: Allocation) -> dict[str, float]:
        out: dict[str, float] = defaultdict(float)
        for task in alloc.tasks:
            devices = self._devices.get(task.node, {})
            slots = task.mig_slots or (None,) * len(task.gpus)
            for index, slot in zip(task.gpus, slots, strict=True):
                device = devices.get(index, ("", ()))  # unknown node or device: a GPU
                if device is None:
                    continue  # TPU chips are not GPUs: no GPU quota counts them
                model, mig = device
                if slot is not None:
                    amount = mig_gpus(mig[slot]) if 0 <= slot < len(mig) else 1 / MIG_SLICES
                else:
                    amount = task.gpu_milli / MILLI
                out[GPUS] += amount
                for key in self._model_keys:
                    if model and model_matches(model, key):
                        out[key] += amount
        return dict(out)

    def demand(self, spec: JobSpec) -> dict[str, float]:
        """What a job of ``spec`` will hold, by key, as far as the spec pins it down."""
        out: dict[str, float] = {}
        for part in spec.parts:  # every role of a job with roles
            total = gpus_per_node(part) * part.nodes
            if total <= 0:
                continue
            out[GPUS] = out.get(GPUS, 0.0) + total
            pattern = part.model_pattern
            landing = [m for m in self._models if model_matches(m, pattern)]
            for key in self._model_keys:
                if landing and all(model_matches(m, key) for m in landing):
                    out[key] = out.get(key, 0.0) + total
        return out

    # --- state ---------------------------------------------------------------------------

    def usage(self, queue: str) -> dict[str, float]:
        """GPUs the queue holds under each configured key."""
        held = self._usage.get(queue, {})
        return {key: held.get(key, 0.0) for key in self.keys}

    def nominal(self, queue: str) -> dict[str, float]:
        """The queue's nominal quota by key; keys not listed are unlimited."""
        return dict(self._nominal.get(queue, {}))

    def borrowing(self, queue: str) -> dict[str, float]:
        """What the queue borrows beyond its nominal quota, by key (only keys > 0)."""
        out = {}
        held = self._usage.get(queue, {})
        for key, nominal in self._nominal.get(queue, {}).items():
            borrowed = held.get(key, 0.0) - nominal
            if borrowed > EPSILON:
                out[key] = borrowed
        return out

    def lendable(self, cohort: str, key: str) -> float:
        """The cohort's unused nominal quota under ``key`` not already lent out."""
        total = 0.0
        for name in self._cohorts.get(cohort, ()):
            nominal = self._nominal[name].get(key)
            if nominal is not None:
                total += nominal - self._usage.get(name, {}).get(key, 0.0)
        return max(0.0, total)

    def cohort(self, queue: str) -> str | None:
        config = self._queues.get(queue)
        return config.cohort if config else None

    def rows(self) -> list[QuotaRow]:
        """Every configured queue and key, for ``corral queues``."""
        rows = []
        for q in self.config.queues:
            held = self._usage.get(q.name, {})
            nominal, limit = self._nominal[q.name], self._limit[q.name]
            for key in self.keys:
                cap = nominal.get(key)
                used = held.get(key, 0.0)
                if cap is None and key != GPUS and not used:
                    continue
                borrowed = max(0.0, used - cap) if cap is not None else 0.0
                rows.append(QuotaRow(q.name, key, cap, used, borrowed, limit.get(key)))
        return rows

    # --- admission -----------------------------------------------------------------------

    def admit(self, job: Job, gpus_by_key: Amounts) -> str | None:
        """None if ``job`` may hold ``gpus_by_key`` more in its queue (within the nominal
        quota, or by borrowing within its cohort and limit); else why not."""
        queue = job.queue
        nominal = self._nominal.get(queue)
        if not nominal:
            return None
        held = self._usage.get(queue, {})
        for key, need in gpus_by_key.items():
            cap = nominal.get(key)
            if cap is None or need <= 0:
                continue
            used = held.get(key, 0.0)
            after = used + need - cap
            if after <= EPSILON:
                continue
            head = f"queue {queue}: quota {_fmt(cap, key)}, {used:g} in use, needs {need:g}"
            cohort = self.cohort(queue)
            if cohort is None:
                return f"{head}; no cohort to borrow from"
            limit = self._limit[queue].get(key)
            if limit is not None and after > limit + EPSILON:
                return f"{head}; borrowing limit {_fmt(limit, key)}"
            more = after - max(0.0, used - cap)  # what it must borrow beyond what it does
            lendable = self.lendable(cohort, key)
            if more > lendable + EPSILON:
                return f"{head}; cohort {cohort} has {_fmt(lendable, key)} to lend"
        return None

    def within_nominal(self, queue: str, gpus_by_key: Amounts) -> bool:
        """Whether the queue has a nominal quota and ``gpus_by_key`` more fits within it
        under every key it limits (the condition for reclaiming lent quota)."""
        nominal = self._nominal.get(queue)
        if not nominal or self.cohort(queue) is None:
            return False
        held = self._usage.get(queue, {})
        return all(
            held.get(key, 0.0) + need <= cap + EPSILON
            for key, need in gpus_by_key.items()
            if (cap := nominal.get(key)) is not None
        )

    def reclaimable(self, queue: str) -> list[int]:
        """Job ids of allocations of the other queues of ``queue``'s cohort that borrow now
        (that ``queue`` may preempt to get its lent quota back when its job fits within its
        nominal quota). Lowest priority first, then most recently started."""
        cohort = self.cohort(queue)
        if cohort is None:
            return []
        found: list[Allocation] = []
        for other in self._cohorts[cohort]:
            if other != queue and self.borrowing(other):
                found += self._holders.get(other, {}).values()
        found.sort(key=lambda a: (a.priority, -(a.started_at or 0.0), a.job_id))
        return [a.job_id for a in found]

    # --- what-if -------------------------------------------------------------------------

    def assume(self, queue: str, amounts: Amounts) -> Callable[[], None]:
        """Count ``amounts`` more for ``queue`` (a placement this cycle); returns the undo."""
        self._change(queue, amounts, +1)
        return lambda: self._change(queue, amounts, -1)

    def assume_allocation(self, alloc: Allocation) -> Callable[[], None]:
        """Count a placement by its allocation (its queue and exact amounts); the undo."""
        self._add(alloc, +1)
        return lambda: self._add(alloc, -1)

    def release(self, alloc: Allocation) -> Callable[[], None]:
        """Stop counting ``alloc`` (what if it were preempted); returns the undo."""
        self._add(alloc, -1)
        return lambda: self._add(alloc, +1)

    def _add(self, alloc: Allocation, sign: int) -> None:
        self._change(alloc.queue, self.amounts(alloc), sign)
        holders = self._holders[alloc.queue]
        if sign > 0:
            holders[alloc.job_id] = alloc
        else:
            holders.pop(alloc.job_id, None)

    def _change(self, queue: str, amounts: Amounts, sign: int) -> None:
        self.version += 1
        held = self._usage[queue]
        for key, amount in amounts.items():
            held[key] += sign * amount
            if abs(held[key]) < EPSILON:
                held[key] = 0.0
