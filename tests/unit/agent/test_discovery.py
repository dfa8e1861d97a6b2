"""Tests for accelerator discovery (pure parsing/grouping, and NVML absence on this host)."""

from __future__ import annotations

import ctypes.util
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace

import pynvml
import pytest

from corral.agent.discovery import (
    GB,
    GIB,
    DiscoveredGpu,
    _nvml_domains,
    discover,
    discover_nvml,
    group_nvlink_domains,
    host_cpus,
    host_memory_bytes,
    mig_profile_name,
    normalize_model_name,
    nvml_available,
    parse_simulate_spec,
)


@pytest.mark.parametrize(
    ("spec", "count", "model", "memory_gb"),
    [
        ("8xH100", 8, "H100", 80),
        ("1xH200", 1, "H200", 141),
        ("4xA100", 4, "A100", 80),
        ("4xA100-40GB", 4, "A100-40GB", 40),
        ("4xA100:40GB", 4, "A100", 40),
        ("2xV100", 2, "V100", 32),
        ("2xL4", 2, "L4", 24),
        ("2xL40S", 2, "L40S", 48),
        ("2xA10", 2, "A10", 24),
        ("2xT4", 2, "T4", 16),
        ("8xB200", 8, "B200", 192),
        ("8xMI300X", 8, "MI300X", 192),
        ("8xH100-SXM-80GB", 8, "H100-SXM-80GB", 80),
        ("2xh100", 2, "h100", 80),
        ("3xFooChip", 3, "FooChip", 80),
        ("3xFooChip-24GB", 3, "FooChip-24GB", 24),
        ("2xH100:94", 2, "H100", 94),
        ("2xH100:94G", 2, "H100", 94),
        (" 16xH100 ", 16, "H100", 80),
    ],
)
def test_parse_simulate_spec(spec: str, count: int, model: str, memory_gb: int) -> None:
    gpus = parse_simulate_spec(spec)
    assert [g.index for g in gpus] == list(range(count))
    assert all(g.model == model for g in gpus)
    assert all(g.memory_bytes == memory_gb * GB for g in gpus)
    assert all(g.uuid is None for g in gpus)
    assert all(g.nvlink_domain == 0 for g in gpus)


@pytest.mark.parametrize(
    ("spec", "domains"),
    [
        ("8xH100/4", [0, 0, 0, 0, 1, 1, 1, 1]),
        ("8xH100/8", [0] * 8),
        ("4xA100:40GB/1", [0, 1, 2, 3]),
        ("6xH100/2", [0, 0, 1, 1, 2, 2]),
    ],
)
def test_parse_simulate_spec_nvlink_groups(spec: str, domains: list[int]) -> None:
    assert [g.nvlink_domain for g in parse_simulate_spec(spec)] == domains


def test_parse_simulate_spec_binary_memory_unit() -> None:
    assert parse_simulate_spec("1xH100:80GiB")[0].memory_bytes == 80 * GIB == 85_899_345_920
    assert parse_simulate_spec("1xH100:80gib")[0].memory_bytes == 80 * GIB


def test_parse_simulate_spec_full_record() -> None:
    assert parse_simulate_spec("2xA100:40GB/1") == [
        DiscoveredGpu(index=0, model="A100", memory_bytes=40 * GB, uuid=None, nvlink_domain=0),
        DiscoveredGpu(index=1, model="A100", memory_bytes=40 * GB, uuid=None, nvlink_domain=1),
    ]


