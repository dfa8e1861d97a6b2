"""Telemetry, GPU-error drains, idle jobs, /metrics, accounting and the event feed,
against the real server, driven by a node that speaks the agent protocol by hand."""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path

import httpx
import pytest

from corral.errors import NotFoundError
from corral.server.db.models import EventRow
from tests.e2e.cluster import wait_for
from tests.integration.conftest import Server
from tests.integration.protocol import FakeHardwareAgent, reading, report

DASHBOARD = Path(__file__).parents[2] / "docs" / "grafana-dashboard.json"


def dashboard_metrics() -> set[str]:
    """The metric names the shipped Grafana dashboard queries."""
    panels = json.loads(DASHBOARD.read_text())["panels"]
    exprs = [t["expr"] for p in panels for t in p.get("targets") or ()]
    names = {n for e in exprs for n in re.findall(r"corral_[a-z_]+", e)}
    assert len(names) >= 12
    return names


def placed(server: Server, job_id: int, attempt: int = 0) -> None:
    def running() -> bool:
        job = server.client().get(job_id)
        return job.state == "running" and job.attempt == attempt

    wait_for(running, 10, f"job {job_id} attempt {attempt} placed")


@pytest.mark.server_options(telemetry_resolution=0)
def test_telemetry_metrics_and_usage(server: Server) -> None:
    node = FakeHardwareAgent(server, "node-a", gpus=4)
    client = server.client()
    job = client.submit({"command": "x", "resources": {"gpus": 2}})
    placed(server, job.id)
    held = node.sync()["tasks"][0]["gpus"]
    assert len(held) == 2
    gpus = [reading(i, 80 if i in held else 0) for i in range(4)]
    t0 = time.time()
    running = [report(job.id, 0, "running", pid=7, started_at=t0)]
    node.sync(running, gpus=gpus)
    node.sync(running, gpus=gpus)

    samples = client.node_telemetry("node-a")
    assert len(samples) == 8
    latest = {s.gpu: s for s in samples[4:]}
    assert {i: (s.utilization, s.job_id) for i, s in latest.items()} == {
        i: (80.0, job.id) if i in held else (0.0, None) for i in range(4)
    }
    assert (latest[0].memory_total, latest[0].temperature, latest[0].power) == (80e9, 50.0, 300.0)
    assert client.node_telemetry("node-a", since=samples[-1].at) == []
    devices = client.nodes()[0].devices  # the latest reading of each GPU, for a cluster map
    assert [(d.utilization, d.memory_used) for d in devices] == [
        (80.0 if i in held else 0.0, 10 * 10**9) for i in range(4)
    ]
    of_job = client.job_telemetry(job.id)
    assert len(of_job) == 4 and {s.gpu for s in of_job} == set(held)
    with pytest.raises(NotFoundError):
        client.node_telemetry("nope")
    with pytest.raises(NotFoundError):
        client.job_telemetry(9999)

    text = client.metrics()
    g = held[0]
    for line in (
        f'corral_gpu_utilization_percent{{gpu="{g}",model="H100",node="node-a"}} 80.0',
        'corral_jobs_running{queue="default"} 1.0',
        'corral_jobs_pending{queue="default"} 0.0',
        'corral_gpus_total{model="H100",node="node-a"} 4.0',
        'corral_gpus_allocated{model="H100",node="node-a"} 2.0',
        'corral_gpus_free{model="H100",node="node-a"} 2.0',
        'corral_node_state{node="node-a",state="ready"} 1.0',
        'corral_nodes{state="ready"} 1.0',
        'corral_job_submission_to_start_seconds_count{queue="default"} 1.0',
        'corral_preemptions_total{queue="default"} 0.0',
        'corral_requeues_total{queue="default"} 0.0',
    ):
        assert line in text, line
    assert "corral_scheduling_cycle_duration_seconds_bucket" in text
    for name in dashboard_metrics():
        assert f"\n{name}" in text, f"the Grafana dashboard uses {name}, which /metrics lacks"
    assert httpx.get(f"{server.url}/metrics").status_code == 401

    ended = [report(job.id, 0, "exited", exit_code=0, started_at=t0, ended_at=t0 + 3600)]
    node.sync(ended, gpus=gpus)
    wait_for(lambda: client.get(job.id).state == "succeeded", 10, "job succeeded")
    window = t0 + 7200  # the report says it ran for an hour from t0: look past it
    by_queue = client.usage("queue", until=window).rows
    assert [(r.key, r.jobs, r.preemptions) for r in by_queue] == [("default", 1, 0)]
    row = by_queue[0]
    assert row.gpu_hours_allocated == pytest.approx(2.0)  # 2 GPUs for an hour
    assert 0 < row.gpu_hours_used < 0.01  # 80% of the few seconds between readings
    assert row.avg_wait == pytest.approx(t0 - job.submitted_at, abs=1e-3)
    half = client.usage("queue", since=t0 + 1800, until=window).rows[0]
    assert half.gpu_hours_allocated == pytest.approx(1.0)  # clipped to the window
    assert half.gpu_hours_used == pytest.approx(row.gpu_hours_used / 2, rel=1e-3)
    assert client.usage("queue", since=t0 + 3700, until=t0 + 9000).rows == []
    (mine,) = client.usage("job", until=window).rows
    assert (mine.key, mine.queue, mine.user) == (str(job.id), "default", job.user)
    assert [r.key for r in client.usage("user").rows] == [job.user]
    with server.http(server.admin_token) as http:
        assert http.get("/usage", params={"by": "team"}).status_code == 422
        backwards = http.get("/usage", params={"since": 10, "until": 5})
        assert backwards.status_code == 422
        assert backwards.json()["message"] == "since (10) is after until (5)"


