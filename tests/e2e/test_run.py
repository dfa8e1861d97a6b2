"""``corral run``: submit, stream every task's output by rank, exit with the job's code."""

from __future__ import annotations

import signal
import subprocess
import sys

from tests.e2e.cluster import LocalCluster, wait_for

TWO_LINES = (
    "import os, sys, time\n"
    "rank = os.environ['RANK']\n"
    "print('hello from', rank, flush=True)\n"
    "time.sleep(0.3)\n"
    "sys.stdout.write('bye from ' + rank)\n"  # no final newline: still a whole line
)


def test_run_streams_labelled_output_of_every_task(cluster: LocalCluster) -> None:
    result = cluster.cli(
        "run", "--nodes", "2", "--tasks-per-node", "2", "--", sys.executable, "-c", TWO_LINES
    )
    lines = result.stdout.splitlines()
    expected = [f"{r}: hello from {r}" for r in range(4)] + [f"{r}: bye from {r}" for r in range(4)]
    assert sorted(lines) == sorted(expected), result.stdout
    for rank in range(4):  # each task's lines in order
        mine = [line for line in lines if line.startswith(f"{rank}: ")]
        assert mine == [f"{rank}: hello from {rank}", f"{rank}: bye from {rank}"]
    assert "corral: job 1 submitted" in result.stderr
    assert "running on node-a, node-b" in result.stderr
    assert cluster.client().get(1).state == "succeeded"


def test_run_of_one_task_is_unlabelled_and_quiet_says_nothing(cluster: LocalCluster) -> None:
    result = cluster.cli("run", "--quiet", "--", "echo", "just me")
    assert result.stdout == "just me\n" and result.stderr == ""
    labelled = cluster.cli("run", "-q", "--label", "--", "echo", "me again")
    assert labelled.stdout == "0: me again\n"


def test_run_exits_with_the_first_failing_tasks_code(cluster: LocalCluster) -> None:
    script = (
        "import os, sys\nprint('rank', os.environ['RANK'])\n"
        "if os.environ['RANK'] == '1': sys.exit(3)\n"
    )
    result = cluster.cli(
        "run", "--tasks-per-node", "2", "--", sys.executable, "-c", script, check=False
    )
    assert result.returncode == 3, result.stderr
    assert "1: rank 1" in result.stdout.splitlines()
    assert "corral: job 1 failed:" in result.stderr
    assert cluster.client().get(1).state == "failed"


def test_ctrl_c_cancels_the_job_and_exits_130(cluster: LocalCluster) -> None:
    script = "import time\nprint('started', flush=True)\ntime.sleep(60)"
    proc = subprocess.Popen(
        [sys.executable, "-m", "corral", "run", "--", sys.executable, "-c", script],
        env={**cluster.env, "CORRAL_SERVER": cluster.url},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "started\n"  # streamed while the job runs
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "SIGINT: cancelling job 1" in err and "Traceback" not in err
    c = cluster.client()
    wait_for(lambda: c.get(1).state == "cancelled", 20, "the job to be cancelled")


def test_a_job_that_can_never_fit_is_refused_like_submit(cluster: LocalCluster) -> None:
    run = cluster.cli("run", "--gpus", "16", "--", "true", check=False)
    submit = cluster.cli("submit", "--gpus", "16", "--", "true", check=False)
    assert run.returncode == submit.returncode == 1
    assert run.stderr == submit.stderr and run.stderr.startswith("error:")
    assert run.stdout == ""
    assert cluster.client().list(all=True) == []


def test_a_requeued_job_keeps_streaming_its_new_attempt(cluster: LocalCluster) -> None:
    script = (
        "import os, time\n"
        "attempt = os.environ['CORRAL_ATTEMPT']\n"
        "print('attempt', attempt, flush=True)\n"
        "if attempt == '0': time.sleep(60)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "corral", "run", "--requeue", "--", sys.executable, "-c", script],
        env={**cluster.env, "CORRAL_SERVER": cluster.url},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "attempt 0\n"
        cluster.client().preempt(1)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert out.endswith("attempt 1\n")  # after what attempt 0 wrote as it was stopped
    assert "requeued as attempt 1" in err
