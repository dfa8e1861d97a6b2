"""Task logs past the log cap (issue 14): the server keeps at most ``log_cap`` bytes per
task, readers are told what was dropped, and the offset protocol stays consistent."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select
from typer.testing import CliRunner

from corral.cli.main import app
from corral.server.db.models import LogChunkRow, TaskRow
from tests.e2e.cluster import wait_for
from tests.integration.conftest import Server
from tests.integration.protocol import FakeHardwareAgent, chunk, report

CAP = 100


def _running(server: Server, node: FakeHardwareAgent) -> int:
    job = server.client().submit({"command": "x"})
    wait_for(lambda: server.client().get(job.id).state == "running", 10, "the job placed")
    node.sync()
    return job.id


def _stored(server: Server, job_id: int) -> tuple[int, int, int]:
    """(chunks, bytes stored, TaskRow.log_dropped) of the job's task 0."""
    with server.ctx.sessions() as session:
        count, size = session.execute(
            select(func.count(), func.coalesce(func.sum(func.length(LogChunkRow.data)), 0)).where(
                LogChunkRow.job_id == job_id
            )
        ).one()
        task = session.scalar(select(TaskRow).where(TaskRow.job_id == job_id))
        return count, size, task.log_dropped


def _dropped(count: str, first: bool = True) -> str:
    where = f"the first {count} bytes" if first else f"{count} bytes"
    here = "" if first else " here"
    return f"[corral: {where} of this log were dropped{here}: it passed the log cap of 100 B]\n"


@pytest.mark.server_options(log_cap=CAP)
def test_the_oldest_chunks_go_past_the_cap(server: Server) -> None:
    node = FakeHardwareAgent(server, "node-a")
    job_id = _running(server, node)
    running = [report(job_id, 0, "running", pid=7)]
    answer = node.sync(running, [chunk(job_id, 0, 0, b"a" * 60)])
    assert answer["log_cap"] == CAP and answer["acks"][0]["log_offset"] == 60
    answer = node.sync(running, [chunk(job_id, 0, 60, b"b" * 60)])
    assert answer["acks"][0]["log_offset"] == 120
    assert _stored(server, job_id) == (1, 60, 60)  # the first chunk went
    client = server.client()
    assert client.logs(job_id) == _dropped("60") + "b" * 60
    first = client.log_chunk(job_id)
    assert (first.offset, first.complete) == (120, False)
    assert client.log_chunk(job_id, offset=90).data == "b" * 30  # within what is kept
    assert client.log_chunk(job_id, offset=120).data == ""

    # the agent dropped 80 bytes past its own cap: the gap is recorded, the chunk kept
    answer = node.sync(running, [chunk(job_id, 0, 200, b"c" * 10)])
    assert answer["acks"][0]["log_offset"] == 210
    assert _stored(server, job_id) == (2, 70, 140)
    follow = client.log_chunk(job_id, offset=120)  # a reader following from where it was
    assert (follow.data, follow.offset) == (_dropped("80", first=False) + "c" * 10, 210)

    # a chunk longer than the cap keeps its tail only, and everything older goes
    node.sync(running, [chunk(job_id, 0, 210, b"d" * 150 + b"e" * 100)])
    assert _stored(server, job_id) == (1, CAP, 360)
    assert client.logs(job_id) == _dropped("360") + "e" * 100
    result = CliRunner().invoke(
        app, ["logs", str(job_id), "--server", server.url, "--token", server.admin_token]
    )
    assert result.exit_code == 0 and result.output == _dropped("360") + "e" * 100


@pytest.mark.server_options(log_cap=CAP)
def test_a_log_may_trail_its_tasks_exit(server: Server) -> None:
    """The agent reports the exit at once and ships the rest of the log afterwards: the
    job ends without waiting, the chunks are still taken, and ``final`` lets the agent
    forget the task once its log is drained."""
    node = FakeHardwareAgent(server, "node-a")
    job_id = _running(server, node)
    node.sync([report(job_id, 0, "running", pid=7)], [chunk(job_id, 0, 0, b"start\n")])
    answer = node.sync([report(job_id, 0, "exited", exit_code=0)])
    assert answer["acks"][0] == {
        "job_id": job_id,
        "attempt": 0,
        "rank": 0,
        "log_offset": 6,
        "final": True,
    }
    client = server.client()
    assert client.get(job_id).state == "succeeded"
    # the exited task's remaining log, in two syncs; then the agent reports it no more
    answer = node.sync([report(job_id, 0, "exited", exit_code=0)], [chunk(job_id, 0, 6, b"mid\n")])
    assert (answer["acks"][0]["log_offset"], answer["acks"][0]["final"]) == (10, True)
    answer = node.sync(logs=[chunk(job_id, 0, 10, b"end\n")])
    assert (answer["acks"][0]["log_offset"], answer["acks"][0]["final"]) == (14, True)
    assert answer["tasks"] == []
    assert client.logs(job_id) == "start\nmid\nend\n"
    assert client.log_chunk(job_id, offset=14).complete
    assert client.get(job_id).state == "succeeded"  # a late chunk changes nothing else
