"""Tests for accelerator discovery (pure parsing/grouping, and NVML absence on this host)."""

from __future__ import annotations

import ctypes.util
import os
from collections.abc import Callable
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
