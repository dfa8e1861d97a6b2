"""Job kinds and roles with real agents (SPEC section 8): a heterogeneous job's
environment, and a 2-node JAX job joined by ``jax.distributed.initialize()``."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from tests.e2e.cluster import LocalCluster

RECORD = r"""
import json, os
keys = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "NNODES",
        "MASTER_ADDR", "MASTER_PORT", "CUDA_VISIBLE_DEVICES", "CORRAL_NODE", "CORRAL_ROLE",
        "CORRAL_ROLE_RANK", "CORRAL_ROLE_WORLD_SIZE", "CORRAL_KIND", "ROLE_NAME", "ROLE_RANK",
        "ROLE_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE", "TORCHELASTIC_RUN_ID", "WHO")
rec = {k: os.environ.get(k) for k in keys}
with open(os.path.join(os.environ["OUT"], f"{rec['RANK']}.json"), "w") as f:
    json.dump(rec, f)
"""

JAX = r"""
import jax
jax.distributed.initialize()
import jax.numpy as jnp
from jax.experimental import multihost_utils
total = multihost_utils.process_allgather(jnp.array([jax.process_index() + 1.0])).sum()
print(f"process {jax.process_index()} of {jax.process_count()} sum {float(total):g}", flush=True)
jax.distributed.shutdown()
"""


def test_parameter_server_and_workers_run_as_one_job(cluster: LocalCluster, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    client = cluster.client()
    command = [sys.executable, "-c", RECORD]
    job = client.submit(
        {
            "name": "ps-and-workers",
            "command": command,
            "env": {"OUT": str(out), "WHO": "job"},
            "roles": [
                {"name": "ps", "resources": {"cpus": 0.5}, "env": {"WHO": "ps"}},
                {"name": "worker", "nodes": 2, "tasks_per_node": 2, "resources": {"gpus": 4}},
            ],
        }
    )
    done = client.wait(job.id, timeout=60)[0]
    assert done.state == "succeeded", done.reason
    recs = {int(p.stem): json.loads(p.read_text()) for p in out.glob("*.json")}
    assert sorted(recs) == [0, 1, 2, 3, 4]
    ps, workers = recs[0], [recs[r] for r in range(1, 5)]
    assert (ps["CORRAL_ROLE"], ps["CORRAL_ROLE_RANK"], ps["CORRAL_ROLE_WORLD_SIZE"]) == (
        "ps",
        "0",
        "1",
    )
    assert ps["WHO"] == "ps" and ps["CUDA_VISIBLE_DEVICES"] == ""
    assert [w["CORRAL_ROLE_RANK"] for w in workers] == ["0", "1", "2", "3"]
    assert {w["CORRAL_ROLE"] for w in workers} == {"worker"}
    assert {w["CORRAL_ROLE_WORLD_SIZE"] for w in workers} == {"4"}
    assert {w["WHO"] for w in workers} == {"job"}
    assert {r["WORLD_SIZE"] for r in recs.values()} == {"5"}
    assert {r["NNODES"] for r in recs.values()} == {"3"}
    assert {r["GROUP_WORLD_SIZE"] for r in recs.values()} == {"3"}
    assert {r["ROLE_NAME"] for r in workers} == {"worker"}
    assert {r["TORCHELASTIC_RUN_ID"] for r in recs.values()} == {f"corral-{job.id}"}
    assert {r["MASTER_ADDR"] for r in recs.values()} == {ps["MASTER_ADDR"]}
    assert len({w["CORRAL_NODE"] for w in workers}) == 2  # one worker pair per node
    assert all(len(w["CUDA_VISIBLE_DEVICES"].split(",")) == 2 for w in workers)
    assert {w["LOCAL_WORLD_SIZE"] for w in workers} == {"2"}

    shown = cluster.cli("show", str(job.id))
    assert shown.returncode == 0, shown.stderr
    assert "ROLE" in shown.stdout and "ps: 1 node" in shown.stdout
    assert "worker: 2 nodes x 4 GPUs" in shown.stdout
    data = json.loads(cluster.cli("show", str(job.id), "-o", "json").stdout)
    assert [t["role"] for t in data["tasks"]] == ["ps", "worker", "worker", "worker", "worker"]


@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax is not installed")
def test_two_node_jax_job_joins_with_no_arguments(cluster: LocalCluster, tmp_path: Path) -> None:
    client = cluster.client()
    job = client.submit(
        {
            "kind": "jax",
            "nodes": 2,
            "resources": {"gpus": 1},
            "command": [sys.executable, "-c", JAX],
            "env": {"JAX_PLATFORMS": "cpu"},
        }
    )
    done = client.wait(job.id, timeout=120)[0]
    logs = [client.logs(job.id, task=rank) for rank in (0, 1)]
    assert done.state == "succeeded", f"{done.reason}\n{logs}"
    assert "process 0 of 2 sum 3" in logs[0]
    assert "process 1 of 2 sum 3" in logs[1]
