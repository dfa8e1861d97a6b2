"""The collectives behind should_stop and save, in one process (2 processes: integration)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from corral import train
from corral.train import collective


def test_a_single_process_has_no_collectives() -> None:
    assert collective.current() is None
    train.init_distributed(env={"RANK": "0", "WORLD_SIZE": "1"})
    assert collective.current() is None


def test_jax_collectives_round_trip_flags_and_digests() -> None:
    jax = pytest.importorskip("jax")
    group = collective.JaxCollective(jax, rank=0, world_size=1)
    digest = hashlib.sha256(b"part").hexdigest()
    assert group.gather_digests(digest) == [digest]
    assert group.any(True) is True
    assert group.any(False) is False
    group.barrier("test")  # a group of one passes at once


def test_jax_single_process_uses_no_collectives() -> None:
    pytest.importorskip("jax")
    info = train.init_jax_distributed(env={})
    assert info.backend == "jax" and info.world_size == 1
    assert collective.current() is None
    assert train.should_stop() is False
    train.request_stop()
    assert train.should_stop() is True


def test_torch_collectives_gather_digests_without_numpy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    torch = pytest.importorskip("torch")
    dist = torch.distributed
    if not dist.is_available() or dist.is_initialized():
        pytest.skip("no torch.distributed, or a process group already exists")

    def no_numpy(*_args: object) -> None:
        raise RuntimeError("Numpy is not available")  # as torch says without NumPy

    monkeypatch.setattr(torch.Tensor, "numpy", no_numpy)  # all_gather_object needs it
    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    try:
        group = collective.TorchCollective(dist)
        digest = hashlib.sha256(b"part").hexdigest()
        assert group.gather_digests(digest) == [digest]
        assert group.any(True) is True and group.any(False) is False
    finally:
        dist.destroy_process_group()
