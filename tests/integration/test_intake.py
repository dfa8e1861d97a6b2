"""The batched submission writer (``services.intake``) on SQLite and PostgreSQL: each
submission of a batch gets its own outcome, keys and limits hold within a batch, a key
race with another replica falls back to one-by-one storing, and a refused batch stores
nothing."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from corral.errors import (
    ConflictError,
    LimitExceededError,
    PermissionDeniedError,
    UnavailableError,
)
from corral.schemas.manifest import JobManifest
from corral.server.db.models import EventRow, IdempotencyKeyRow, JobRow
from corral.server.services import intake
from corral.server.services.intake import Submission
from tests.integration.conftest import Server

CONFIG = """
queues:
  - name: default
  - name: private
    users: [alice]
  - name: small
    max_pending_per_user: 2
"""
pytestmark = pytest.mark.server_options(config=CONFIG)


def _manifest(**fields: object) -> JobManifest:
    return JobManifest.model_validate({"command": ["true"], **fields})


def _count(server: Server, model: type, *where: object) -> int:
    with server.ctx.sessions() as session:
        return session.scalar(select(func.count()).select_from(model).where(*where)) or 0


def test_one_batch_many_outcomes(server: Server) -> None:
    batch = [
        Submission(_manifest(name="a"), "bob", admin=False, key=None),
        Submission(_manifest(name="b", queue="private"), "bob", admin=False, key=None),
        Submission(_manifest(name="c", queue="private"), "alice", admin=False, key=None),
        Submission(_manifest(name="d", queue="small"), "bob", admin=False, key=None),
        Submission(_manifest(name="e", queue="small"), "bob", admin=False, key=None),
        Submission(_manifest(name="f", queue="small"), "bob", admin=False, key=None),
    ]
    server.ctx.intake.store(batch)
    with pytest.raises(PermissionDeniedError, match="bob may not submit to queue 'private'"):
        batch[1].future.result()
    with pytest.raises(LimitExceededError, match="bob has in queue 'small' 2 \\(limit 2\\)"):
        batch[5].future.result()  # the batch's own admissions count
    stored = [batch[i].future.result() for i in (0, 2, 3, 4)]
    assert all(created for _, created in stored)
    ids = [job.id for job, _ in stored]
    assert ids == sorted(ids) and len(set(ids)) == 4  # in submission order
    for (job, _), name in zip(stored, "acde", strict=True):
        assert (job.name, job.state, job.attempt) == (name, "pending", 0)
        assert server.client().get(job.id).name == name
    assert _count(server, JobRow) == 4
    assert _count(server, EventRow, EventRow.reason == "submitted") == 4


def test_a_key_twice_in_one_batch_makes_one_job(server: Server) -> None:
    batch = [
        Submission(_manifest(name="x"), "bob", admin=False, key="k1"),
        Submission(_manifest(name="x"), "bob", admin=False, key="k1"),
        Submission(_manifest(name="other"), "bob", admin=False, key="k1"),
        Submission(_manifest(name="x"), "carol", admin=False, key="k1"),  # keys are per user
    ]
    server.ctx.intake.store(batch)
    first, created = batch[0].future.result()
    again, created_again = batch[1].future.result()
    assert created and not created_again and again.id == first.id
    with pytest.raises(ConflictError, match="'k1' was used for another job"):
        batch[2].future.result()
    carols, carol_created = batch[3].future.result()
    assert carol_created and carols.id != first.id
    # A later batch replays from the stored key.
    later = Submission(_manifest(name="x"), "bob", admin=False, key="k1")
    server.ctx.intake.store([later])
    assert later.future.result()[0].id == first.id and not later.future.result()[1]
    assert _count(server, JobRow) == 2
    assert _count(server, IdempotencyKeyRow) == 2


def test_a_key_stored_by_another_replica_meanwhile(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batch did not see the key (another replica stored it after the batch looked):
    the unique key refuses the batch, which is then stored one by one."""
    server.ctx.intake.store([first := Submission(_manifest(), "bob", admin=False, key="race")])
    winner, _ = first.future.result()
    looked = {"n": 0}
    real = intake._stored_keys

    def not_yet_visible(session, keyed):  # noqa: ANN001, ANN202
        looked["n"] += 1
        return {} if looked["n"] == 1 else real(session, keyed)

    monkeypatch.setattr(intake, "_stored_keys", not_yet_visible)
    batch = [
        Submission(_manifest(), "bob", admin=False, key="race"),
        Submission(_manifest(name="bystander"), "bob", admin=False, key=None),
    ]
    server.ctx.intake.store(batch)
    replayed, created = batch[0].future.result()
    assert (replayed.id, created) == (winner.id, False)
    bystander, created = batch[1].future.result()
    assert created and bystander.name == "bystander"
    assert _count(server, JobRow) == 2


def test_a_refused_batch_stores_nothing(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    def unavailable(*_args: object) -> None:
        raise UnavailableError("the database is unavailable")

    monkeypatch.setattr(intake, "_submitted_event", unavailable)  # after the job inserts
    batch = [Submission(_manifest(), "bob", admin=False, key=f"k{i}") for i in range(3)]
    server.ctx.intake.store(batch)
    for submission in batch:
        with pytest.raises(UnavailableError):
            submission.future.result()
    assert _count(server, JobRow) == 0
    assert _count(server, IdempotencyKeyRow) == 0


def test_submissions_after_close_are_stored_by_the_caller(server: Server) -> None:
    client = server.client()
    client.submit({"command": "true"})  # starts the writer thread
    server.ctx.intake.close()
    job, created = server.ctx.intake.submit(_manifest(name="late"), "admin", admin=True)
    assert created and client.get(job.id).name == "late"


def test_a_submission_whose_caller_gave_up_is_not_stored(server: Server) -> None:
    gone = Submission(_manifest(name="gone"), "bob", admin=False, key=None)
    assert gone.future.cancel()  # e.g. the request's coroutine was cancelled while queued
    kept = Submission(_manifest(name="kept"), "bob", admin=False, key=None)
    server.ctx.intake.store([gone, kept])
    assert kept.future.result()[0].name == "kept"
    assert _count(server, JobRow) == 1
