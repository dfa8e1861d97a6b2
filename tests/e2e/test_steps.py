"""Job steps with real server and agent processes: a task starts processes on its job's
other node (``corral step run``, the SDK), reads their exit codes and output, and nothing a
step started outlives a cancel of the step or of its job."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from corral.client import Client
from tests.e2e.cluster import LocalCluster, pid_alive, wait_for

pytestmark = pytest.mark.e2e
FINAL = ("succeeded", "failed", "cancelled")

# Every rank holds its node; rank 0 first runs a step on the other node with the CLI, as a
# program inside a job would, and records what it saw. It also leaves its job token for the
# test (which plays a second caller inside the job).
TASK = r"""
import json, os, subprocess, sys, time
env = os.environ
out = env["OUT"]
if env["RANK"] == "0":
    with open(os.path.join(out, "token"), "w") as f:
        f.write(env["CORRAL_JOB_TOKEN"])
    other = ({"node-a", "node-b"} - {env["CORRAL_NODE"]}).pop()
    script = (
        'date +%s.%N > "$OUT/started"; '
        'echo "on $CORRAL_NODE rank $CORRAL_STEP_RANK of $CORRAL_STEP_WORLD_SIZE '
        'step $CORRAL_STEP_ID job $CORRAL_JOB_ID"; exit 3'
    )
    asked = time.time()
    run = subprocess.run(
        [sys.executable, "-m", "corral", "step", "run", "--node", other, "--label", "--",
         "sh", "-c", script],
        capture_output=True, text=True, timeout=60,
    )
    result = {"asked": asked, "other": other, "code": run.returncode, "stdout": run.stdout,
              "stderr": run.stderr}
    with open(os.path.join(out, "result.json.tmp"), "w") as f:
        json.dump(result, f)
    os.rename(os.path.join(out, "result.json.tmp"), os.path.join(out, "result.json"))
time.sleep(600)
"""

# A step that escapes as far as it can: a setsid'd sleeper and a double-forked daemon that
# ignores SIGTERM; it records their pids and its own (in files named by its step rank),
# then sleeps.
ESCAPE = r"""
import os, signal, subprocess, sys, time
out = sys.argv[1] + os.environ["CORRAL_STEP_RANK"]
sid = subprocess.Popen(["setsid", "sleep", "1000"]).pid
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        with open(out + ".daemon", "w") as f:
            f.write(str(os.getpid()))
        time.sleep(1000)
    os._exit(0)
with open(out + ".pids", "w") as f:
    f.write(f"{os.getpid()} {sid}")
