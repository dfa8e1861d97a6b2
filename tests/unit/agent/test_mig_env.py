"""MIG instances found through NVML reach the task: the agent registers their UUIDs
(``DeviceIn.mig_uuids``) and the server names them in ``CUDA_VISIBLE_DEVICES``; simulated
and declared instances keep their deterministic names."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pynvml
import pytest

from corral.agent.discovery import GB
from corral.agent.host import describe_host
from corral.schemas.agent import DeviceIn
from corral.server.services.launch import visible_devices
from tests.unit.agent.test_discovery import FakeGpu, FakeMig, fake_nvml

ENABLED = pynvml.NVML_DEVICE_MIG_ENABLE


def test_registered_mig_uuids_reach_cuda_visible_devices(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    nvml = fake_nvml(
        FakeGpu(
            "GPU-a",
            mig_mode=ENABLED,
            slots=[
                FakeMig("MIG-aaaa", name="MIG 3g.40gb"),
                FakeMig("MIG-bbbb", name="MIG 3g.40gb"),
            ],
        ),
        FakeGpu("GPU-b"),
    )
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    described = describe_host(None, {})
    assert [(d.index, d.mig, d.mig_uuids) for d in described.devices] == [
        (0, ["3g.40gb", "3g.40gb"], ["MIG-aaaa", "MIG-bbbb"]),
        (1, [], []),
    ]
    stored = [d.model_dump() for d in described.devices]  # as the server keeps them
    second_instance = SimpleNamespace(node="m0", gpus=[0], mig_slots=[1])
    assert visible_devices(second_instance, stored) == "MIG-bbbb"  # type: ignore[arg-type]
    whole = SimpleNamespace(node="m0", gpus=[1], mig_slots=[])
    assert visible_devices(whole, stored) == "1"  # type: ignore[arg-type]


def test_simulated_mig_devices_keep_deterministic_names() -> None:
    declared = [DeviceIn(index=0, model="A100", memory=80 * GB, mig=["3g.40gb", "3g.40gb"])]
    stored = [d.model_dump() for d in declared]
    task = SimpleNamespace(node="m0", gpus=[0], mig_slots=[1])
    assert visible_devices(task, stored) == "MIG-m0-0-1"  # type: ignore[arg-type]
    assert visible_devices(task) == "MIG-m0-0-1"  # type: ignore[arg-type]


def test_mig_uuids_must_match_the_instances() -> None:
    with pytest.raises(ValueError, match="mig_uuids: 1 UUIDs for 2 MIG instances"):
        DeviceIn(index=0, model="A100", memory=1, mig=["3g.40gb", "3g.40gb"], mig_uuids=["M"])
    assert DeviceIn(index=0, model="A100", memory=1).mig_uuids == []  # older agents