def test_gpu_errors_drain_the_node_until_undrained(server: Server) -> None:
    node = FakeHardwareAgent(server, "node-a", gpus=2)
    client = server.client()
    job = client.submit({"command": "x", "resources": {"gpus": 2}, "requeue": True})
    placed(server, job.id)
    node.sync()
    running = [report(job.id, 0, "running", pid=7, started_at=time.time())]
    node.sync(running, gpus=[reading(0, 90), reading(1, 90)])
    assert client.nodes()[0].state == "ready"

    faulty = [reading(0, 90, xid_errors=1, last_xid=79), reading(1, 90)]
    answer = node.sync(running, gpus=faulty)
    assert answer["tasks"] == []  # the agent is told to stop the task
    drained = client.nodes()[0]
    assert drained.state == "draining"
    assert "GPU 0: 1 critical Xid event(s) (Xid 79)" in (drained.reason or "")
    requeued = client.get(job.id)
    assert (requeued.state, requeued.attempt) == ("pending", 1)
    why = "GPU errors on node-a (GPU 0: 1 critical Xid event(s) (Xid 79)); requeued"
    assert requeued.events[-1].reason == why
    assert drained.gpus_used == 2  # held until the agent says the process ended
    stopped = [report(job.id, 0, "exited", exit_code=-15, started_at=1.0, ended_at=2.0)]
    node.sync(stopped, gpus=faulty)
    assert client.nodes()[0].gpus_used == 0
    node_events = client.events(entity="node", entity_id="node-a")
    assert [(e.from_state, e.to_state) for e in node_events] == [("ready", "draining")]

    client.undrain("node-a")
    node.sync(gpus=faulty)  # the same counts: already acted on
    assert client.nodes()[0].state == "ready"
    placed(server, job.id, attempt=1)
    node.sync(gpus=[reading(0, 0, xid_errors=1), reading(1, 0, ecc_errors=2)])
    again = client.nodes()[0]
    assert again.state == "draining"
    assert "GPU 1: 2 uncorrectable ECC error(s)" in (again.reason or "")
    assert client.get(job.id).attempt == 2


IDLE_CONFIG = """
queues:
  - name: default
    idle: {threshold: 5, after: 1s, action: flag}
  - name: strict
    idle: {threshold: 5, after: 1s, action: stop}
"""


