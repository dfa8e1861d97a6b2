"""A task's own credential (CORRAL_JOB_TOKEN at CORRAL_SERVER): it reports the job's
checkpoints for the current attempt and can do nothing else."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import httpx

from tests.e2e.cluster import LocalCluster, wait_for

# Reports a checkpoint through corral.train, then probes what else the token can do, writes
# the answers to OUT/attempt-N.json, and waits to be preempted (exit 0: requeued).
TASK = r"""
import json, os, signal, sys, time
import httpx
from corral.train.checkpoint import notify_checkpoint
env = os.environ
server, token, job = env["CORRAL_SERVER"], env["CORRAL_JOB_TOKEN"], env["CORRAL_JOB_ID"]
auth = {"Authorization": f"Bearer {token}"}
api = f"{server}/api/v1"
other = str(int(job) + 1000)
probes = {
    "own": notify_checkpoint(7, "/ckpt/7"),
    "other_job": httpx.post(f"{api}/jobs/{other}/checkpoint", json={}, headers=auth).status_code,
    "list_jobs": httpx.get(f"{api}/jobs", headers=auth).status_code,
    "show_job": httpx.get(f"{api}/jobs/{job}", headers=auth).status_code,
    "cancel": httpx.post(f"{api}/jobs/{job}/cancel", headers=auth).status_code,
    "whoami": httpx.get(f"{api}/whoami", headers=auth).status_code,
}
out = os.path.join(env["OUT"], f"attempt-{env['CORRAL_ATTEMPT']}.json")
with open(out + ".tmp", "w") as f:
    json.dump({"token": token, "server": server, "probes": probes}, f)
os.rename(out + ".tmp", out)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
time.sleep(600)
"""


def test_job_token_reports_checkpoints_of_its_own_current_attempt_only(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    client = cluster.client()
    job = client.submit(
        {
            "command": [sys.executable, "-c", TASK],
            "env": {"OUT": str(out)},
            "resources": {"gpus": 1},
            "grace_period": "5s",
        }
    )
    first = out / "attempt-0.json"
    wait_for(first.exists, 60, "the first attempt to report")
    seen = json.loads(first.read_text())
    assert seen["server"] == cluster.url
    assert seen["probes"] == {
        "own": True,
        "other_job": 403,
        "list_jobs": 403,
        "show_job": 403,
        "cancel": 403,
        "whoami": 403,
    }
    assert client.get(job.id).last_checkpoint_at is not None
    assert any("checkpoint saved at step 7" in e.reason for e in client.get(job.id).events)

    client.preempt(job.id)
    second = out / "attempt-1.json"
    wait_for(second.exists, 60, "the requeued attempt to report")
    token_1 = json.loads(second.read_text())["token"]
    assert token_1 != seen["token"]
    url = f"{cluster.url}/api/v1/jobs/{job.id}/checkpoint"
    stale = httpx.post(url, json={"step": 1}, headers={"Authorization": f"Bearer {seen['token']}"})
    assert stale.status_code == 403 and "current attempt is 1" in stale.json()["message"]
    current = httpx.post(url, json={"step": 2}, headers={"Authorization": f"Bearer {token_1}"})
    assert current.status_code == 200
    forged = httpx.post(url, json={}, headers={"Authorization": f"Bearer {token_1[:-4]}beef"})
    assert forged.status_code == 401
    client.cancel(job.id)
