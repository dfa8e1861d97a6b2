"""TPU slices in the simulator: a cluster file with ``tpu_pods``, jobs with ``tpu``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from corral.schemas.cluster import load_cluster
from corral.schemas.config import load_config
from corral.sim.engine import simulate
from corral.sim.jobs_file import load_jobs

CLUSTER = (
    "nodes:\n"
    "  - name: gpu-0\n"
    "    gpus: {count: 8, model: H100}\n"
    "tpu_pods:\n"
    "  - {name: pod-a, generation: v5p, shape: [4, 4, 4], chips_per_host: [2, 2, 1]}\n"
)
JOBS = (
    "- {name: half, submit_time: 0, duration: 100, resources: {tpu: 'v5p:4x4x2'}}\n"
    "- {name: quarter, submit_time: 0, duration: 50, resources: {tpu: 'v5p:2x2x4'}}\n"
    "- {name: whole, submit_time: 10, duration: 30, resources: {tpu: 'v5p:4x4x4'}}\n"
    "- {name: gpu, submit_time: 10, duration: 20, resources: {gpus: 8}}\n"
    "- {name: crooked, submit_time: 20, duration: 10, resources: {tpu: 'v5p:3x3x1'}}\n"
    "- {name: sized, submit_time: 20, duration: 10, nodes: 2, resources: {tpu: 'v5p:2x2x4'}}\n"
)


def test_slices_share_a_pod_and_gpu_jobs_keep_to_gpu_nodes() -> None:
    nodes = load_cluster(CLUSTER).to_nodes()
    result = simulate(nodes, load_jobs(JOBS), load_config(None))
    jobs = {j.name: j for j in result.jobs}
    # half (8 hosts) and quarter (4 hosts) fit side by side in the 16-host pod
    assert (jobs["half"].start_time, jobs["half"].end_time) == (0.0, 100.0)
    assert (jobs["quarter"].start_time, jobs["quarter"].end_time) == (0.0, 50.0)
    assert len(jobs["half"].placement) == 8 and len(jobs["quarter"].placement) == 4
    held = [p.node for name in ("half", "quarter") for p in jobs[name].placement]
    assert len(set(held)) == 12 and all(n.startswith("pod-a-h") for n in held)
    assert all(p.gpus == (0, 1, 2, 3) for p in jobs["half"].placement)
    # the whole pod waits for both; the GPU job runs on the GPU node, never on TPU hosts
    assert (jobs["whole"].start_time, jobs["whole"].end_time) == (100.0, 130.0)
    assert len(jobs["whole"].placement) == 16
    assert (jobs["gpu"].start_time, [p.node for p in jobs["gpu"].placement]) == (10.0, ["gpu-0"])
    assert jobs["crooked"].state.value == "refused"
    assert "not a whole number of hosts" in (jobs["crooked"].reason or "")
    assert jobs["sized"].state.value == "refused"
    assert "4 hosts (the job asks for nodes: 2)" in (jobs["sized"].reason or "")
    assert result.capacity_gpus == 8.0  # TPU chips are not GPU capacity


def test_corral_sim_runs_a_tpu_cluster(tmp_path: Path) -> None:
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    (tmp_path / "jobs.yaml").write_text(JOBS)
    result = subprocess.run(
        [sys.executable, "-m", "corral", "sim", "--cluster", "cluster.yaml"]
        + ["--jobs", "jobs.yaml", "-o", "json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    states = {j["name"]: j["state"] for j in json.loads(result.stdout)["jobs"]}
    assert states == {
        "half": "completed",
        "quarter": "completed",
        "whole": "completed",
        "gpu": "completed",
        "crooked": "refused",
        "sized": "refused",
    }
