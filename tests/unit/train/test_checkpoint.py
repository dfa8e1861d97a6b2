"""Atomic, sharded checkpoints: layout, manifest, pruning, skipping partial or corrupt ones."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import httpx
import pytest

from corral import train
from corral.train import TrainError
from corral.train.checkpoint import MANIFEST, notify_checkpoint

ROOT = Path(__file__).resolve().parents[3]


def steps(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def test_save_and_load_round_trip(tmp_path: Path) -> None:
    assert train.load_latest(tmp_path) is None
    target = train.save({"w": [1.0, 2.0], "step": 7}, 7, directory=tmp_path)
    assert target == tmp_path / "step-00000007"
    assert sorted(p.name for p in target.iterdir()) == [MANIFEST, "rank-00000.pt"]
    manifest = json.loads((target / MANIFEST).read_text())
    assert manifest["step"] == 7 and manifest["world_size"] == 1
    assert list(manifest["files"]) == ["rank-00000.pt"]
    assert train.load_latest(tmp_path) == (7, {"w": [1.0, 2.0], "step": 7})


def test_directory_comes_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(TrainError, match="CORRAL_CHECKPOINT_DIR"):
        train.save({}, 1)
    monkeypatch.setenv("CORRAL_CHECKPOINT_DIR", str(tmp_path / "ckpt"))
    train.save({"a": 1}, 1)
    assert train.load_latest() == (1, {"a": 1})


def test_keeps_the_last_k_complete_checkpoints(tmp_path: Path) -> None:
    for step in (10, 20, 30, 40, 50):
        train.save({"step": step}, step, directory=tmp_path, keep=2)
    assert steps(tmp_path) == ["step-00000040", "step-00000050"]
    assert train.load_latest(tmp_path) == (50, {"step": 50})


def test_pruning_removes_leftovers_of_interrupted_saves(tmp_path: Path) -> None:
    train.save({"step": 10}, 10, directory=tmp_path, keep=1)
    (tmp_path / "step-00000015").mkdir()  # a save killed before COMPLETE
    (tmp_path / "step-00000015" / ".rank-00000.pt.tmp-1").write_bytes(b"half")
    train.save({"step": 20}, 20, directory=tmp_path, keep=1)
    assert steps(tmp_path) == ["step-00000020"]


def test_saving_a_complete_step_again_changes_nothing(tmp_path: Path) -> None:
    train.save({"v": 1}, 5, directory=tmp_path)
    train.save({"v": 2}, 5, directory=tmp_path)
    assert train.load_latest(tmp_path) == (5, {"v": 1})


def test_sharded_save_completes_when_every_rank_is_there(tmp_path: Path) -> None:
    train.save({"shard": 1}, 3, directory=tmp_path, rank=1, world_size=2)
    assert train.load_latest(tmp_path, rank=1, world_size=2) is None  # not complete yet
    train.save({"shard": 0}, 3, directory=tmp_path, rank=0, world_size=2)
    files = json.loads((tmp_path / "step-00000003" / MANIFEST).read_text())["files"]
    assert sorted(files) == ["rank-00000.pt", "rank-00001.pt"]
    assert train.load_latest(tmp_path, rank=0, world_size=2) == (3, {"shard": 0})
    assert train.load_latest(tmp_path, rank=1, world_size=2) == (3, {"shard": 1})


def test_rank_zero_refuses_to_complete_without_every_part(tmp_path: Path) -> None:
    with pytest.raises(TrainError, match="rank-00001.pt is missing"):
        train.save({"shard": 0}, 3, directory=tmp_path, rank=0, world_size=2)
    assert not (tmp_path / "step-00000003" / MANIFEST).exists()


def test_checkpoint_of_another_world_size_is_skipped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    train.save({"a": 1}, 3, directory=tmp_path)
    with caplog.at_level(logging.WARNING, "corral.train"):
        assert train.load_latest(tmp_path, rank=0, world_size=2) is None
    assert "saved by 1 ranks, this run has 2" in caplog.text


def test_corrupt_part_is_skipped_and_the_log_says_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    train.save({"v": 1}, 1, directory=tmp_path)
    train.save({"v": 2}, 2, directory=tmp_path)
    part = tmp_path / "step-00000002" / "rank-00000.pt"
    data = bytearray(part.read_bytes())
    data[len(data) // 2] ^= 0xFF
    part.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, "corral.train"):
        assert train.load_latest(tmp_path) == (1, {"v": 1})
    assert "step-00000002: rank-00000.pt is corrupt" in caplog.text


def test_missing_marker_and_missing_part_are_skipped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    train.save({"v": 1}, 1, directory=tmp_path)
    train.save({"v": 2}, 2, directory=tmp_path)
    train.save({"v": 3}, 3, directory=tmp_path)
    (tmp_path / "step-00000003" / MANIFEST).unlink()
    (tmp_path / "step-00000002" / "rank-00000.pt").unlink()
    with caplog.at_level(logging.WARNING, "corral.train"):
        assert train.load_latest(tmp_path) == (1, {"v": 1})
    assert "step-00000003: no COMPLETE marker" in caplog.text
    assert "step-00000002: rank-00000.pt is missing" in caplog.text


BLOCKED_SAVE = textwrap.dedent(
    """
    import sys
    from corral import train

    class Blocker:
        def __reduce__(self):
            print("inside the write", flush=True)
            sys.stdin.readline()  # the parent SIGKILLs us here
            return (dict, ())

    directory = sys.argv[1]
    train.save({"v": 1}, 1, directory=directory)
    train.save({"v": 2, "big": bytes(1 << 20), "blocker": Blocker()}, 2, directory=directory)
    """
)


@pytest.mark.timeout(60)
def test_sigkill_in_the_middle_of_a_save_leaves_the_previous_checkpoint(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", BLOCKED_SAVE, str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == "inside the write\n"
        os.kill(child.pid, signal.SIGKILL)
        assert child.wait(timeout=30) == -signal.SIGKILL
    finally:
        child.kill()
        child.wait()
    leftovers = [p.name for p in (tmp_path / "step-00000002").iterdir()]
    assert len(leftovers) == 1 and leftovers[0].startswith(".rank-00000.pt.tmp-")
    with caplog.at_level(logging.WARNING, "corral.train"):
        assert train.load_latest(tmp_path) == (1, {"v": 1})
    assert "step-00000002: no COMPLETE marker" in caplog.text


def test_notify_posts_step_and_path_with_the_job_token() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={})

    env = {
        "CORRAL_SERVER": "http://cp:8080/,http://cp2:8080",
        "CORRAL_JOB_ID": "42",
        "CORRAL_JOB_TOKEN": "tok",
    }
    assert notify_checkpoint(
        120, "/ckpt/step-00000120", env=env, transport=httpx.MockTransport(handler)
    )
    (request,) = seen
    assert str(request.url) == "http://cp:8080/api/v1/jobs/42/checkpoint"
    assert request.headers["Authorization"] == "Bearer tok"
    assert json.loads(request.content) == {"step": 120, "path": "/ckpt/step-00000120"}


def test_notify_never_raises(caplog: pytest.LogCaptureFixture) -> None:
    def down(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    env = {"CORRAL_SERVER": "http://cp:8080", "CORRAL_JOB_ID": "42", "CORRAL_TOKEN": "t"}
    with caplog.at_level(logging.WARNING, "corral.train"):
        assert not notify_checkpoint(1, "/p", env=env, transport=httpx.MockTransport(down))
    assert "could not report checkpoint 1" in caplog.text
    refused = httpx.MockTransport(lambda request: httpx.Response(403, json={}))
    assert not notify_checkpoint(1, "/p", env=env, transport=refused)
    assert not notify_checkpoint(1, "/p", env={"CORRAL_JOB_ID": "42"})  # nowhere to report
