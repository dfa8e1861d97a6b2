"""The examples as 2 real processes (gloo on loopback): stop agreement, exact resume.

examples/pytorch_ddp.py (torch.distributed) and examples/jax_train.py (JAX's distributed
runtime, whose CPU collectives also run over gloo).

Preemption is a real SIGTERM that only rank 1 sends itself (``--preempt-at``), so the stop
step is known and the test needs no clock. Timeouts only keep a hung collective from
hanging the suite.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.cluster import free_port

ROOT = Path(__file__).resolve().parents[2]
PYTORCH = ROOT / "examples" / "pytorch_ddp.py"
JAX = ROOT / "examples" / "jax_train.py"
STEPS = ["--steps", "60", "--checkpoint-every", "20", "--batch-size", "16"]


def run_ranks(
    checkpoints: Path, *args: str, world_size: int = 2, example: Path = PYTORCH
) -> list[tuple[int, str]]:
    """Run ``example`` as ``world_size`` ranks; (exit code, output) per rank."""
    port = str(free_port())
    children = []
    for rank in range(world_size):
        env = {
            **os.environ,
            "RANK": str(rank),
            "WORLD_SIZE": str(world_size),
            "LOCAL_RANK": str(rank),
            "LOCAL_WORLD_SIZE": str(world_size),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": port,
            "CORRAL_CHECKPOINT_DIR": str(checkpoints),
            "OMP_NUM_THREADS": "1",
            "PYTHONPATH": str(ROOT / "src"),
        }
        children.append(
            subprocess.Popen(
                [sys.executable, str(example), *STEPS, *args],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    results = []
    try:
        for child in children:
            out, _ = child.communicate(timeout=90)
            results.append((child.returncode, out))
    finally:
        for child in children:
            child.kill()
            child.wait()
    return results


def final_sha(output: str) -> str:
    match = re.search(r"^final-params-sha256: ([0-9a-f]{64})$", output, re.M)
    assert match, output
    return match.group(1)


@pytest.mark.parametrize("example", [PYTORCH, JAX], ids=["pytorch", "jax"])
@pytest.mark.timeout(240)
def test_sigterm_to_one_rank_stops_all_and_the_resumed_run_is_bitwise_identical(
    tmp_path: Path, example: Path
) -> None:
    pytest.importorskip("torch" if example == PYTORCH else "jax")
    straight = run_ranks(tmp_path / "straight", example=example)
    assert [code for code, _ in straight] == [0, 0], straight
    expected = final_sha(straight[0][1])

    preempted = run_ranks(
        tmp_path / "preempted", "--preempt-at", "33", "--preempt-rank", "1", example=example
    )
    assert [code for code, _ in preempted] == [0, 0], preempted
    for rank, (_, out) in enumerate(preempted):
        assert f"rank {rank} stopping at step 33" in out, out
        assert "final-params-sha256" not in out
    assert "another rank was asked to stop" in preempted[0][1]
    assert (tmp_path / "preempted" / "step-00000033" / "COMPLETE").exists()

    resumed = run_ranks(tmp_path / "preempted", example=example)
    assert [code for code, _ in resumed] == [0, 0], resumed
    for rank, (_, out) in enumerate(resumed):
        assert f"rank {rank} resumed at step 33" in out, out
    assert final_sha(resumed[0][1]) == expected
