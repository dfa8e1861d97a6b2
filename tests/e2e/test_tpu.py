"""A TPU slice end to end: ``corral up --cluster`` with a declared pod (one real agent
process per host, each reporting its declared chips), a job per host printing its TPU
variables, and a GPU job kept on the GPU node."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from corral.client import Client
from tests.e2e.cluster import free_port, run_corral

CLUSTER = (
    "nodes:\n"
    "  - name: gpu-0\n"
    "    gpus: {count: 2, model: H100}\n"
    "tpu_pods:\n"
    "  - {name: pod-a, generation: v5p, shape: [4, 2, 2], chips_per_host: [2, 2, 1]}\n"
)
PRINT_TPU = (
    "import json, os; print(json.dumps({k: os.environ.get(k) for k in ("
    "'TPU_WORKER_ID', 'TPU_WORKER_HOSTNAMES', 'TPU_TOPOLOGY', 'TPU_ACCELERATOR_TYPE', "
    "'RANK', 'WORLD_SIZE', 'CORRAL_NODE', 'CUDA_VISIBLE_DEVICES')}))"
)


def test_a_tpu_slice_runs_one_task_per_host_with_its_tpu_variables(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    env = {**os.environ, "CORRAL_HOME": str(home), "COLUMNS": "200"}
    env.pop("CORRAL_SERVER", None)
    env.pop("CORRAL_TOKEN", None)
    up = run_corral(
        ["up", "--cluster", str(tmp_path / "cluster.yaml"), "--detach", "--port", str(free_port())],
        env,
    )
    try:
        assert up.returncode == 0, up.stderr + up.stdout
        client = Client((home / "server").read_text().strip(), (home / "token").read_text().strip())
        hosts = [n for n in client.nodes() if n.name.startswith("pod-a-")]
        assert [(n.name, n.tpu_chips, n.gpus, n.models) for n in hosts] == [
            (f"pod-a-h00{i}", 4, 0, ["v5p"]) for i in range(4)
        ]
        assert hosts[1].labels["tpu.corral/host"] == "1,0,0"  # the agents report them

        # 2x4x1 chips only fits the 4x2x2 pod turned: 4x2x1, two hosts along x
        sub = run_corral(
            ["submit", "--tpu", "v5p:2x4x1", "--", sys.executable, "-c", PRINT_TPU], env
        )
        assert sub.returncode == 0, sub.stderr
        job_id = int(sub.stdout.strip())
        gpu = client.submit({"command": "true", "resources": {"gpus": 2}})
        done = client.wait([job_id, gpu.id], timeout=60)
        assert [j.state for j in done] == ["succeeded", "succeeded"], [j.reason for j in done]

        shown = client.get(job_id)
        assert (shown.nodes, shown.tasks_per_node) == (2, 1)
        assert [t.gpus for t in shown.tasks] == [[0, 1, 2, 3]] * 2
        slice_hosts = [t.node for t in shown.tasks]
        assert slice_hosts in (["pod-a-h000", "pod-a-h001"], ["pod-a-h002", "pod-a-h003"])
        for rank in (0, 1):
            assert json.loads(client.logs(job_id, task=rank)) == {
                "TPU_WORKER_ID": str(rank),
                "TPU_WORKER_HOSTNAMES": ",".join(slice_hosts),
                "TPU_TOPOLOGY": "4x2x1",
                "TPU_ACCELERATOR_TYPE": "v5p-16",
                "RANK": str(rank),
                "WORLD_SIZE": "2",
                "CORRAL_NODE": slice_hosts[rank],
                "CUDA_VISIBLE_DEVICES": "",
            }
        assert [t.node for t in client.get(gpu.id).tasks] == ["gpu-0"]
        table = run_corral(["nodes"], env).stdout
        assert "0/4 TPU" in table and "v5p" in table
        assert "v5p:2x4x1" in run_corral(["jobs", "--all"], env).stdout
    finally:
        down = run_corral(["down"], env)
    assert down.returncode == 0, down.stderr
