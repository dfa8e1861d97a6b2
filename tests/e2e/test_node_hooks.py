"""Node hooks end to end (``corral agent --prolog --epilog``): real server, real agents,
real hook scripts. A prolog that fails on one node drains it (the reason quotes the hook's
last line, in ``corral nodes`` and in the job's events) and the job is requeued to, and
succeeds on, another node, whose prolog and epilog each run once for the job; a failing
epilog drains its node and the job still succeeds."""

from __future__ import annotations

import getpass
from pathlib import Path

import pytest

from tests.e2e.cluster import LocalCluster, wait_for

pytestmark = [pytest.mark.timeout(120)]


def hook(path: Path, body: str) -> str:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def node(cluster: LocalCluster, name: str):  # noqa: ANN201
    return next(n for n in cluster.client().nodes() if n.name == name)


@pytest.mark.cluster_options(nodes=[])
def test_a_failing_prolog_drains_its_node_and_the_job_runs_elsewhere(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    runs = tmp_path / "runs"
    record = 'echo "$CORRAL_HOOK $CORRAL_JOB_ID $CORRAL_ATTEMPT $CORRAL_NODE $SLURM_JOB_USER"'
    bad = hook(tmp_path / "bad-prolog", "echo checking GPUs\necho 'GPU 3 ECC errors' >&2\nexit 1\n")
    prolog = hook(tmp_path / "prolog", f"{record} >> {runs}\n")
    epilog = hook(
        tmp_path / "epilog",
        f"{record} >> {runs}\n"
        'if [ "$CORRAL_JOB_NAME" = bad-epilog ]; then echo "/scratch still busy"; exit 3; fi\n',
    )
    cluster.start_agent("node-a", "8xH100", "--prolog", bad)
    cluster.start_agent("node-b", "8xH100", "--prolog", prolog, "--epilog", epilog)
    cluster.wait_nodes("node-a", "node-b")
    client = cluster.client()
    client.drain("node-b")  # the job goes to node-a first
    job = client.submit(
        {"name": "hooked", "tasks_per_node": 2, "resources": {"gpus": 2}, "command": "true"}
    )
    reason = "prolog failed (exit 1): GPU 3 ECC errors"
    wait_for(lambda: node(cluster, "node-a").state == "draining", 30, "node-a to drain")
    assert node(cluster, "node-a").reason == f"{reason} (job {job.id})"
    wait_for(lambda: client.get(job.id).attempt == 1, 10, "the requeue")
    client.undrain("node-b")
    wait_for(lambda: client.get(job.id).state == "succeeded", 30, "the job to succeed on node-b")
    done = client.get(job.id)
    assert {t.node for t in done.tasks} == {"node-b"}
    user = done.unix_user or getpass.getuser()
    expected = [f"prolog {job.id} 1 node-b {user}", f"epilog {job.id} 1 node-b {user}"]
    wait_for(lambda: runs.read_text().splitlines() == expected, 10, "node-b's epilog")
    assert reason in " ".join(cluster.cli("nodes").stdout.split())
    shown = cluster.cli("show", str(job.id)).stdout
    assert f"node node-a drained: {reason}; requeued" in " ".join(shown.split())

    second = client.submit({"name": "bad-epilog", "resources": {"gpus": 1}, "command": "true"})
    wait_for(lambda: node(cluster, "node-b").state == "draining", 30, "node-b to drain")
    assert node(cluster, "node-b").reason == (
        f"epilog failed (exit 3): /scratch still busy (job {second.id})"
    )
    assert client.get(second.id).state == "succeeded"  # the epilog does not change it
    assert runs.read_text().splitlines()[2:] == [
        f"prolog {second.id} 0 node-b {user}",
        f"epilog {second.id} 0 node-b {user}",
    ]
