"""The server's in-memory telemetry rings: bounded by age and by count, queried by node
and by job."""

from __future__ import annotations

from corral.schemas.agent import GpuTelemetry
from corral.server.services.usage import overlap
from corral.server.telemetry import TelemetryStore


def _reading(index: int, util: float) -> GpuTelemetry:
    return GpuTelemetry(index=index, utilization=util, memory_used=0, memory_total=80)


def test_rings_are_bounded_by_age_and_count() -> None:
    store = TelemetryStore(max_age=10, max_samples=5, resolution=0)
    for t in range(20):
        store.add("n1", float(t), [_reading(0, t)], {})
    assert [s.at for s in store.node_samples("n1")] == [15.0, 16.0, 17.0, 18.0, 19.0]
    aged = TelemetryStore(max_age=10, max_samples=100, resolution=0)
    for t in (0, 5, 11, 16):
        aged.add("n1", float(t), [_reading(0, 1)], {})
    assert [s.at for s in aged.node_samples("n1")] == [11.0, 16.0]  # 0 and 5 are too old


def test_samples_are_kept_a_resolution_apart_with_the_newest_current() -> None:
    store = TelemetryStore(max_age=100, max_samples=100, resolution=10)
    for t in range(0, 31, 2):
        store.add("n1", float(t), [_reading(0, t)], {})
    kept = [s.at for s in store.node_samples("n1", since=-1)]
    assert kept == [0.0, 10.0, 20.0, 30.0]
    assert store.latest("n1", 0).utilization == 30  # type: ignore[union-attr]


def test_samples_by_node_job_and_time() -> None:
    store = TelemetryStore(resolution=0)
    store.add("n1", 1.0, [_reading(0, 80), _reading(1, 0)], {0: (7,)})
    store.add("n2", 1.5, [_reading(0, 50)], {0: (7, 9)})  # a shared GPU
    store.add("n1", 2.0, [_reading(0, 90), _reading(1, 0)], {0: (7,)})
    assert [(s.at, s.gpu) for s in store.node_samples("n1")] == [
        (1.0, 0),
        (1.0, 1),
        (2.0, 0),
        (2.0, 1),
    ]
    assert [(s.at, s.gpu) for s in store.node_samples("n1", since=1.0)] == [(2.0, 0), (2.0, 1)]
    assert [(s.node, s.at) for s in store.job_samples(7)] == [("n1", 1.0), ("n2", 1.5), ("n1", 2.0)]
    assert [s.node for s in store.job_samples(9)] == ["n2"]
    out = store.latest("n1", 1).out()  # type: ignore[union-attr]
    assert (out.job_id, out.job_ids, out.utilization) == (None, [], 0.0)
    assert store.latest("n2", 0).out().job_id == 7  # type: ignore[union-attr]
    assert store.latest("n3", 0) is None
    assert [(s.node, s.gpu, s.at) for s in store.latest_all()] == [
        ("n1", 0, 2.0),
        ("n1", 1, 2.0),
        ("n2", 0, 1.5),
    ]


def test_overlap_clips_a_run_to_the_window() -> None:
    assert overlap(10, 20, 0, 100) == 10
    assert overlap(10, 20, 15, 100) == 5
    assert overlap(10, 20, 0, 12) == 2
    assert overlap(10, 20, 30, 40) == 0