@pytest.mark.parametrize(
    "spec",
    [
        "",
        "x",
        "0xH100",
        "8H100",
        "-1xA",
        "8x",
        "xH100",
        "8xH100/3",
        "8xH100/0",
        "8xH100/",
        "4xA100:",
        "4xA100:0GB",
        "4xA100:40MB",
        "4xA100:40 GB",
        "4xA100:-40GB",
        "8xH100 extra",
        "8 x H100",
    ],
)
def test_parse_simulate_spec_rejects(spec: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_simulate_spec(spec)
    message = str(info.value)
    assert repr(spec) in message
    assert "COUNTxMODEL[:MEMORY][/NVLINK_GROUP]" in message
    assert "8xH100" in message


@pytest.mark.parametrize(
    ("name", "model"),
    [
        ("NVIDIA H100 80GB HBM3", "H100-80GB-HBM3"),
        ("NVIDIA A100-SXM4-80GB", "A100-SXM4-80GB"),
        ("NVIDIA H200", "H200"),
        ("Tesla V100-SXM2-32GB", "Tesla-V100-SXM2-32GB"),
        ("NVIDIA  L40S ", "L40S"),
        ("Tesla T4", "Tesla-T4"),
        ("NVIDIA", "NVIDIA"),
        ("H100", "H100"),
    ],
)
def test_normalize_model_name(name: str, model: str) -> None:
    assert normalize_model_name(name) == model


def _links(*pairs: tuple[int, int]) -> Callable[[int, int], bool]:
    edges = {frozenset(p) for p in pairs}

    def linked(a: int, b: int) -> bool:
        assert a < b
        return frozenset((a, b)) in edges

    return linked


@pytest.mark.parametrize(
    ("n", "pairs", "domains"),
    [
        (0, [], []),
        (1, [], [0]),
        (4, [], [0, 1, 2, 3]),
        (4, [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)], [0, 0, 0, 0]),
        (
            8,
            [(a, b) for a in range(4) for b in range(a + 1, 4)]
            + [(a, b) for a in range(4, 8) for b in range(a + 1, 8)],
            [0] * 4 + [1] * 4,
        ),
        # a chain is one connected component
        (4, [(0, 1), (1, 2), (2, 3)], [0, 0, 0, 0]),
        # interleaved pairs: ids follow each component's lowest index
        (4, [(0, 2), (1, 3)], [0, 1, 0, 1]),
        (5, [(1, 4), (2, 3)], [0, 1, 2, 2, 1]),
        # linking components through a higher index merges them under the lowest
        (5, [(3, 4), (1, 4), (0, 3)], [0, 0, 1, 0, 0]),
    ],
)
def test_group_nvlink_domains(n: int, pairs: list[tuple[int, int]], domains: list[int]) -> None:
    assert group_nvlink_domains(n, _links(*pairs)) == domains


def test_group_nvlink_domains_skips_known_connected_pairs() -> None:
    asked: list[tuple[int, int]] = []

    def linked(a: int, b: int) -> bool:
        asked.append((a, b))
        return True

    assert group_nvlink_domains(4, linked) == [0, 0, 0, 0]
    assert len(asked) == len(set(asked)) == 3


def _fake_p2p_nvml(p2p: Callable[[int, int], int]) -> SimpleNamespace:
    """The real pynvml module's constants and errors, with a scripted P2P status query."""
    return SimpleNamespace(
        NVMLError=pynvml.NVMLError,
        NVMLError_NotSupported=pynvml.NVMLError_NotSupported,
        NVMLError_FunctionNotFound=pynvml.NVMLError_FunctionNotFound,
        NVML_P2P_CAPS_INDEX_NVLINK=pynvml.NVML_P2P_CAPS_INDEX_NVLINK,
        NVML_P2P_STATUS_OK=pynvml.NVML_P2P_STATUS_OK,
        nvmlDeviceGetP2PStatus=lambda a, b, index: (
            p2p(a, b) if index == pynvml.NVML_P2P_CAPS_INDEX_NVLINK else 99
        ),
    )


def test_nvml_domains_from_p2p_status() -> None:
    def p2p(a: int, b: int) -> int:
        if (a, b) == (2, 3):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)  # a failing pair: not linked
        return (
            pynvml.NVML_P2P_STATUS_OK if a // 2 == b // 2 else pynvml.NVML_P2P_STATUS_NOT_SUPPORTED
        )

    assert _nvml_domains(_fake_p2p_nvml(p2p), [0, 1, 2, 3]) == [0, 0, 1, 2]  # type: ignore[arg-type]


def test_nvml_domains_unsupported_query_gives_singletons() -> None:
    def p2p(a: int, b: int) -> int:
        raise pynvml.NVMLError_NotSupported()

    assert _nvml_domains(_fake_p2p_nvml(p2p), [0, 1, 2]) == [0, 1, 2]  # type: ignore[arg-type]


def test_nvml_available_returns_bool() -> None:
    assert isinstance(nvml_available(), bool)


