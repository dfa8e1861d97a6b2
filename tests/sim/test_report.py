"""The Rich tables and the HTML report (checked as files and text, never as pixels)."""

from __future__ import annotations

import base64
import re
import sys
from pathlib import Path

import pytest
from rich.console import Console

from corral.errors import ValidationError
from corral.sim.metrics import compute_metrics
from corral.sim.render import compare_table, metric_rows, metrics_table
from corral.sim.report import write_report
from corral.sim.result import JobRecord, Outcome, Sample, SimResult


def result(name: str, b_start: float) -> SimResult:
    """4 GPUs: a (2 GPUs, 0-3600), c (2 GPUs, 300-3600), b (4 GPUs) from ``b_start``."""
    jobs = (
        JobRecord("a", "x", 0, 0, 3600, Outcome.COMPLETED, 2, 3600),
        JobRecord("b", "y", 0, b_start, b_start + 7200, Outcome.COMPLETED, 4, 7200),
        JobRecord("c", "x", 300, 300, 3600, Outcome.COMPLETED, 2, 3300),
        JobRecord("r", "z", 0, None, None, Outcome.REFUSED, 99, 60),
    )
    samples = (
        Sample(0, 2, 1, 1, 2),
        Sample(300, 4, 1, 2),
        Sample(3600, 0, 1, 0),
        Sample(b_start, 4, 0, 1),
        Sample(b_start + 7200, 0, 0, 0),
    )
    return SimResult(jobs, samples, capacity_gpus=4, config_name=name, seed=3)


def text_of(table) -> str:
    console = Console(record=True, width=200)
    console.print(table)
    return console.export_text()


def test_metrics_table_rows() -> None:
    metrics = compute_metrics(result("fifo", 3600))
    text = text_of(metrics_table(metrics, "fifo on 4 GPUs"))
    assert "fifo on 4 GPUs" in text
    labels = [row.label for row in metric_rows([metrics])]
    for label in labels:
        assert label in text
    assert "GPU-hours, queue x" in labels and "GPU-hours, queue y" in labels
    lines = {
        line.split("│")[1].strip(): line.split("│")[2].strip()
        for line in text.splitlines()
        if line.count("│") == 3
    }
    assert lines["Jobs"] == "4"
    assert lines["Refused"] == "1"
    # JCTs 3600, 10800, 3300: mean 5900 s
    assert lines["JCT avg"] == "1h38m"
    assert lines["Makespan"] == "3h00m"
    # allocated GPU-s: 2*300 + 4*3300 + 4*7200 = 42600 of 4 * 10800
    assert lines["GPU utilization"] == "98.6%"
    assert lines["Slowdown avg"] == "1.17x"  # (1 + 1.5 + 3300/3300) / 3


def test_compare_table_marks_the_best_value_per_row() -> None:
    fast = compute_metrics(result("fast", 3600))
    slow = compute_metrics(result("slow", 7200))  # b starts an hour later, the cluster idles
    text = text_of(compare_table([("fast", fast), ("slow", slow)]))
    rows = {
        line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:4]]
        for line in text.splitlines()
        if line.count("│") == 4
    }
    header = next(line for line in text.splitlines() if "Metric" in line)
    assert "fast" in header and "slow" in header
    assert rows["JCT avg"] == ["1h38m *", "1h58m"]
    assert rows["Makespan"] == ["3h00m *", "4h00m"]
    assert rows["GPU utilization"][0].endswith("*") and not rows["GPU utilization"][1].endswith("*")
    assert rows["Jobs"] == ["4", "4"]  # not ranked
    assert rows["Preemptions"] == ["0", "0"]  # a tie marks nothing
    assert "best of its row" in text


def test_metric_rows_for_a_run_without_completions() -> None:
    jobs = (JobRecord("p", "q", 0, None, None, Outcome.UNFINISHED, 1, 10),)
    metrics = compute_metrics(SimResult(jobs, (), capacity_gpus=1))
    rows = {row.label: row.cells for row in metric_rows([metrics])}
    assert rows["JCT avg"] == ("-",)
    assert rows["GPU utilization"] == ("-",)
    assert rows["Unfinished"] == ("1",)


def test_many_queues_are_summed_past_the_limit() -> None:
    jobs = tuple(
        JobRecord(f"j{i}", f"q{i:02d}", 0, 0, 3600, Outcome.COMPLETED, 1, 3600 * (i + 1))
        for i in range(20)
    )
    metrics = compute_metrics(SimResult(jobs, (), capacity_gpus=64))
    rows = {row.label: row.cells for row in metric_rows([metrics], max_queues=5)}
    queue_rows = [label for label in rows if label.startswith("GPU-hours, ")]
    # the 4 largest queues (q16..q19: 17 to 20 GPU-hours), then the other 16 summed
    assert queue_rows == [
        "GPU-hours, queue q16",
        "GPU-hours, queue q17",
        "GPU-hours, queue q18",
        "GPU-hours, queue q19",
        "GPU-hours, 16 other queues",
    ]
    assert rows["GPU-hours, queue q19"] == ("20.00",)
    assert rows["GPU-hours, 16 other queues"] == (f"{sum(range(1, 17)):.0f}",)


def images(html: str) -> list[bytes]:
    return [
        base64.b64decode(data) for data in re.findall(r'src="data:image/png;base64,([^"]+)"', html)
    ]


def test_report_for_several_configurations(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    runs = [
        (name, r, compute_metrics(r))
        for name, r in (("fifo", result("fifo", 7200)), ("easy <backfill>", result("easy", 3600)))
    ]
    path = tmp_path / "report.html"
    write_report(path, runs)
    html = path.read_text(encoding="utf-8")
    pngs = images(html)
    assert len(pngs) == 3
    assert all(png.startswith(b"\x89PNG\r\n\x1a\n") for png in pngs)
    for alt in ("GPU allocation over time", "Queue length over time", "Job completion time CDF"):
        assert f'alt="{alt}"' in html
    assert "fifo" in html
    assert "easy &lt;backfill&gt;" in html and "<backfill>" not in html
    assert "<table>" in html and "JCT avg" in html and 'class="best"' in html
    assert "http://" not in html and "https://" not in html and "<script" not in html


def test_report_for_one_configuration_and_edge_cases(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    empty = SimResult((), (), capacity_gpus=8, config_name="empty")
    one = result("one", 3600)
    for name, r in (("empty", empty), ("one", one)):
        path = tmp_path / f"{name}.html"
        write_report(path, [(name, r, compute_metrics(r))])
        html = path.read_text(encoding="utf-8")
        assert len(images(html)) == 3
        assert name in html
        assert 'class="best"' not in html


def test_report_without_matplotlib(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib` fail
    r = result("fifo", 3600)
    with pytest.raises(ValidationError, match=r"pip install 'corral\[report\]'"):
        write_report(tmp_path / "report.html", [("fifo", r, compute_metrics(r))])
    assert not (tmp_path / "report.html").exists()


def test_report_is_the_same_byte_for_byte(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    r = result("fifo", 3600)
    first, second = tmp_path / "1.html", tmp_path / "2.html"
    write_report(first, [("fifo", r, compute_metrics(r))])
    write_report(second, [("fifo", r, compute_metrics(r))])
    assert first.read_bytes() == second.read_bytes()
