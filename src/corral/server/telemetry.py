"""The recent GPU telemetry the agents report, kept in this process's memory.

One ring per GPU (node, index), bounded both by age (``max_age`` seconds behind the
newest sample of that GPU) and by count (``max_samples``). Samples are kept at least
``resolution`` seconds apart: while the newest is closer than that to the one before it,
a new reading replaces it instead of adding one. So the latest reading is always current
and memory does not depend on the sync interval: about 140 bytes a sample, with the
defaults (an hour at 10 s) some 50 KB per GPU, 400 MB for 1,000 8-GPU nodes. History is
not persisted: a restarted server starts empty, and with several replicas each keeps what
its own agents' syncs brought. What must survive (GPU time actually used, for
accounting) is accumulated on the task rows instead.
"""

from __future__ import annotations

import itertools
import threading
from collections import defaultdict, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from corral.schemas.agent import GpuTelemetry
from corral.schemas.api import TelemetrySample

DEFAULT_MAX_AGE = 3600.0
DEFAULT_MAX_SAMPLES = 362  # an hour at 10 s, and the newest
DEFAULT_RESOLUTION = 10.0

Key = tuple[str, int]  # node, GPU index
# A kept reading: at, utilization, memory used, memory total, temperature, power, ECC and
# Xid counts, ids of the jobs holding the GPU. A plain tuple of scalars, which the garbage
# collector stops tracking: a million kept samples then cost no collection pauses.
Row = tuple[float, float, int, int, float | None, float | None, int, int, tuple[int, ...]]
AT, JOBS = 0, 8


@dataclass(frozen=True, slots=True)
class Sample:
    at: float
    node: str
    gpu: int
    utilization: float
    memory_used: int
    memory_total: int
    temperature: float | None
    power: float | None
    ecc_errors: int
    xid_errors: int
    job_ids: tuple[int, ...]  # the jobs holding the GPU when it was read

    @classmethod
    def of(cls, key: Key, row: Row) -> Sample:
        return cls(row[AT], key[0], key[1], *row[1:])

    def out(self) -> TelemetrySample:
        return TelemetrySample(
            at=self.at,
            node=self.node,
            gpu=self.gpu,
            utilization=self.utilization,
            memory_used=self.memory_used,
            memory_total=self.memory_total,
            temperature=self.temperature,
            power=self.power,
            ecc_errors=self.ecc_errors,
            xid_errors=self.xid_errors,
            job_id=self.job_ids[0] if self.job_ids else None,
            job_ids=list(self.job_ids),
        )


class TelemetryStore:
    """Thread-safe rings of samples per GPU; see the module's docstring for the bounds."""

    def __init__(
        self,
        max_age: float = DEFAULT_MAX_AGE,
        max_samples: int = DEFAULT_MAX_SAMPLES,
        resolution: float = DEFAULT_RESOLUTION,
    ) -> None:
        self.max_age = max_age
        self.max_samples = max_samples
        self.resolution = resolution
        self._rings: dict[Key, deque[Row]] = {}
        self._by_job: defaultdict[int, set[Key]] = defaultdict(set)  # rings a job was in
        self._lock = threading.Lock()

    def add(
        self,
        node: str,
        at: float,
        readings: Iterable[GpuTelemetry],
        holders: Mapping[int, tuple[int, ...]],
    ) -> None:
        """Record one sync's readings; ``holders``: GPU index -> ids of jobs holding it."""
        with self._lock:
            for r in readings:
                key = (node, r.index)
                ring = self._rings.setdefault(key, deque(maxlen=self.max_samples))
                jobs = tuple(holders.get(r.index, ()))
                row: Row = (
                    at,
                    r.utilization,
                    r.memory_used,
                    r.memory_total,
                    r.temperature,
                    r.power,
                    r.ecc_errors,
                    r.xid_errors,
                    jobs,
                )
                if len(ring) >= 2 and ring[-1][AT] - ring[-2][AT] < self.resolution:
                    ring[-1] = row
                else:
                    ring.append(row)
                while ring[0][AT] < at - self.max_age:
                    ring.popleft()
                for job_id in jobs:
                    self._by_job[job_id].add(key)

    def latest(self, node: str, gpu: int) -> Sample | None:
        with self._lock:
            ring = self._rings.get((node, gpu))
            return Sample.of((node, gpu), ring[-1]) if ring else None

    def latest_all(self) -> list[Sample]:
        """The newest sample of every GPU ever reported (in node, index order)."""
        with self._lock:
            return [Sample.of(key, ring[-1]) for key, ring in sorted(self._rings.items()) if ring]

    def node_samples(self, node: str, since: float = 0.0) -> list[Sample]:
        """Samples of ``node`` taken after ``since``, by time then GPU."""
        with self._lock:
            found = [
                Sample.of(key, row)
                for key, ring in self._rings.items()
                if key[0] == node
                for row in _after(ring, since)
            ]
        return sorted(found, key=lambda s: (s.at, s.gpu))

    def job_samples(self, job_id: int, since: float = 0.0) -> list[Sample]:
        """Samples of GPUs while ``job_id`` held them, taken after ``since``."""
        with self._lock:
            keys = self._by_job.get(job_id, set())
            found = []
            for key in list(keys):
                ring = self._rings.get(key, ())
                if not any(job_id in row[JOBS] for row in ring):
                    keys.discard(key)  # aged out of that ring
                    continue
                found += [Sample.of(key, r) for r in _after(ring, since) if job_id in r[JOBS]]
            if not keys:
                self._by_job.pop(job_id, None)
        return sorted(found, key=lambda s: (s.at, s.node, s.gpu))


def _after(ring: deque[Row], since: float) -> list[Row]:
    """The rows of ``ring`` taken after ``since``, oldest first (read from the end)."""
    found = list(itertools.takewhile(lambda row: row[AT] > since, reversed(ring)))
    found.reverse()
    return found