@pytest.mark.skipif(
    ctypes.util.find_library("nvidia-ml") is not None, reason="an NVIDIA driver is installed"
)
def test_no_driver_means_no_gpus() -> None:
    # Probing a host without a driver must say so without raising.
    assert nvml_available() is False
    assert discover(None) == []
    assert discover("") == []
    with pytest.raises(RuntimeError, match="NVML is not usable"):
        discover_nvml()


def test_discover_simulated() -> None:
    assert discover("2xL4") == parse_simulate_spec("2xL4")
    with pytest.raises(ValueError):
        discover("2L4")


def test_host_resources() -> None:
    assert host_cpus() == (os.cpu_count() or 1)
    assert host_cpus() >= 1
    assert host_memory_bytes() > 64 * 1024 * 1024


# --- MIG instances through NVML (a scripted pynvml module) ---------------------------------


@dataclass
class FakeMig:
    """One MIG device: its UUID, the name NVML gives it, and its attributes."""

    uuid: str
    name: str = "NVIDIA A100-SXM4-80GB"
    slices: int = 0  # GPU-instance slices
    compute: int = 0  # compute-instance slices
    memory_mb: int = 0
    uuid_error: type[Exception] | None = None


@dataclass
class FakeGpu:
    uuid: str
    name: str = "NVIDIA A100-SXM4-80GB"
    mig_mode: int | type[Exception] = 0  # current mode, or what nvmlDeviceGetMigMode raises
    slots: list[FakeMig | None] = field(default_factory=list)  # None: no MIG device there
    slots_error: type[Exception] | None = None  # raised by nvmlDeviceGetMaxMigDeviceCount
    profiles: dict[int, tuple[int, int, str]] = field(default_factory=dict)  # id: slices, MiB, name


A100_PROFILES = {  # an A100 80GB: NVML_GPU_INSTANCE_PROFILE_* id: slices, MiB, name
    0: (1, 9856, "MIG 1g.10gb"),
    1: (2, 19968, "MIG 2g.20gb"),
    2: (3, 40192, "MIG 3g.40gb"),
    3: (4, 40192, "MIG 4g.40gb"),
    4: (7, 80384, "MIG 7g.80gb"),
    7: (1, 9856, "MIG 1g.10gb+me"),
    9: (1, 19968, "MIG 1g.20gb"),
}


def fake_nvml(*gpus: FakeGpu) -> SimpleNamespace:
    """A pynvml module for ``gpus`` (handles are ``("gpu", i)`` and ``("mig", i, slot)``),
    with the real module's errors and constants, and a log of the MIG calls made."""
    calls: list[str] = []

    def gpu(handle: tuple) -> FakeGpu:
        assert handle[0] == "gpu", f"not a GPU handle: {handle}"
        return gpus[handle[1]]

    def mig(handle: tuple) -> FakeMig:
        assert handle[0] == "mig", f"not a MIG handle: {handle}"
        found = gpus[handle[1]].slots[handle[2]]
        assert found is not None
        return found

    def mig_mode(handle: tuple) -> list[int]:
        calls.append("mig_mode")
        mode = gpu(handle).mig_mode
        if isinstance(mode, type):
            raise mode()
        return [mode, mode]

    def max_mig(handle: tuple) -> int:
        calls.append("max_mig")
        if gpu(handle).slots_error:
            raise gpu(handle).slots_error()  # type: ignore[misc]
        return len(gpu(handle).slots)

    def mig_handle(handle: tuple, slot: int) -> tuple:
        if gpu(handle).slots[slot] is None:
            raise pynvml.NVMLError_NotFound()
        return ("mig", handle[1], slot)

    def uuid(handle: tuple) -> str:
        if handle[0] == "gpu":
            return gpu(handle).uuid
        if mig(handle).uuid_error:
            raise mig(handle).uuid_error()  # type: ignore[misc]
        return mig(handle).uuid

    def name(handle: tuple) -> str:
        return gpu(handle).name if handle[0] == "gpu" else mig(handle).name

    def attributes(handle: tuple) -> SimpleNamespace:
        found = mig(handle)
        return SimpleNamespace(
            gpuInstanceSliceCount=found.slices,
            computeInstanceSliceCount=found.compute,
            memorySizeMB=found.memory_mb,
        )

    def profile_info(handle: tuple, profile: int) -> SimpleNamespace:
        if profile not in gpu(handle).profiles:
            raise pynvml.NVMLError_NotSupported()
        slices, memory_mb, text = gpu(handle).profiles[profile]
        return SimpleNamespace(
            id=profile, sliceCount=slices, memorySizeMB=memory_mb, name=text.encode()
        )

    module = SimpleNamespace(
        **{n: getattr(pynvml, n) for n in dir(pynvml) if n.startswith(("NVMLError", "NVML_"))},
        calls=calls,
        nvmlInit=lambda: None,
        nvmlShutdown=lambda: None,
        nvmlDeviceGetCount=lambda: len(gpus),
        nvmlDeviceGetHandleByIndex=lambda i: ("gpu", i),
        nvmlDeviceGetName=name,
        nvmlDeviceGetMemoryInfo=lambda h: SimpleNamespace(total=80 * GB),
        nvmlDeviceGetUUID=uuid,
        nvmlDeviceGetP2PStatus=lambda a, b, index: pynvml.NVML_P2P_STATUS_OK,
        nvmlDeviceGetMigMode=mig_mode,
        nvmlDeviceGetMaxMigDeviceCount=max_mig,
        nvmlDeviceGetMigDeviceHandleByIndex=mig_handle,
        nvmlDeviceGetAttributes=attributes,
        nvmlDeviceGetGpuInstanceProfileInfo=profile_info,
    )
    return module


