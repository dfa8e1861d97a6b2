"""Holds and job dependencies over the real API (SPEC section 9): jobs run and end as a
fake node reports their tasks' exits."""

from __future__ import annotations

import pytest

from corral.client import Client
from corral.core.dependency import MAX_REFS
from corral.errors import ConflictError, ValidationError
from corral.schemas.api import JobOut
from tests.e2e.cluster import wait_for
from tests.integration.conftest import Server
from tests.integration.protocol import FakeHardwareAgent, report


def job(client: Client, name: str, **fields: object) -> JobOut:
    return client.submit({"name": name, "command": "x", "resources": {"gpus": 1}, **fields})


def wait_state(client: Client, job_id: int, want: str, reason: str | None = None) -> JobOut:
    def reached() -> bool:
        found = client.get(job_id)
        return found.state == want and (reason is None or found.reason == reason)

    wait_for(reached, 10, f"job {job_id} {want} ({reason})")
    return client.get(job_id)


def end(node: FakeHardwareAgent, job_id: int, exit_code: int) -> None:
    """The node starts the job's task and reports it exited with ``exit_code``."""
    node.sync()
    node.sync([report(job_id, 0, "exited", exit_code=exit_code, ended_at=1.0)])


def test_a_chain_runs_in_order_and_one_never_satisfied_is_cancelled(server: Server) -> None:
    node = FakeHardwareAgent(server, "node-a")
    client = server.client()
    a = job(client, "a")
    b = job(client, "b", dependency=f"afterok:{a.id}")
    c = job(client, "c", dependency=f"afterany:{b.id}")
    wait_state(client, a.id, "running")
    shown = wait_state(client, b.id, "pending", f"waiting for job {a.id} to succeed (afterok)")
    assert shown.dependency == f"afterok:{a.id}" and shown.position is None
    wait_state(client, c.id, "pending", f"waiting for job {b.id} to end (afterany)")
    end(node, a.id, 0)
    wait_state(client, b.id, "running")
    assert client.get(c.id).state == "pending"
    end(node, b.id, 1)  # b fails: c (afterany) runs all the same
    wait_state(client, b.id, "failed")
    wait_state(client, c.id, "running")
    # afterok on a failed job: never satisfied; afternotok on it: runs; after the
    # cancelled one (afterany): runs too
    d = job(client, "d", dependency=f"afterok:{b.id}")
    e = job(client, "e", dependency=f"afternotok:{b.id}")
    never = f"dependency never satisfied: afterok:{b.id}: job {b.id} failed"
    wait_state(client, d.id, "cancelled", never)
    assert client.get(d.id).events[-1].reason == never
    f = job(client, "f", dependency=f"afterany:{d.id}")
    wait_state(client, e.id, "running")
    wait_state(client, f.id, "running")
    # afternotok on a job that succeeds: never satisfied
    g = job(client, "g", dependency=f"afternotok:{a.id}")
    wait_state(client, g.id, "cancelled", f"dependency never satisfied: afternotok:{a.id}: "
               f"job {a.id} succeeded")  # fmt: skip


def test_after_any_of_and_singleton(server: Server) -> None:
    node = FakeHardwareAgent(server, "node-a")
    client = server.client()
    a = job(client, "a", hold=True)
    b = job(client, "b")
    after = job(client, "after", dependency=f"after:{a.id}")
    either = job(client, "either", dependency=f"afterok:{a.id}?afterok:{b.id}")
    wait_state(client, b.id, "running")
    wait_state(client, after.id, "pending", f"waiting for job {a.id} to start (after)")
    end(node, b.id, 0)
    wait_state(client, either.id, "running")  # one of the two suffices
    client.release(a.id)
    wait_state(client, a.id, "running")
    wait_state(client, after.id, "running")  # a started: enough for after
    one = job(client, "solo", dependency="singleton")
    two = job(client, "solo", dependency="singleton")
    wait_state(client, one.id, "running")
    wait_state(client, two.id, "pending", f"waiting for job {one.id} of the same name to end "
               "(singleton)")  # fmt: skip
    end(node, one.id, 0)
    wait_state(client, two.id, "running")


def test_hold_and_release(server: Server) -> None:
    FakeHardwareAgent(server, "node-a")
    client = server.client()
    held = job(client, "h", hold=True)
    assert held.held and held.reason == "held" and held.position is None
    other = job(client, "o")
    wait_state(client, other.id, "running")
    shown = client.get(held.id)
    assert shown.state == "pending" and shown.reason == "held" and shown.estimated_start is None
    with pytest.raises(ConflictError, match="already held"):
        client.hold(held.id)
    with pytest.raises(ConflictError, match="is running; only pending jobs"):
        client.hold(other.id)
    released = client.release(held.id)
    assert not released.held
    wait_state(client, held.id, "running")
    with pytest.raises(ConflictError, match="is running"):
        client.release(held.id)
    # a pending job held by hand, then released
    waiting = job(client, "w", dependency=f"afterok:{other.id}")
    wait_state(client, waiting.id, "pending", f"waiting for job {other.id} to succeed (afterok)")
    client.hold(waiting.id)
    wait_state(client, waiting.id, "pending", "held")
    client.release(waiting.id)
    with pytest.raises(ConflictError, match=f"job {waiting.id} is not held"):
        client.release(waiting.id)
    wait_state(client, waiting.id, "pending", f"waiting for job {other.id} to succeed (afterok)")
    reasons = [e.reason for e in client.get(waiting.id).events]
    assert reasons == ["submitted", "held by user", "released by user"]
    assert [e.reason for e in client.get(held.id).events][:2] == [
        "submitted held",
        "released by user",
    ]


def test_bad_dependencies_are_refused_and_nothing_is_stored(server: Server) -> None:
    admin = server.client()
    bob = Client(server.url, admin.create_token("bob").token)
    alice = Client(server.url, admin.create_token("alice").token)
    theirs = job(bob, "bobs")
    mine = job(alice, "mine")
    before = len(admin.list(all=True))
    cases = {
        "afterfoo:1": "unknown dependency type 'afterfoo'",
        "afterok": "expected afterok:JOB",
        "afterok:": "is not a job",
        f"afterok:{mine.id},afterany:{mine.id}?afterok:{mine.id}": "not both",
        "afterok:999999": "no job with id 999999",
        f"afterok:{theirs.id}": f"no job with id {theirs.id}",  # another user's: not revealed
        "afterok:prep": "'prep' is not a job id",
        "afterok:" + ":".join(str(i) for i in range(1, MAX_REFS + 2)): f"at most {MAX_REFS}",
    }
    for text, message in cases.items():
        with pytest.raises(ValidationError, match=message):
            job(alice, "bad", dependency=text)
    with pytest.raises(ValidationError, match="singleton needs a job name"):
        alice.submit({"command": "x", "dependency": "singleton"})
    with server.http(alice.token) as http:
        answer = http.post("/jobs", json={"command": "x", "dependency": "afterok:999999"})
    assert answer.status_code == 422 and "no job with id 999999" in answer.text
    assert len(admin.list(all=True)) == before
    # admins may depend on anyone's job
    assert job(admin, "ok", dependency=f"afterok:{theirs.id}").dependency == f"afterok:{theirs.id}"
