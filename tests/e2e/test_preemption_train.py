"""Lossless preemption, proven with a real 2-node PyTorch DDP job (issue 6, part 4).

A real server and two real agents (one cluster for the module, its scheduler with priority
classes and preemption on) run examples/pytorch_ddp.py as a 2-node gang (gloo on loopback).
Each interrupted job must end with the same ``final-params-sha256`` as an uninterrupted run.

No clocks decide anything: on its first attempt the job waits at step ``HOLD`` (asking
``should_stop`` in step, ``--hold-at``) until the preemption arrives, so every attempt 0
stops at exactly that step; a save cut off by SIGKILL is made to hang on purpose
(``--stall-save-rank``) and killed once its temporary file exists. Timeouts only keep a
hung job from hanging the suite.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.schemas.api import JobOut
from tests.e2e.cluster import LocalCluster, wait_for

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "pytorch_ddp.py"
STEPS = ["--steps", "12", "--checkpoint-every", "4", "--batch-size", "16"]
HOLD = 6  # attempt 0 stops here; the last complete periodic checkpoint before it is step 4
RANKS = (0, 1)

CONFIG = """
priority_classes:
  low: {value: 0, preemptible: true}
  normal: {value: 100, preemptible: true}
  high: {value: 1000, preemptible: false}
policy:
  preemption: true
  interval: 1s
"""

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """One server (preemption on) and two 8-GPU agents for the whole module."""
    c = LocalCluster(tmp_path_factory.mktemp("preemption") / "home", config=CONFIG)
    try:
        c.start_server()
        for name in ("node-a", "node-b"):
            c.start_agent(name)
        c.wait_nodes("node-a", "node-b")
        yield c
    finally:
        c.stop()


def training_job(*args: str, **extra: object) -> dict:
    """The example as a low-priority gang filling both nodes (one task, 8 GPUs, per node)."""
    return {
        "name": "ddp",
        "nodes": 2,
        "tasks_per_node": 1,
        "resources": {"gpus": 8},
        "priority": "low",
        "grace_period": "30s",
        "command": [sys.executable, str(EXAMPLE), *STEPS, *args],
        "env": {"OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src")},
        **extra,
    }


def final_sha(output: str) -> str:
    match = re.search(r"^final-params-sha256: ([0-9a-f]{64})$", output, re.M)
    assert match, output
    return match.group(1)


def logs(cluster: LocalCluster, job_id: int, attempt: int) -> list[str]:
    client = cluster.client()
    return [client.logs(job_id, task=rank, attempt=attempt) for rank in RANKS]


@pytest.fixture(scope="module")
def reference(cluster: LocalCluster) -> str:
    """The uninterrupted run's final-params-sha256."""
    client = cluster.client()
    job = client.submit(training_job())
    done = client.wait(job.id, timeout=120)[0]
    assert done.state == "succeeded", (done.reason, logs(cluster, job.id, 0))
    assert done.attempt == 0
    return final_sha(client.logs(job.id, task=0))


def start_held(cluster: LocalCluster, *args: str) -> JobOut:
    """Submit a training job and wait until both ranks hold at step HOLD."""
    client = cluster.client()
    job = client.submit(training_job("--hold-at", str(HOLD), *args))

    def holding() -> bool:
        return all(f"holding at step {HOLD}" in out for out in logs(cluster, job.id, 0))

    wait_for(holding, 120, f"both ranks to reach step {HOLD}")
    return client.get(job.id)


def finished_after_requeue(cluster: LocalCluster, job: JobOut, reference: str) -> dict:
    """The job ran twice and ended bit for bit like the reference; its ``show -o json``."""
    done = cluster.client().wait(job.id, timeout=120)[0]
    second = logs(cluster, job.id, 1)
    assert done.state == "succeeded", (done.reason, logs(cluster, job.id, 0), second)
    assert done.attempt == 1
    assert final_sha(second[0]) == reference
    shown = json.loads(cluster.cli("show", str(job.id), "-o", "json").stdout)
    attempts = shown["attempts"]
    assert [a["attempt"] for a in attempts] == [0, 1]
    for attempt in attempts:
        assert sorted(attempt["nodes"]) == ["node-a", "node-b"]
        assert attempt["started_at"] is not None and attempt["ended_at"] is not None
    assert attempts[1]["outcome"].startswith("succeeded")
    return shown


def requeue_reason(shown: dict) -> str:
    """Why attempt 0 went back to the queue."""
    return next(
        e["reason"]
        for e in shown["events"]
        if e["attempt"] == 0 and e["from_state"] == "preempting" and e["to_state"] == "pending"
    )


