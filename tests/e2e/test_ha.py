"""High availability with real processes: server replicas sharing one database, leader
SIGKILLed under a stream of submissions, an agent cut off and reconnected."""

from __future__ import annotations

import json
import statistics
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from corral.client import Client
from corral.schemas.api import JobOut
from corral.server.db.engine import normalize_url
from corral.server.db.models import TaskRow
from tests.e2e.cluster import wait_for
from tests.e2e.replicas import Proxy, ReplicatedCluster

JOBS = 36


@pytest.fixture
def replicated(tmp_path: Path, postgres_url: str) -> Iterator[ReplicatedCluster]:
    """Three replicas on one PostgreSQL database, two 4-GPU agents that know all three."""
    c = ReplicatedCluster(tmp_path / "home", postgres_url, replicas=3, node_timeout=10)
    try:
        c.start_server()
        for name in ("node-a", "node-b"):
            c.start_agent(name, "4xH100")
        c.wait_nodes("node-a", "node-b")
        yield c
    finally:
        c.stop()


def marks(path: Path) -> str:
    """A job command that records its id and attempt once per run, then works briefly."""
    return f'echo "$CORRAL_JOB_ID $CORRAL_ATTEMPT" >> {path}; sleep 0.4'


def placement_latency(job: JobOut) -> float:
    placed = next(e.at for e in job.events if e.to_state == "running")
    return placed - job.submitted_at


def assert_no_device_shared(db_url: str) -> None:
    """No two tasks ever held the same GPU at once (from the processes' own times)."""
    engine = create_engine(normalize_url(db_url))
    with Session(engine) as session:
        held = defaultdict(list)
        for task in session.scalars(select(TaskRow)):
            assert task.started_at is not None and task.ended_at is not None, task.job_id
            for gpu in task.gpus:
                held[(task.node, gpu)].append((task.started_at, task.ended_at, task.job_id))
    engine.dispose()
    for device, spans in held.items():
        spans.sort()
        for (_, end, a), (start, _, b) in zip(spans, spans[1:], strict=False):
            assert start >= end - 0.05, f"{device}: jobs {a} and {b} overlap"