@pytest.mark.server_options(config=IDLE_CONFIG)
def test_idle_jobs_are_flagged_or_stopped_per_queue(server: Server) -> None:
    node = FakeHardwareAgent(server, "node-a", gpus=4)
    client = server.client()
    lazy = client.submit({"command": "x", "resources": {"gpus": 1}})
    strict = client.submit({"command": "x", "queue": "strict", "resources": {"gpus": 1}})
    placed(server, lazy.id)
    placed(server, strict.id)
    tasks = {t["job_id"]: t["gpus"][0] for t in node.sync()["tasks"]}
    running = [report(j, 0, "running", pid=j, started_at=time.time()) for j in tasks]
    busy = {tasks[lazy.id]: 0.0, tasks[strict.id]: 2.0}

    def sync() -> None:
        node.sync(running, gpus=[reading(i, busy.get(i, 0.0)) for i in range(4)])

    def flagged() -> bool:
        sync()
        return client.get(lazy.id).idle and client.get(strict.id).state == "cancelled"

    wait_for(flagged, 15, "the idle jobs flagged and stopped")
    job = client.get(lazy.id)
    assert job.state == "running" and job.idle_since is not None
    assert job.events[-1].reason == "idle: GPU utilization at or below 5% for 1s"
    assert "stopped by the queue's idle policy" in (client.get(strict.id).reason or "")
    assert 'corral_jobs_idle{queue="default"} 1.0' in client.metrics()

    busy[tasks[lazy.id]] = 50.0

    def busy_again() -> bool:
        sync()
        job = client.get(lazy.id)
        return not job.idle and job.idle_since is None

    wait_for(busy_again, 10, "the job no longer idle")


@pytest.mark.server_options(sse_keepalive=0.2)
def test_event_pages_and_stream(server: Server) -> None:
    FakeHardwareAgent(server, "node-a")
    client = server.client()
    first = client.submit({"command": "x", "resources": {"gpus": 1}})
    # submitted, then placed by the scheduling loop (the stream below replays after the first)
    everything = wait_for(
        lambda: (found := client.events(since_id=0, limit=1000))[1:] and found, 10, "two events"
    )
    assert everything[0].entity == "node" or everything[0].entity == "job"
    submitted = [e for e in everything if e.entity_id == str(first.id)][0]
    assert (submitted.from_state, submitted.to_state, submitted.reason) == (
        "",
        "pending",
        "submitted",
    )
    ids = [e.id for e in everything]
    assert ids == sorted(ids)
    assert client.events(since_id=0, limit=1) == everything[:1]
    assert client.events(limit=1) == everything[-1:]  # without since_id: the latest
    with server.http() as anonymous:
        assert anonymous.get("/events").status_code == 401

    with (
        server.http(server.admin_token) as http,
        http.stream("GET", "/events/stream", headers={"Last-Event-ID": str(ids[0])}) as stream,
    ):
        assert stream.headers["content-type"].startswith("text/event-stream")
        lines = stream.iter_lines()
        seen = []
        for line in lines:
            seen.append(line)
            if line == ": keep-alive":
                break
    assert f"id: {ids[1]}" in seen and f"id: {ids[0]}" not in seen  # replays after the id
    data = next(line for line in seen if line.startswith("data: "))
    assert '"entity_id"' in data and '"to_state"' in data

    later = threading.Timer(0.3, lambda: client.cancel(first.id))
    later.start()
    for event in client.stream_events():
        if event.entity_id == str(first.id) and event.to_state == "cancelled":
            break
    later.join()


@pytest.mark.parametrize("backend", ["postgresql"])  # SQLite writes one transaction at a time
@pytest.mark.server_options(sse_keepalive=0.2, event_gap_wait=60)
def test_stream_waits_for_an_event_still_being_written(server: Server) -> None:
    """Event ids are taken at insert, not at commit: a stream must not pass an id whose
    transaction is still open, or it would never send that event."""

    def event(reason: str) -> EventRow:
        return EventRow(
            entity="node", entity_id="n", attempt=0, at=0.0, from_state="", to_state="up",
            reason=reason,
        )  # fmt: skip

    with server.ctx.sessions() as slow:
        slow.add(first := event("slow"))
        slow.flush()  # id taken, not committed
        with server.ctx.sessions.begin() as fast:
            fast.add(second := event("fast"))
        assert second.id > first.id
        with (
            server.http(server.admin_token) as http,
            http.stream(
                "GET", "/events/stream", headers={"Last-Event-ID": str(first.id - 1)}
            ) as stream,
        ):
            lines = stream.iter_lines()
            held = []
            for line in lines:
                held.append(line)
                if line == ": keep-alive":
                    break
            assert f"id: {second.id}" not in held  # committed, but after an open hole
            slow.commit()
            ids = []
            for line in lines:
                if line.startswith("id: "):
                    ids.append(int(line.removeprefix("id: ")))
                if len(ids) == 2:
                    break
    assert ids == [first.id, second.id]
