"""``corral sim --trace`` fits the trace to ``--cluster``, and says when a trace's times are
made up instead of reporting JCTs of decades."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from corral.sim.metrics import TIMED, compute_metrics
from corral.sim.render import NOT_APPLICABLE, metric_rows
from corral.sim.result import JobRecord, Outcome, Sample, SimResult
from tests.sim.test_cli_sim import corral

FOUR_GPU_NODES = "nodes:\n  - name: 'n{0..3}'\n    gpus: {count: 4, model: V100}\n"
PHILLY = "job_id,timestamp,duration,num_gpus\nbig,0,100,8\nsmall,10,50,1\n"
PODS = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,1000,1024,1,500\np1,1000,1024,2,1000\n"
NODES = "sn,cpu_milli,memory_mib,gpu,model\nm0,8000,16384,4,T4\n"


@pytest.fixture
def files(tmp_path: Path) -> Path:
    (tmp_path / "cluster.yaml").write_text(FOUR_GPU_NODES)
    (tmp_path / "jobs.csv").write_text(PHILLY)
    (tmp_path / "pods.csv").write_text(PODS)
    (tmp_path / "nodes.csv").write_text(NODES)
    return tmp_path


def sim_json(files: Path, *args: str) -> dict:
    result = corral(*args, "-o", "json", cwd=files)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_an_8_gpu_philly_job_spans_two_4_gpu_nodes(files: Path) -> None:
    data = sim_json(files, "--cluster", "cluster.yaml", "--trace", "philly:jobs.csv")
    big = next(j for j in data["jobs"] if j["name"] == "big")
    assert big["state"] == "completed", big["reason"]
    assert [len(p["gpus"]) for p in big["placement"]] == [4, 4]
    assert len({p["node"] for p in big["placement"]}) == 2


def test_the_trace_option_still_wins(files: Path) -> None:
    data = sim_json(
        files, "--cluster", "cluster.yaml", "--trace", "philly:jobs.csv?gpus_per_node=8"
    )
    big = next(j for j in data["jobs"] if j["name"] == "big")
    assert big["state"] == "refused"  # 8 GPUs on one node: no 4-GPU node can hold it


def test_a_pod_list_without_timestamps_says_so(files: Path) -> None:
    data = sim_json(files, "--trace", "openb:pods.csv?nodes=nodes.csv")
    assert len(data["notes"]) == 1 and "without timestamps" in data["notes"][0]
    metrics = data["metrics"]
    assert metrics["avg_jct"] is None and metrics["avg_wait"] is None
    assert metrics["makespan"] is None and "avg_jct" in metrics["not_applicable"]
    assert metrics["gpu_utilization"] is not None  # placement is still measured
    assert all(j["state"] == "completed" for j in data["jobs"])

    table = corral("--trace", "openb:pods.csv?nodes=nodes.csv", cwd=files)
    assert table.returncode == 0, table.stderr
    assert "note: pods.csv is replayed without timestamps" in table.stdout
    jct_row = next(line for line in table.stdout.splitlines() if "JCT avg" in line)
    assert NOT_APPLICABLE in jct_row and "d" not in jct_row.replace("JCT avg", "")


def test_made_up_times_leave_the_timed_metrics_out() -> None:
    jobs = (JobRecord("a", "q", 0, 5, 1e9 + 5, Outcome.COMPLETED, 1, 1e9),)
    result = SimResult(jobs, (Sample(5, 1, 0, 1),), capacity_gpus=4)
    timed, untimed = compute_metrics(result), compute_metrics(result, timed=False)
    assert timed.avg_jct == 1e9 + 5 and timed.not_applicable == ()
    assert all(getattr(untimed, name) is None for name in TIMED)
    assert untimed.not_applicable == TIMED
    assert untimed.gpu_utilization == timed.gpu_utilization
    cells = {row.label: row.cells[0] for row in metric_rows([untimed])}
    assert cells["JCT avg"] == cells["Makespan"] == cells["Wait p99"] == NOT_APPLICABLE
    assert cells["Completed"] == "1"


def test_the_report_shows_the_notes_and_drops_the_jct_plot(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from corral.sim.report import write_report

    jobs = (JobRecord("a", "q", 0, 5, 1e9 + 5, Outcome.COMPLETED, 1, 1e9),)
    result = SimResult(jobs, (Sample(5, 1, 0, 1),), capacity_gpus=4)
    path = tmp_path / "report.html"
    write_report(path, [("x", result, compute_metrics(result, timed=False))], ["no timestamps"])
    text = path.read_text()
    assert '<p class="note">no timestamps</p>' in text
    assert "Job completion time CDF" not in text and text.count("<img") == 2
    assert f"<td>{NOT_APPLICABLE}</td>" in text