@pytest.fixture
def use_nvml(monkeypatch: pytest.MonkeyPatch) -> Callable[..., SimpleNamespace]:
    def install(*gpus: FakeGpu) -> SimpleNamespace:
        module = fake_nvml(*gpus)
        monkeypatch.setitem(sys.modules, "pynvml", module)
        return module

    return install


ENABLED = pynvml.NVML_DEVICE_MIG_ENABLE


def mig_layout(gpus: list[DiscoveredGpu]) -> list[tuple[int, tuple[str, ...], tuple[str, ...]]]:
    return [(g.index, g.mig, g.mig_uuids) for g in gpus]


def test_nvml_gpus_without_mig(use_nvml: Callable[..., SimpleNamespace]) -> None:
    nvml = use_nvml(FakeGpu("GPU-a"), FakeGpu("GPU-b", mig_mode=0))
    gpus = discover_nvml()
    assert [(g.uuid, g.model) for g in gpus] == [
        ("GPU-a", "A100-SXM4-80GB"),
        ("GPU-b", "A100-SXM4-80GB"),
    ]
    assert mig_layout(gpus) == [(0, (), ()), (1, (), ())]
    assert "max_mig" not in nvml.calls  # MIG disabled: no instance is looked for


def test_nvml_mig_instances_of_two_profiles(use_nvml: Callable[..., SimpleNamespace]) -> None:
    use_nvml(
        FakeGpu(
            "GPU-a",
            mig_mode=ENABLED,
            slots=[
                FakeMig("MIG-1", name="NVIDIA A100-SXM4-80GB MIG 3g.40gb"),
                None,  # an empty MIG device slot is skipped
                FakeMig("MIG-2", name="MIG 2g.20gb"),
                FakeMig("MIG-3", name="NVIDIA A100-SXM4-80GB MIG 2g.20gb"),
            ],
        ),
        FakeGpu("GPU-b"),
    )
    gpus = discover_nvml()
    assert mig_layout(gpus) == [
        (0, ("3g.40gb", "2g.20gb", "2g.20gb"), ("MIG-1", "MIG-2", "MIG-3")),
        (1, (), ()),
    ]
    assert [g.uuid for g in gpus] == ["GPU-a", "GPU-b"]


@pytest.mark.parametrize(
    "error", [pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound]
)
def test_nvml_mig_query_not_supported_means_a_plain_gpu(
    use_nvml: Callable[..., SimpleNamespace], error: type[Exception]
) -> None:
    nvml = use_nvml(FakeGpu("GPU-v100", name="Tesla V100-SXM2-32GB", mig_mode=error))
    (gpu,) = discover_nvml()
    assert (gpu.index, gpu.model, gpu.uuid, gpu.mig, gpu.mig_uuids) == (
        0,
        "Tesla-V100-SXM2-32GB",
        "GPU-v100",
        (),
        (),
    )
    assert nvml.calls == ["mig_mode"]


