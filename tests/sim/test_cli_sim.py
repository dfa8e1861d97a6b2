"""``corral sim`` as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

CLUSTER = "nodes:\n  - name: 'n{0..1}'\n    gpus: {count: 8, model: H100}\n"
JOBS = (
    "- {name: a, submit_time: 0, duration: 100, resources: {gpus: 8}}\n"
    "- {name: b, submit_time: 0, duration: 50, resources: {gpus: 8}}\n"
    "- {name: gang, submit_time: 10, duration: 30, nodes: 2, tasks_per_node: 8,"
    " resources: {gpus: 8}}\n"
    "- {name: small, submit_time: 20, duration: 10, resources: {gpus: 1}}\n"
)


def corral(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "corral", "sim", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
        timeout=120,
    )


@pytest.fixture
def files(tmp_path: Path) -> Path:
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    (tmp_path / "jobs.yaml").write_text(JOBS)
    (tmp_path / "spread.yaml").write_text("policy: {placement: spread}\n")
    return tmp_path


def test_prints_the_metrics_table(files: Path) -> None:
    result = corral("--cluster", "cluster.yaml", "--jobs", "jobs.yaml", cwd=files)
    assert result.returncode == 0, result.stderr
    for row in ("JCT avg", "Wait p95", "Makespan", "GPU utilization", "SRPT bound"):
        assert row in result.stdout


def test_json_matches_the_spec_and_is_deterministic(files: Path) -> None:
    args = ("--cluster", "cluster.yaml", "--jobs", "jobs.yaml", "-o", "json")
    first, second = corral(*args, cwd=files), corral(*args, cwd=files)
    assert first.returncode == 0, first.stderr
    assert first.stdout == second.stdout
    data = json.loads(first.stdout)
    assert set(data) == {"jobs", "metrics", "notes"} and data["notes"] == []
    spec_job_keys = {
        "name",
        "submit_time",
        "start_time",
        "end_time",
        "state",
        "preemptions",
        "placement",
    }
    assert all(spec_job_keys <= set(job) for job in data["jobs"])
    gang = next(j for j in data["jobs"] if j["name"] == "gang")
    assert (gang["start_time"], gang["end_time"], gang["state"]) == (100, 130, "completed")
    assert len(gang["placement"]) == 16
    assert gang["placement"][0] == {"node": "n0", "gpus": [0]}
    spec_metrics = {"avg_jct", "p50_jct", "p95_jct", "avg_wait", "makespan", "gpu_utilization"}
    assert spec_metrics <= set(data["metrics"])
    assert data["metrics"]["makespan"] == 140


def test_compare_and_report(files: Path) -> None:
    result = corral(
        "--cluster",
        "cluster.yaml",
        "--jobs",
        "jobs.yaml",
        "--compare",
        "spread.yaml",
        "--config",
        "spread.yaml",
        "--report",
        "out.html",
        cwd=files,
    )
    assert result.returncode == 0, result.stderr
    assert "Comparison" in result.stdout and "spread" in result.stdout
    html = (files / "out.html").read_text()
    assert html.count("data:image/png;base64,") == 3


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--jobs", "jobs.yaml"], "--cluster is required"),
        (["--cluster", "cluster.yaml"], "exactly one of --jobs"),
        (["--cluster", "cluster.yaml", "--jobs", "nope.yaml"], "cannot read nope.yaml"),
        (["--cluster", "cluster.yaml", "--trace", "nosuch:x.csv"], "nosuch"),
    ],
)
def test_mistakes_get_one_line_errors(files: Path, args: list[str], message: str) -> None:
    result = corral(*args, cwd=files)
    assert result.returncode != 0
    assert message in result.stderr and "Traceback" not in result.stderr
