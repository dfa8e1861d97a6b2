"""Backend and device selection: XLA on TPU slices (a fake torch_xla), CUDA device choice.

Only the hardware is simulated: the fake ``torch_xla`` registers an "xla" backend and the
``xla://`` rendezvous with torch.distributed, as the real one does, but backs them with
torch's own single-process fake process group instead of TPU chips.
"""

from __future__ import annotations

import importlib
import os
import sys
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from corral import train
from corral.train import TrainError
from corral.train.env import cuda_index, on_tpu

torch = pytest.importorskip("torch")
dist = torch.distributed
fake_pg = pytest.importorskip("torch.testing._internal.distributed.fake_pg")

TASK = {
    "RANK": "1",
    "WORLD_SIZE": "2",
    "LOCAL_RANK": "0",
    "LOCAL_WORLD_SIZE": "1",
    "MASTER_ADDR": "10.0.0.1",
    "MASTER_PORT": "29500",
}


class FakeTorchXla:
    """What init_distributed uses of torch_xla; records the rendezvous it answered."""

    def __init__(self) -> None:
        self.rendezvous: list[str] = []
        self.modules: dict[str, ModuleType] = {}
        for name in (
            "torch_xla",
            "torch_xla.core",
            "torch_xla.core.xla_model",
            "torch_xla.distributed",
            "torch_xla.distributed.xla_backend",
        ):
            self.modules[name] = ModuleType(name)
        self.modules["torch_xla.core.xla_model"].xla_device = lambda: "xla:0"  # type: ignore[attr-defined]
        self.register()

    def register(self) -> None:
        """Importing torch_xla.distributed.xla_backend registers these (once per process)."""
        from torch._C._distributed_c10d import FakeProcessGroup

        rendezvous = importlib.import_module("torch.distributed.rendezvous")
        handlers = rendezvous._rendezvous_handlers
        handlers.pop("xla", None)
        rendezvous.register_rendezvous_handler("xla", self.handler)
        if not hasattr(dist.Backend, "XLA"):

            def create(store: Any, rank: int, size: int, timeout: Any) -> Any:
                make = getattr(FakeProcessGroup, "_create_internal", FakeProcessGroup)
                return make(rank, size)

            dist.Backend.register_backend("xla", create, devices=["cpu"])

    def handler(self, url: str, **kwargs: Any) -> Any:
        # PJRT knows the slice's hosts; here the task environment plays that part.
        self.rendezvous.append(url)
        yield fake_pg.FakeStore(), int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])


def _unset_restoring(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Unset ``name`` and have it restored at teardown even if it was unset before and the
    code under test sets it (``delenv`` alone records nothing for an absent variable)."""
    monkeypatch.setenv(name, "")
    monkeypatch.delenv(name)


@pytest.fixture
def torch_xla(monkeypatch: pytest.MonkeyPatch) -> FakeTorchXla:
    fake = FakeTorchXla()
    for name, module in fake.modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    _unset_restoring(monkeypatch, "PJRT_DEVICE")
    for name, value in TASK.items():
        monkeypatch.setenv(name, value)
    return fake


@pytest.mark.parametrize(
    "marker",
    [{"TPU_WORKER_ID": "1"}, {"TPU_ACCELERATOR_TYPE": "v5p-16"}, {"PJRT_DEVICE": "TPU"}],
    ids=["TPU_WORKER_ID", "TPU_ACCELERATOR_TYPE", "PJRT_DEVICE"],
)
def test_a_tpu_task_joins_the_xla_process_group_through_pjrt(
    torch_xla: FakeTorchXla, monkeypatch: pytest.MonkeyPatch, marker: dict[str, str]
) -> None:
    for name, value in marker.items():
        monkeypatch.setenv(name, value)
    info = train.init_distributed()
    assert (info.rank, info.world_size, info.backend, info.device) == (1, 2, "xla", "xla:0")
    assert torch_xla.rendezvous and torch_xla.rendezvous[0].startswith("xla://")
    assert dist.get_backend() == "xla"
    assert os.environ["PJRT_DEVICE"] == "TPU"
    assert train.init_distributed() is info  # idempotent: no second process group
    assert len(torch_xla.rendezvous) == 1
    train.shutdown()
    assert not dist.is_initialized() and train.current() is None


def test_off_tpu_the_xla_backend_is_only_used_when_asked(
    torch_xla: FakeTorchXla, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert not on_tpu()
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("RANK", "0")
    info = train.init_distributed("xla")
    assert (info.backend, info.device) == (None, "xla:0")  # one process: no group
    assert torch_xla.rendezvous == []


def test_missing_torch_xla_on_a_tpu_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch_xla", None)  # import fails as if not installed
    _unset_restoring(monkeypatch, "PJRT_DEVICE")
    with pytest.raises(TrainError, match=r"torch_xla is not installed \(pip install"):
        train.init_distributed(env={**TASK, "TPU_WORKER_ID": "0"})
    assert train.current() is None


def test_a_tpu_task_missing_a_variable_is_named(torch_xla: FakeTorchXla) -> None:
    env = {k: v for k, v in TASK.items() if k != "MASTER_PORT"} | {"TPU_WORKER_ID": "1"}
    with pytest.raises(TrainError, match="MASTER_PORT is not set"):
        train.init_distributed(env=env)
    assert torch_xla.rendezvous == []


@pytest.mark.parametrize(
    ("visible", "local_rank", "local_world", "expected"),
    [
        (1, 3, 4, 0),  # Corral: CUDA_VISIBLE_DEVICES shows the task only its own GPU
        (4, 3, 4, 3),  # torchrun: every task sees the node's GPUs, picks LOCAL_RANK
        (8, 1, 2, 1),
        (2, 3, 4, 0),  # fewer GPUs than tasks: device 0
    ],
)
def test_cuda_device_follows_local_rank(
    visible: int, local_rank: int, local_world: int, expected: int
) -> None:
    gpus = SimpleNamespace(cuda=SimpleNamespace(device_count=lambda: visible))
    assert cuda_index(gpus, local_rank, local_world) == expected