def test_nvml_mig_mode_failure_is_a_query_failure(
    use_nvml: Callable[..., SimpleNamespace],
) -> None:
    use_nvml(FakeGpu("GPU-a", mig_mode=pynvml.NVMLError_GpuIsLost))
    with pytest.raises(RuntimeError, match="NVML device query failed"):
        discover_nvml()


def test_nvml_unreadable_mig_instances_are_left_out(
    use_nvml: Callable[..., SimpleNamespace],
) -> None:
    use_nvml(
        FakeGpu(
            "GPU-a",
            mig_mode=ENABLED,
            slots=[
                FakeMig("MIG-1", name="MIG 1g.10gb", uuid_error=pynvml.NVMLError_NotSupported),
                FakeMig("MIG-2", name="MIG 1g.10gb"),
                FakeMig("MIG-3", name="NVIDIA A100-SXM4-80GB"),  # no profile to be found
            ],
        ),
        # in MIG mode, but no instance can be listed (or none exists): CUDA cannot use it
        # whole and there is nothing to hand out, so the GPU is left out
        FakeGpu("GPU-b", mig_mode=ENABLED, slots_error=pynvml.NVMLError_NotSupported),
        FakeGpu("GPU-c", mig_mode=ENABLED, slots=[None, None]),
        FakeGpu("GPU-d"),
    )
    gpus = discover_nvml()
    assert mig_layout(gpus) == [(0, ("1g.10gb",), ("MIG-2",)), (3, (), ())]
    assert [g.uuid for g in gpus] == ["GPU-a", "GPU-d"]


@pytest.mark.parametrize(
    ("mig", "profile"),
    [
        pytest.param(FakeMig("m", slices=3, compute=3, memory_mb=40192), "3g.40gb", id="3g"),
        pytest.param(FakeMig("m", slices=7, compute=7, memory_mb=80384), "7g.80gb", id="7g"),
        pytest.param(FakeMig("m", slices=1, compute=1, memory_mb=9856), "1g.10gb", id="not-me"),
        pytest.param(FakeMig("m", slices=1, compute=1, memory_mb=19968), "1g.20gb", id="1g.20"),
        pytest.param(
            FakeMig("m", slices=3, compute=1, memory_mb=40192), "1c.3g.40gb", id="compute-third"
        ),
    ],
)
def test_nvml_mig_profile_from_attributes_and_profile_info(
    use_nvml: Callable[..., SimpleNamespace], mig: FakeMig, profile: str
) -> None:
    # the MIG device's name does not say: its slices and memory pick the GPU-instance
    # profile of the same slices whose memory is nearest
    use_nvml(FakeGpu("GPU-a", mig_mode=ENABLED, slots=[mig], profiles=A100_PROFILES))
    (gpu,) = discover_nvml()
    assert gpu.mig == (profile,)


def test_nvml_mig_profile_from_memory_alone(use_nvml: Callable[..., SimpleNamespace]) -> None:
    # no profile information either: <slices>g.<memory in GiB, rounded up>gb
    use_nvml(
        FakeGpu(
            "GPU-h200",
            mig_mode=ENABLED,
            slots=[
                FakeMig("MIG-1", slices=7, compute=7, memory_mb=144384),
                FakeMig("MIG-2", slices=1, compute=1, memory_mb=18432),
                FakeMig("MIG-3", slices=0, compute=0, memory_mb=0),  # says nothing: left out
            ],
        )
    )
    (gpu,) = discover_nvml()
    assert (gpu.mig, gpu.mig_uuids) == (("7g.141gb", "1g.18gb"), ("MIG-1", "MIG-2"))


@pytest.mark.parametrize(
    ("name", "profile"),
    [
        ("NVIDIA A100-SXM4-80GB MIG 3g.40gb", "3g.40gb"),
        ("MIG 3g.40gb", "3g.40gb"),
        ("MIG 1g.10gb+me", "1g.10gb"),
        ("MIG 1c.3g.40gb", "1c.3g.40gb"),
        ("MIG 3c.3g.40gb", "3g.40gb"),
        ("NVIDIA H200 MIG 7G.141GB", "7g.141gb"),
        ("NVIDIA A100-SXM4-80GB", None),
        ("NVIDIA H100 80GB HBM3", None),
        ("", None),
    ],
)
def test_mig_profile_name(name: str, profile: str | None) -> None:
    assert mig_profile_name(name) == profile
