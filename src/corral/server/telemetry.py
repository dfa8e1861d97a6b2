"""The recent GPU telemetry the agents report, kept in this process's memory.

One ring per GPU (node, index), bounded both by age (``max_age`` seconds behind the
newest sample of that GPU) and by count (``max_samples``): memory stays bounded whatever
the sync interval. History is not persisted: a restarted server starts empty, and with
several replicas each keeps what its own agents' syncs brought. What must survive (GPU
time actually used, for accounting) is accumulated on the task rows instead.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from corral.schemas.agent import GpuTelemetry
from corral.schemas.api import TelemetrySample

DEFAULT_MAX_AGE = 3600.0
DEFAULT_MAX_SAMPLES = 1800


@dataclass(frozen=True)
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
        self, max_age: float = DEFAULT_MAX_AGE, max_samples: int = DEFAULT_MAX_SAMPLES
    ) -> None:
        self.max_age = max_age
        self.max_samples = max_samples
        self._rings: dict[tuple[str, int], deque[Sample]] = {}
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
                ring = self._rings.setdefault((node, r.index), deque(maxlen=self.max_samples))
                ring.append(
                    Sample(
                        at=at,
                        node=node,
                        gpu=r.index,
                        utilization=r.utilization,
                        memory_used=r.memory_used,
                        memory_total=r.memory_total,
                        temperature=r.temperature,
                        power=r.power,
                        ecc_errors=r.ecc_errors,
                        xid_errors=r.xid_errors,
                        job_ids=holders.get(r.index, ()),
                    )
                )
                while ring[0].at < at - self.max_age:
                    ring.popleft()

    def latest(self, node: str, gpu: int) -> Sample | None:
        with self._lock:
            ring = self._rings.get((node, gpu))
            return ring[-1] if ring else None

    def latest_all(self) -> list[Sample]:
        """The newest sample of every GPU ever reported (in node, index order)."""
        with self._lock:
            return [ring[-1] for _, ring in sorted(self._rings.items()) if ring]

    def node_samples(self, node: str, since: float = 0.0) -> list[Sample]:
        """Samples of ``node`` taken after ``since``, by time then GPU."""
        with self._lock:
            rings = [ring for (name, _), ring in self._rings.items() if name == node]
            found = [s for ring in rings for s in ring if s.at > since]
        return sorted(found, key=lambda s: (s.at, s.gpu))

    def job_samples(self, job_id: int, since: float = 0.0) -> list[Sample]:
        """Samples of GPUs while ``job_id`` held them, taken after ``since``."""
        with self._lock:
            found = [
                s
                for ring in self._rings.values()
                for s in ring
                if s.at > since and job_id in s.job_ids
            ]
        return sorted(found, key=lambda s: (s.at, s.node, s.gpu))