time.sleep(1000)
"""


def start_job(cluster: LocalCluster, out: Path) -> int:
    """A 2-node job (one task per node) running TASK; returns its id once it runs."""
    client = cluster.client()
    job = client.submit(
        {
            "nodes": 2,
            "command": [sys.executable, "-c", TASK],
            "env": {"OUT": str(out)},
            "resources": {"gpus": 1},
            "grace_period": "2s",
        }
    )
    wait_for(lambda: client.get(job.id).state == "running", 30, "the job to run")
    return job.id


def escapees(out: Path) -> list[int]:
    """The pids an ESCAPE step recorded, once it has recorded them all."""
    daemon, pids = Path(f"{out}.daemon"), Path(f"{out}.pids")
    wait_for(lambda: daemon.exists() and pids.exists(), 30, "the escapees to start")
    return [int(daemon.read_text()), *map(int, pids.read_text().split())]


@pytest.mark.cluster_options(sync_interval=20.0, node_timeout=90.0)
def test_a_task_runs_a_step_on_the_other_node_and_gets_its_exit_code_and_output(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    """With agents syncing only every 20 s, the step starts at once all the same (the
    server nudges the node's agent), and ``corral step run`` exits with the step's code."""
    out = tmp_path / "out"
    out.mkdir()
    job_id = start_job(cluster, out)
    result_file = out / "result.json"
    wait_for(result_file.exists, 60, "rank 0's step to end")
    result = json.loads(result_file.read_text())
    other = result["other"]
    assert result["code"] == 3, result
    assert f"0: on {other} rank 0 of 1 step 1 job {job_id}\n" in result["stdout"], result
    assert f"step 1 task 0 on {other}: exited, exit code 3" in result["stderr"], result
    started = float((out / "started").read_text())
    assert started - result["asked"] < 8.0  # not a sync interval (20 s) later

    logs = cluster.cli("logs", str(job_id), "--step", "1").stdout
    assert f"on {other} rank 0 of 1 step 1" in logs
    listed = json.loads(cluster.cli("step", "list", str(job_id), "-o", "json").stdout)
    assert [(s["step"], s["exit_code"], s["created_by"]) for s in listed] == [
        (1, 3, f"job:{job_id}")
    ]
    assert cluster.client().get(job_id).state == "running"  # the step failed, not the job
    cluster.client().cancel(job_id)


def test_step_processes_and_their_daemons_go_with_the_job(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    client = cluster.client()
    job_id = start_job(cluster, out)
    step = client.start_step(job_id, [sys.executable, "-c", ESCAPE, str(out / "escape")])
    assert len(step.tasks) == 2  # one per node of the job
    pids = escapees(out / "escape0") + escapees(out / "escape1")
    assert all(pid_alive(p) for p in pids)
    client.cancel(job_id)
    wait_for(lambda: not any(pid_alive(p) for p in pids), 20, "the step's processes to die")
    ended = wait_for(lambda: (s := client.step(job_id, 1)).state == "ended" and s, 20, "the end")
    assert all(t.state == "exited" and t.exit_code for t in ended.tasks)
    assert client.get(job_id).state == "cancelled"


def test_cancelling_a_step_stops_it_and_corral_step_run_forwards_sigterm(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    client = cluster.client()
    job_id = start_job(cluster, out)
    step = client.start_step(job_id, [sys.executable, "-c", ESCAPE, str(out / "one")], ["node-b"])
    pids = escapees(out / "one0")
    client.cancel_step(job_id, step.step)
    wait_for(lambda: not any(pid_alive(p) for p in pids), 20, "the cancelled step to die")
    assert client.wait_step(job_id, step.step, timeout=20).exit_code == 128 + signal.SIGTERM
    assert client.get(job_id).state == "running"

    # `corral step run` as a program inside the job runs it: a SIGTERM cancels the step
    wait_for((out / "token").exists, 30, "rank 0's job token")
    inside = {
        **cluster.env,
        "CORRAL_SERVER": cluster.url,
        "CORRAL_JOB_ID": str(job_id),
        "CORRAL_JOB_TOKEN": (out / "token").read_text(),
    }
    command = [sys.executable, "-c", ESCAPE, str(out / "two")]
    run = subprocess.Popen(
        [sys.executable, "-m", "corral", "step", "run", "-w", "node-a", "--", *command],
        env=inside,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        pids = escapees(out / "two0")
        run.send_signal(signal.SIGTERM)
        _, stderr = run.communicate(timeout=30)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 128 + signal.SIGTERM, stderr
    assert not any(pid_alive(p) for p in pids)
    latest = Client(cluster.url, inside["CORRAL_JOB_TOKEN"]).steps(job_id)[-1]
    assert latest.cancelled and latest.exit_code == 128 + signal.SIGTERM
    client.cancel(job_id)


def test_corral_step_run_outside_a_job_says_so(cluster: LocalCluster) -> None:
    env = {k: v for k, v in cluster.env.items() if not k.startswith("CORRAL_JOB")}
    result = subprocess.run(
        [sys.executable, "-m", "corral", "step", "run", "--", "true"],
        env={**env, "CORRAL_SERVER": cluster.url},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 1
    assert "CORRAL_JOB_ID, CORRAL_JOB_TOKEN not set: run it inside a Corral job" in result.stderr
    assert "Traceback" not in result.stderr
