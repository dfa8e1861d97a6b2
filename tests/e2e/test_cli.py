"""The `corral` command as a user types it, against real processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.cluster import LocalCluster, free_port, wait_for

PRINT_RANK = "import os; print('hello from rank', os.environ['RANK'])"


def run(args: list[str], env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "corral", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_up_submit_jobs_show_logs_down(tmp_path: Path) -> None:
    """The 'done when' of the foundation: a detached embedded cluster runs a 2x8 gang."""
    home = tmp_path / "home"
    env = {**os.environ, "CORRAL_HOME": str(home)}
    env.pop("CORRAL_SERVER", None)
    port = str(free_port())
    up = run(["up", "--nodes", "2", "--gpus-per-node", "8", "--detach", "--port", port], env)
    try:
        assert up.returncode == 0, up.stderr + up.stdout
        assert f"http://127.0.0.1:{port}" in up.stdout
        assert "corral submit" in up.stdout
        token = (home / "token").read_text().strip()  # the dashboard's login link
        assert f"Dashboard http://127.0.0.1:{port}/ui/#token={token}\n" in up.stdout

        again = run(["up", "--nodes", "1", "--detach"], env)
        assert again.returncode == 1 and "already running" in again.stderr

        sub = run(
            [
                "submit",
                "--nodes",
                "2",
                "--tasks-per-node",
                "8",
                "--gpus",
                "8",
                "--name",
                "hi",
                "--",
                sys.executable,
                "-c",
                PRINT_RANK,
            ],
            env,
        )
        assert sub.returncode == 0, sub.stderr
        job_id = sub.stdout.strip()
        assert job_id.isdigit()

        waited = run(["wait", job_id, "--timeout", "60"], env)
        assert waited.returncode == 0, waited.stdout + waited.stderr
        assert "succeeded" in waited.stdout

        listing = run(["jobs", "--all"], env)
        assert listing.returncode == 0
        row = next(line for line in listing.stdout.splitlines() if line.startswith(job_id))
        assert "succeeded" in row and "hi" in row and "2x8" in row

        as_json = json.loads(run(["jobs", "--all", "-o", "json"], env).stdout)
        assert [j["state"] for j in as_json["jobs"]] == ["succeeded"]

        shown = run(["show", job_id], env)
        assert "node-00" in shown.stdout and "node-01" in shown.stdout
        assert "succeeded" in shown.stdout
        shown_json = json.loads(run(["show", job_id, "-o", "json"], env).stdout)
        assert len(shown_json["tasks"]) == 16
        assert {t["node"] for t in shown_json["tasks"]} == {"node-00", "node-01"}

        logs = run(["logs", job_id, "--task", "11"], env)
        assert logs.stdout.strip() == "hello from rank 11"
        follow = run(["logs", job_id, "-f"], env, timeout=30)
        assert follow.stdout.strip() == "hello from rank 0"

        nodes = json.loads(run(["nodes", "-o", "json"], env).stdout)["nodes"]
        assert [(n["name"], n["gpus"], n["state"]) for n in nodes] == [
            ("node-00", 8, "ready"),
            ("node-01", 8, "ready"),
        ]
        assert "node-00" in run(["nodes"], env).stdout
        queues = json.loads(run(["queues", "-o", "json"], env).stdout)["queues"]
        assert queues[0]["name"] == "default"
    finally:
        down = run(["down"], env)
    assert down.returncode == 0 and "stopped" in down.stdout
    unreachable = run(["jobs"], env)
    assert unreachable.returncode == 1
    assert f"127.0.0.1:{port}" in unreachable.stderr
    assert len(unreachable.stderr.strip().splitlines()) == 1
    assert "Traceback" not in unreachable.stderr


def test_follow_logs_streams_a_running_task(cluster: LocalCluster) -> None:
    script = (
        "import time\nfor i in range(3):\n    print('tick', i, flush=True)\n    time.sleep(0.7)"
    )
    sub = cluster.cli("submit", "--", sys.executable, "-c", script)
    job_id = sub.stdout.strip()
    follow = cluster.cli("logs", job_id, "-f", timeout=60)
    assert follow.stdout.splitlines() == ["tick 0", "tick 1", "tick 2"]


def test_submit_from_a_manifest_file_with_flags_laid_over(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    manifest = tmp_path / "job.yaml"
    manifest.write_text(
        "name: from-file\n"
        "nodes: 1\n"
        "tasks_per_node: 2\n"
        "resources: {gpus: 4}\n"
        "env: {GREETING: hi}\n"
        "command: echo $GREETING rank $RANK gpus $CUDA_VISIBLE_DEVICES\n"
    )
    sub = cluster.cli("submit", "-f", str(manifest), "--name", "renamed", "-o", "json")
    job = json.loads(sub.stdout)
    assert job["name"] == "renamed" and job["nodes"] == 1 and job["tasks_per_node"] == 2
    cluster.cli("wait", str(job["id"]), "--timeout", "60")
    log0 = cluster.cli("logs", str(job["id"])).stdout.strip()
    log1 = cluster.cli("logs", str(job["id"]), "--task", "1").stdout.strip()
    assert log0.startswith("hi rank 0 gpus ") and log1.startswith("hi rank 1 gpus ")
    gpus0 = set(log0.split("gpus ")[1].split(","))
    gpus1 = set(log1.split("gpus ")[1].split(","))
    assert len(gpus0) == len(gpus1) == 2 and not gpus0 & gpus1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--gpus", "9", "--", "true"], "can never fit"),
        (["--nodes", "3", "--gpus", "8", "--", "true"], "can never fit"),
        (["--queue", "nope", "--", "true"], "unknown queue 'nope'"),
        (["--nodes", "-1", "--", "true"], "nodes"),
        (["--gpus", "-2", "--", "true"], "resources.gpus"),
        (["--gpus", "8", "--tasks-per-node", "3", "--", "true"], "split evenly"),
        (["--priority", "urgent", "--", "true"], "unknown priority class"),
        (["--time-limit", "soon", "--", "true"], "time_limit"),
        (["--env", "NOEQUALS", "--", "true"], "KEY=VALUE"),
        ([], "no command"),
    ],
)
def test_bad_submissions_are_refused_and_nothing_is_stored(
    cluster: LocalCluster, args: list[str], message: str
) -> None:
    result = cluster.cli("submit", *args, check=False)
    assert result.returncode != 0
    assert message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert cluster.client().list(all=True) == []


def test_malformed_manifest_files_are_refused(cluster: LocalCluster, tmp_path: Path) -> None:
    cases = {
        "unknown.yaml": (
            "command: 'true'\nresources: {gpuz: 1}\n",
            "resources.gpuz: unknown field",
        ),
        "notyaml.yaml": ("command: [unclosed\n", "not valid YAML"),
        "list.yaml": ("- a\n- b\n", "expected a mapping"),
    }
    for name, (text, message) in cases.items():
        path = tmp_path / name
        path.write_text(text)
        result = cluster.cli("submit", "-f", str(path), check=False)
        assert result.returncode == 1 and message in result.stderr, (name, result.stderr)
    assert cluster.client().list(all=True) == []


def test_cancel_preempt_drain_and_tokens_from_the_cli(cluster: LocalCluster) -> None:
    job_id = cluster.cli(
        "submit", "--gpus", "8", "--grace-period", "1s", "--", "sleep", "100"
    ).stdout.strip()
    client = cluster.client()
    wait_for(
        lambda: (
            client.get(int(job_id)).tasks and client.get(int(job_id)).tasks[0].state == "running"
        ),
        30,
        "the job to run",
    )
    pre = cluster.cli("preempt", job_id)
    assert "preempting" in pre.stdout
    wait_for(lambda: client.get(int(job_id)).attempt == 1, 30, "the preempted job to be requeued")
    wait_for(lambda: client.get(int(job_id)).state == "running", 30, "the requeued job to run")
    cancel = cluster.cli("cancel", job_id)
    assert "cancelled" in cancel.stdout
    shown = json.loads(cluster.cli("show", job_id, "-o", "json").stdout)
    assert [a["attempt"] for a in shown["attempts"]] == [0, 1]
    assert "preempted" in shown["attempts"][0]["outcome"]
    waited = cluster.cli("wait", job_id, check=False)
    assert waited.returncode == 1

    assert "draining" in cluster.cli("drain", "node-a").stdout
    held = cluster.cli("submit", "--nodes", "2", "--gpus", "8", "--", "true").stdout.strip()
    wait_for(
        lambda: (
            "node node-a: node draining" in (client.get(int(held)).reason or "")
            or "draining" in (client.get(int(held)).reason or "")
        ),
        30,
        "a drain reason",
    )
    assert "ready" in cluster.cli("undrain", "node-a").stdout
    assert client.wait(int(held), timeout=60)[0].state == "succeeded"

    created = json.loads(cluster.cli("token", "create", "--user", "alice", "-o", "json").stdout)
    assert created["token"].startswith("crl_")
    alice = subprocess.run(
        [
            sys.executable,
            "-m",
            "corral",
            "jobs",
            "--all",
            "-o",
            "json",
            "--token",
            created["token"],
        ],
        env={**cluster.env, "CORRAL_SERVER": cluster.url},
        capture_output=True,
        text=True,
    )
    assert alice.returncode == 0
    listed = json.loads(cluster.cli("token", "list", "-o", "json").stdout)["tokens"]
    alice_id = next(t["id"] for t in listed if t["user"] == "alice")
    cluster.cli("token", "revoke", str(alice_id))
    refused = subprocess.run(
        [sys.executable, "-m", "corral", "jobs", "--token", created["token"]],
        env={**cluster.env, "CORRAL_SERVER": cluster.url},
        capture_output=True,
        text=True,
    )
    assert refused.returncode == 1 and "revoked" in refused.stderr


def test_up_in_the_foreground_stops_everything_on_ctrl_c(tmp_path: Path) -> None:
    home = tmp_path / "home"
    cluster_file = tmp_path / "cluster.yaml"
    cluster_file.write_text(
        "nodes:\n"
        "  - name: 'gpu-{0..1}'\n"
        "    gpus: {count: 4, model: A100-80GB, nvlink: [[0, 1], [2, 3]]}\n"
        "    network: [zone-a, spine-1, leaf-1]\n"
        "    labels: {pool: a100}\n"
    )
    env = {**os.environ, "CORRAL_HOME": str(home)}
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "corral", "up", "--cluster", str(cluster_file), "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        cluster = LocalCluster(home)
        cluster.url = f"http://127.0.0.1:{port}"
        wait_for(lambda: (home / "up.json").exists(), 60, "corral up to be ready")
        nodes = cluster.client().nodes()
        assert [(n.name, n.gpus, n.labels, n.network) for n in nodes] == [
            ("gpu-0", 4, {"pool": "a100"}, ["zone-a", "spine-1", "leaf-1"]),
            ("gpu-1", 4, {"pool": "a100"}, ["zone-a", "spine-1", "leaf-1"]),
        ]
        assert [d.nvlink_domain for d in nodes[0].devices] == [0, 0, 1, 1]
        pids = json.loads((home / "up.json").read_text())
        proc.send_signal(2)  # SIGINT, as Ctrl-C
        output, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, output
    assert "Corral is up" in output and "Corral stopped." in output
    from tests.e2e.cluster import pid_alive

    assert not pid_alive(pids["server_pid"])
    assert not any(pid_alive(p) for p in pids["agent_pids"].values())
