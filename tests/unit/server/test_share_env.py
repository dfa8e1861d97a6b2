"""What a task holding a share of a GPU is told of it (``share_env``), case by case."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from corral.server.services.launch import share_env

GIB = 1024**3

CASES = {
    "half a GPU": (
        {"gpus": [0], "gpu_milli": 500},
        {"CORRAL_GPU_FRACTION": "0.5", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "50"},
    ),
    "a quarter with a memory share": (
        {"gpus": [1], "gpu_milli": 250, "gpu_memory": 20 * GIB},
        {
            "CORRAL_GPU_FRACTION": "0.25",
            "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25",
            "CORRAL_GPU_MEMORY": str(20 * GIB),
        },
    ),
    "a third": (
        {"gpus": [0], "gpu_milli": 333},
        {"CORRAL_GPU_FRACTION": "0.333", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "33"},
    ),
    "a sliver still gets 1% of the threads": (
        {"gpus": [0], "gpu_milli": 1},
        {"CORRAL_GPU_FRACTION": "0.001", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "1"},
    ),
    "whole GPUs: nothing": ({"gpus": [0, 1], "gpu_milli": 1000}, {}),
    "a MIG instance: nothing": ({"gpus": [0], "gpu_milli": 1000, "mig_slots": [1]}, {}),
    "no GPU: nothing": ({"gpus": [], "gpu_milli": 1000}, {}),
}


@pytest.mark.parametrize(("task", "expected"), CASES.values(), ids=CASES.keys())
def test_share_env(task: dict, expected: dict[str, str]) -> None:
    row = SimpleNamespace(**{"gpu_memory": 0, "mig_slots": [], **task})
    assert share_env(row) == expected  # type: ignore[arg-type]
