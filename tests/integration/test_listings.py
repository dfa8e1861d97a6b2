"""Listings over the real API: pages that reach every row, `--limit` saying how many
were left out, and `--watch` redrawing until Ctrl-C (the CLI in a child process)."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import sys
import time

from typer.testing import CliRunner

from corral.cli.main import app
from corral.client import Client
from tests.integration.conftest import Server
from tests.integration.protocol import FakeHardwareAgent

HELD = {"command": "true", "resources": {"gpus": 1}, "hold": True}


def submit_jobs(client: Client, array_size: int, singles: int) -> list[int]:
    """A held array of ``array_size`` elements, then ``singles`` held jobs; every job id."""
    array = client.submit({**HELD, "name": "sweep", "array": f"0-{array_size - 1}"})
    assert array.array is not None
    ids = list(array.array.job_ids)
    for i in range(singles):
        ids.append(client.submit({**HELD, "name": f"single-{i}"}).id)
    return ids


def test_a_listing_pages_through_more_jobs_than_one_page(server: Server) -> None:
    FakeHardwareAgent(server, "node-a")
    client = server.client()
    ids = submit_jobs(client, 1500, 3)
    # the API: the newest page of 1,000 (the default), then the rest below its cursor
    first = client.job_page(count=True)
    assert [j.id for j in first.jobs] == ids[-1000:]
    assert (first.has_more, first.next, first.remaining) == (True, ids[-1000], 503)
    rest = client.job_page(before=first.next)
    assert [j.id for j in rest.jobs] == ids[:-1000]
    assert (rest.has_more, rest.next, rest.remaining) == (False, None, None)
    # a job submitted meanwhile does not shift the pages below the cursor
    newest = client.submit({**HELD, "name": "late"}).id
    assert client.job_page(before=first.next).jobs == rest.jobs
    ids.append(newest)
    # the SDK pages through every job by default, oldest first
    assert [j.id for j in client.list()] == ids
    assert [j.id for j in client.list(page_size=7)] == ids
    assert [j.id for j in client.list(limit=10, page_size=3)] == ids[-10:]
    assert [j.id for j in client.list(limit=5000)] == ids
    # grouped: the array is one row, counted as one against the page size
    grouped = client.list(group_arrays=True, page_size=1)
    names = ["sweep", "single-0", "single-1", "single-2", "late"]
    assert [(j.id, j.name) for j in grouped] == list(zip([ids[0], *ids[1500:]], names, strict=True))
    page = client.job_page(group_arrays=True, limit=2, count=True)
    assert [j.name for j in page.jobs] == ["single-2", "late"]
    assert (page.has_more, page.next, page.remaining) == (True, ids[1502], 3)
    whole = client.job_page(group_arrays=True, limit=5, count=True)
    assert (len(whole.jobs), whole.has_more, whole.next, whole.remaining) == (5, False, None, 0)


def test_jobs_limit_says_how_many_were_left_out(server: Server) -> None:
    FakeHardwareAgent(server, "node-a")
    ids = submit_jobs(server.client(), 1500, 2)
    runner = CliRunner()
    where = ["--server", server.url, "--token", server.admin_token]

    def corral(*args: str) -> str:
        result = runner.invoke(app, [*args, *where])
        assert result.exit_code == 0, result.output
        return result.output

    listed = corral("jobs", "--array", "--limit", "3").splitlines()
    assert listed[0].split()[:2] == ["ID", "NAME"]
    shown = [line.split()[:2] for line in listed[1:4]]
    assert shown == [
        [f"{ids[0]}_1499", "sweep"],
        [str(ids[-2]), "single-0"],
        [str(ids[-1]), "single-1"],
    ]
    assert listed[4:] == [
        "... and 1,499 more, older; raise --limit, or leave it out to list them all"
    ]
    as_json = json.loads(corral("jobs", "--array", "--limit", "3", "-o", "json"))
    assert [j["id"] for j in as_json["jobs"]] == ids[-3:] and as_json["remaining"] == 1499
    everything = json.loads(corral("jobs", "--array", "-o", "json"))
    assert [j["id"] for j in everything["jobs"]] == ids and "remaining" not in everything
    grouped = corral("jobs")
    assert "more, older" not in grouped and "single-1" in grouped
    assert "and 2 more" in corral("jobs", "-n", "1")
    assert "more, older" not in corral("jobs", "--limit", "3")


def test_audit_and_events_say_when_older_rows_were_left_out(server: Server) -> None:
    FakeHardwareAgent(server, "node-a")
    client = server.client()
    ids = [client.submit({**HELD, "name": f"job-{i}"}).id for i in range(5)]
    newest = client.audit_page(limit=2)
    assert [e.target for e in newest.entries] == [str(i) for i in ids[-2:]]
    assert newest.has_more and newest.next == newest.entries[0].id
    older = client.audit_page(limit=100, before=newest.next)
    assert not older.has_more and older.next is None
    every = client.audit(limit=None)
    assert every == [*older.entries, *newest.entries]
    assert [e.target for e in every][-5:] == [str(i) for i in ids]
    latest = client.event_page(limit=2)
    assert latest.has_more and len(latest.events) == 2
    assert not client.event_page(since_id=latest.events[0].id, limit=10).has_more
    runner = CliRunner()
    where = ["--server", server.url, "--token", server.admin_token]
    shown = runner.invoke(app, ["audit", "--limit", "2", *where])
    assert shown.exit_code == 0 and "... older calls not shown; raise --limit (now 2)" in (
        shown.output
    )
    shown = runner.invoke(app, ["events", "--limit", "2", *where])
    assert shown.exit_code == 0 and "... older events not shown; raise --limit" in shown.output
    shown = runner.invoke(app, ["events", "--since-id", "0", "--limit", "1", *where])
    first = client.events(since_id=0, limit=1)[0].id
    assert f"read on with --since-id {first}" in shown.output


def _corral_env(server: Server) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
    return {**env, "CORRAL_SERVER": server.url, "CORRAL_TOKEN": server.admin_token}


def _rest(proc: subprocess.Popen) -> tuple[str, str]:
    """What the child writes until it exits (after what was read of it already)."""
    assert proc.stdout is not None and proc.stderr is not None
    rest, err = proc.stdout.read(), proc.stderr.read()
    proc.wait(timeout=30)
    return rest, err


def test_jobs_watch_redraws_the_table_on_a_terminal_until_ctrl_c(server: Server) -> None:
    FakeHardwareAgent(server, "node-a")
    server.client().submit({**HELD, "name": "watched"})
    env = {**_corral_env(server), "TERM": "xterm", "COLUMNS": "160", "LINES": "40"}
    controller, terminal = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "corral", "jobs", "--watch", "--interval", "0.2"],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=terminal,
        stderr=terminal,
    )
    os.close(terminal)
    seen = b""
    try:
        deadline = time.monotonic() + 60
        while seen.count(b"Ctrl-C to stop") < 3:  # the first draw and two refreshes
            assert time.monotonic() < deadline, seen.decode(errors="replace")
            if select.select([controller], [], [], 1)[0]:
                seen += os.read(controller, 65536)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
        while select.select([controller], [], [], 0.5)[0]:
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # the terminal closed with the child
                break
            if not chunk:
                break
            seen += chunk
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(controller)
    text = seen.decode(errors="replace")
    assert proc.returncode == 130, text
    assert "ID" in text and "watched" in text and "held" in text
    assert "\x1b[" in text  # redrawn in place: cursor movements, not one table after another
    assert "Traceback" not in text


def test_nodes_watch_prints_a_json_document_per_refresh(server: Server) -> None:
    FakeHardwareAgent(server, "node-a")
    proc = subprocess.Popen(
        [sys.executable, "-m", "corral", "nodes", "--watch", "--interval", "0.2", "-o", "json"],
        env=_corral_env(server),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        documents = [json.loads(proc.stdout.readline()) for _ in range(3)]
        proc.send_signal(signal.SIGINT)
        rest, err = _rest(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert [[n["name"] for n in d["nodes"]] for d in documents] == [["node-a"]] * 3
    assert all(json.loads(line) for line in rest.splitlines())
    assert "Traceback" not in err


def test_nodes_watch_piped_prints_one_table_after_another(server: Server) -> None:
    FakeHardwareAgent(server, "node-a")
    proc = subprocess.Popen(
        [sys.executable, "-m", "corral", "nodes", "--watch", "--interval", "0.2"],
        env=_corral_env(server),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        while sum("Ctrl-C to stop" in line for line in lines) < 2:
            lines.append(proc.stdout.readline())
            assert lines[-1], "corral nodes --watch ended early"
        proc.send_signal(signal.SIGINT)
        rest, err = _rest(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    lines += rest.splitlines()
    assert sum(line.split()[:2] == ["NAME", "STATE"] for line in lines) >= 2
    assert sum(line.split()[:2] == ["node-a", "ready"] for line in lines) >= 2
    assert "Traceback" not in err