def assert_stopped_and_resumed_at(cluster: LocalCluster, job_id: int, step: int) -> None:
    first, second = logs(cluster, job_id, 0), logs(cluster, job_id, 1)
    for rank in RANKS:
        assert f"rank {rank} stopping at step {HOLD}" in first[rank], first[rank]
        assert f"rank {rank} resumed at step {step}" in second[rank], second[rank]
        assert "final-params-sha256" not in first[rank]


def test_corral_preempt_checkpoints_requeues_and_resumes_bit_for_bit(
    cluster: LocalCluster, reference: str
) -> None:
    job = start_held(cluster)
    preempted = json.loads(cluster.cli("preempt", str(job.id), "-o", "json").stdout)
    assert preempted["jobs"][0]["state"] == "preempting"

    shown = finished_after_requeue(cluster, job, reference)
    assert_stopped_and_resumed_at(cluster, job.id, HOLD)
    assert shown["attempts"][0]["outcome"] == "preempting: preempted by user"
    assert requeue_reason(shown) == "preempted; exited 0 after SIGTERM; requeued"
    # the runtime told the control plane of each save (CORRAL_SERVER + CORRAL_JOB_TOKEN)
    saves = [e["reason"] for e in shown["events"] if e["reason"].startswith("checkpoint saved")]
    assert any(f"step {HOLD}" in reason for reason in saves), saves
    assert shown["last_checkpoint_at"] is not None


def test_a_high_priority_job_preempts_training_which_resumes_bit_for_bit(
    cluster: LocalCluster, reference: str, tmp_path: Path
) -> None:
    job = start_held(cluster)
    client = cluster.client()
    marker = tmp_path / "high-ran"
    high = client.submit(
        {
            "name": "urgent",
            "priority": "high",
            "resources": {"gpus": 8},  # a whole node: only the training job's devices
            "command": [sys.executable, "-c", f"open({str(marker)!r}, 'w').close()"],
        }
    )
    assert client.wait(high.id, timeout=120)[0].state == "succeeded"
    assert marker.exists()

    shown = finished_after_requeue(cluster, job, reference)
    assert_stopped_and_resumed_at(cluster, job.id, HOLD)
    outcome = shown["attempts"][0]["outcome"]
    # why it was chosen: the priorities, the work it lost, and how its set compared
    assert outcome.startswith(f"preempting: preempted for job {high.id} (priority "), outcome
    assert "loses" in outcome and "candidate set" in outcome, outcome
    # The training job came back only after the urgent one was done with the devices.
    assert shown["attempts"][1]["started_at"] >= client.get(high.id).ended_at


def test_sigkill_in_the_middle_of_a_save_resumes_from_the_previous_checkpoint(
    cluster: LocalCluster, reference: str
) -> None:
    job = start_held(cluster, "--stall-save-rank", "1")
    checkpoints = cluster.home / "checkpoints" / f"job-{job.id}"
    cluster.cli("preempt", str(job.id))

    def temporary_part() -> Path | None:
        return next((checkpoints / f"step-{HOLD:08d}").glob(".rank-00001.pt.tmp-*"), None)

    wait_for(lambda: "stalled" in logs(cluster, job.id, 0)[1], 60, "rank 1's save to stall")
    part = wait_for(temporary_part, 10, "rank 1's temporary file")
    os.kill(int(part.name.rsplit("-", 1)[1]), signal.SIGKILL)  # the pid is in its name

    shown = finished_after_requeue(cluster, job, reference)
    assert_stopped_and_resumed_at(cluster, job.id, 4)  # not HOLD: that save never completed
    assert requeue_reason(shown) == "preempted; stopped; requeued"  # not all exited 0
    second = logs(cluster, job.id, 1)
    assert f"skipping checkpoint {checkpoints / f'step-{HOLD:08d}'}" in second[0]


def test_sigterm_reaching_only_one_rank_stops_all_at_one_step_and_requeues(
    cluster: LocalCluster, reference: str
) -> None:
    job = start_held(cluster, "--ignore-sigterm-rank", "1")
    cluster.cli("preempt", str(job.id))

    shown = finished_after_requeue(cluster, job, reference)
    assert_stopped_and_resumed_at(cluster, job.id, HOLD)
    first = logs(cluster, job.id, 0)
    assert "SIGTERM received" in first[0]
    assert "SIGTERM received" not in first[1]
    assert "another rank was asked to stop: stopping too" in first[1]
    assert requeue_reason(shown) == "preempted; exited 0 after SIGTERM; requeued"
