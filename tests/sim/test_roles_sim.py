"""Jobs with roles and kinds through ``corral sim``: the scheduling side of SPEC section 8."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

CLUSTER = "nodes:\n  - name: 'n{0..1}'\n    gpus: {count: 8, model: H100}\n    cpus: 16\n"
JOBS = """
- name: het
  submit_time: 0
  duration: 100
  command: [python, driver.py]
  roles:
    - {name: ps, resources: {cpus: 2}}
    - {name: worker, nodes: 2, resources: {gpus: 8, cpus: 4}}
- {name: whole, submit_time: 0, duration: 100, resources: {gpus: 8}}
- {name: jax, kind: jax, submit_time: 5, duration: 10, nodes: 2, resources: {gpus: 4}}
- name: mpi
  kind: mpi
  submit_time: 5
  duration: 10
  nodes: 2
  tasks_per_node: 2
  resources: {gpus: 2}
- {name: ray, kind: ray, submit_time: 5, duration: 10, nodes: 3, resources: {gpus: 1, cpus: 1}}
"""


def test_roles_and_kinds_hold_every_role_and_never_overlap_what_they_exclude(
    tmp_path: Path,
) -> None:
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
    jobs = {j["name"]: j for j in json.loads(result.stdout)["jobs"]}
    het = jobs["het"]
    assert all(j["end_time"] is not None for j in jobs.values())
    # het holds 16 GPUs (both nodes) for 100 s: no other job can run beside it
    for other in (jobs[name] for name in ("whole", "jax", "mpi", "ray")):
        assert other["end_time"] <= het["start_time"] or other["start_time"] >= het["end_time"]
    assert het["end_time"] - het["start_time"] == 100
