"""``corral.embedded.farm``: one interpreter start forks many ``corral`` processes, each in
a session of its own with its own log, reaped by the farm, which leaves once they have."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import corral


def run_farm(specs: list[dict]) -> tuple[list[int], subprocess.Popen]:
    farm = subprocess.Popen(
        [sys.executable, "-m", "corral.embedded.farm"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert farm.stdin is not None and farm.stdout is not None
    with farm.stdin:
        farm.stdin.write(json.dumps(specs).encode())
    pids = json.loads(farm.stdout.readline())
    return pids, farm


def test_each_child_runs_its_command_into_its_own_log(tmp_path: Path) -> None:
    logs = [tmp_path / "a.log", tmp_path / "b.log", tmp_path / "bad.log"]
    specs = [
        {"argv": ["--version"], "log": str(logs[0])},
        {"argv": ["--version"], "log": str(logs[1])},
        {"argv": ["no-such-command"], "log": str(logs[2])},
    ]
    pids, farm = run_farm(specs)
    assert len(set(pids)) == 3 and farm.pid not in pids and os.getpid() not in pids
    assert farm.wait(timeout=60) == 0  # it left once every child had ended (all reaped)
    for log in logs[:2]:
        assert log.read_text().strip() == f"corral {corral.__version__}"
    assert "no-such-command" in logs[2].read_text()  # its own error, in its own log


def test_an_empty_list_starts_nothing(tmp_path: Path) -> None:
    pids, farm = run_farm([])
    assert pids == [] and farm.wait(timeout=60) == 0