def test_leader_sigkill_under_submissions_loses_and_repeats_nothing(
    replicated: ReplicatedCluster, postgres_url: str, tmp_path: Path
) -> None:
    c = replicated
    leaders = wait_for(c.leaders, 10, "a leader")
    assert len(leaders) == 1
    leader = leaders[0]
    status = json.loads(c.cli("status", "-o", "json").stdout)["replicas"]
    assert [r["health"]["leader"] for r in status] == [i == leader for i in range(3)]
    assert {r["health"]["leader_address"] for r in status} == {c.urls[leader]}
    epoch = status[0]["health"]["leader_epoch"]

    token = (c.home / "token").read_text().strip()
    ordered = [c.urls[leader]] + [u for i, u in enumerate(c.urls) if i != leader]
    record = tmp_path / "runs.txt"
    submitted: list[int] = []
    halfway = threading.Event()
    errors: list[BaseException] = []

    def stream() -> None:  # through the leader first, so that the kill hits it mid-flow
        try:
            with Client(ordered, token) as client:
                for i in range(JOBS):
                    spec = {
                        "name": f"j{i}",
                        "command": marks(record),
                        "resources": {"gpus": i % 2 + 1},
                    }
                    submitted.append(client.submit(spec).id)
                    if i == JOBS // 3:
                        halfway.set()
                    time.sleep(0.05)
        except BaseException as exc:  # reported by the test thread
            errors.append(exc)
            halfway.set()

    submitter = threading.Thread(target=stream)
    submitter.start()
    assert halfway.wait(60)
    c.kill_replica(leader)
    killed_at = time.monotonic()
    others = [i for i in range(3) if i != leader]

    def new_leader() -> int | None:
        found = [i for i in others if (h := c.health(i)) and h.leader]
        return found[0] if found else None

    successor = wait_for(new_leader, 15, "another replica to take over")
    takeover = time.monotonic() - killed_at
    submitter.join(60)
    assert not errors, errors
    assert takeover < 10
    health = c.health(successor)
    assert health is not None and health.leader_epoch == epoch + 1

    with Client([c.urls[i] for i in others], token) as client:
        done = client.wait(submitted, timeout=90)
        jobs = {j.id: j for j in client.list(all=True)}
    assert len(jobs) == JOBS  # each submission stored once
    assert sorted(j.name for j in jobs.values()) == sorted(f"j{i}" for i in range(JOBS))
    assert [j.state for j in done] == ["succeeded"] * JOBS
    assert all(j.attempt == 0 for j in done)  # none requeued, none lost
    runs = Counter(record.read_text().split("\n")[:-1])
    assert runs == Counter(f"{j} 0" for j in submitted)  # every job ran exactly once
    assert_no_device_shared(postgres_url)
    # On an idle cluster, a submission to a follower is placed at once (the follower wakes
    # the leader through the database), not at the leader's next 10 s interval.
    follower = next(i for i in others if i != successor)
    idle, started = [], []
    with Client(c.urls[follower], token) as client:
        for _ in range(5):
            job = client.submit({"command": "true", "resources": {"gpus": 1}})
            ran = client.wait(job.id, timeout=30, poll=0.05)[0]
            assert ran.state == "succeeded" and ran.started_at is not None
            idle.append(placement_latency(client.get(job.id)))
            started.append(ran.started_at - ran.submitted_at)
    assert max(idle) < 5
    # A paused leader (SIGSTOP) is deposed; resumed, it finds out and follows.
    last = next(i for i in others if i != successor)
    c.pause_replica(successor)
    try:
        wait_for(lambda: (h := c.health(last)) and h.leader, 15, "the last replica to lead")
    finally:
        c.resume_replica(successor)
    wait_for(lambda: (h := c.health(successor)) and not h.leader, 15, "the old leader to follow")
    with Client(c.urls[successor], token) as client:
        job = client.submit({"command": "true", "resources": {"gpus": 1}})
        assert client.wait(job.id, timeout=30)[0].state == "succeeded"
    assert c.leaders() == [last]
    print(
        f"\nHA: takeover {takeover:.2f}s after SIGKILL (lease TTL {c.lease_ttl:g}s); "
        f"through a follower on an idle cluster: submit-to-placement p50 "
        f"{statistics.median(idle) * 1000:.0f} ms (max {max(idle) * 1000:.0f}), "
        f"submit-to-running p50 {statistics.median(started) * 1000:.0f} ms "
        f"(max {max(started) * 1000:.0f}; agent sync interval {c.sync_interval:g}s)"
    )


def test_agent_cut_off_and_reconnected_on_a_shared_sqlite_file(tmp_path: Path) -> None:
    """Two replicas on one SQLite file; node-a reaches them only through a proxy that is cut
    long enough for the node to be lost: its job is requeued and runs again, once, after
    the old process stopped."""
    home = tmp_path / "home"
    c = ReplicatedCluster(home, f"sqlite:///{home / 'corral.db'}", node_timeout=2)
    proxy = Proxy(c.ports[1])
    record = tmp_path / "runs.txt"
    try:
        c.start_server()
        proxy.restore()
        c.start_agent("node-a", "2xH100", server=proxy.url)
        c.wait_nodes("node-a")
        client = c.client()
        command = f'echo "start $CORRAL_ATTEMPT $(date +%s.%N)" >> {record}; sleep 1.5'
        job = client.submit(
            {"command": command, "resources": {"gpus": 2}, "node_selector": {"host": "node-a"}}
        )
        wait_for(lambda: record.exists(), 30, "the job to start")
        proxy.cut()
        wait_for(lambda: client.get(job.id).attempt == 1, 30, "node-a lost and the job requeued")
        assert {n.name: n.state for n in client.nodes()}["node-a"] == "lost"
        proxy.restore()
        final = client.wait(job.id, timeout=60)[0]
    finally:
        proxy.cut()
        c.stop()
    assert (final.state, final.attempt) == ("succeeded", 1)
    starts = [line.split() for line in record.read_text().splitlines()]
    assert [s[1] for s in starts] == ["0", "1"]
    assert_no_device_shared(c.db)
