"""TPU slices in the core: requests, shapes, host alignment, host labels, task variables."""

from __future__ import annotations

import pytest

from corral.core.job import JobSpec
from corral.core.resources import GpuRequest, parse_gpus
from corral.core.tpu import (
    TpuHost,
    TpuRequest,
    accelerator_type,
    aligned_orientations,
    fit_dims,
    host_of,
    misfit,
    parse_tpu,
    slice_env,
    slice_topology,
    worker_order,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("v5p:2x2x4", TpuRequest("v5p", (2, 2, 4)), id="three-axes"),
        pytest.param("v5e:4x4", TpuRequest("v5e", (4, 4)), id="two-axes"),
        pytest.param(" v4 : 2X2X1 ", TpuRequest("v4", (2, 2, 1)), id="spaces-and-capital-x"),
        pytest.param("v6e:8", TpuRequest("v6e", (8,)), id="one-axis"),
    ],
)
def test_parse_tpu(text: str, expected: TpuRequest) -> None:
    assert parse_tpu(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("2x2x4", "GENERATION:SHAPE", id="no-generation"),
        pytest.param(":2x2x4", "GENERATION:SHAPE", id="empty-generation"),
        pytest.param("v5p:", "shape", id="no-shape"),
        pytest.param("v5p:2x2x2x2", "1 to 3 axes", id="four-axes"),
        pytest.param("v5p:2x0x4", "at least 1", id="zero-axis"),
        pytest.param("v5p:2by2", "shape", id="not-a-shape"),
    ],
)
def test_parse_tpu_refuses(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_tpu(text)


@pytest.mark.parametrize(
    ("generation", "chips", "expected"),
    [
        pytest.param("v5p", 16, "v5p-32", id="v5p-counts-tensorcores"),
        pytest.param("v4", 8, "v4-16", id="v4-counts-tensorcores"),
        pytest.param("v6e", 16, "v6e-16", id="v6e-counts-chips"),
        pytest.param("v5e", 8, "v5litepod-8", id="v5e-is-v5litepod"),
        pytest.param("v7x", 4, "v7x-4", id="unknown-generation-counts-chips"),
    ],
)
def test_accelerator_type(generation: str, chips: int, expected: str) -> None:
    assert accelerator_type(generation, chips) == expected


@pytest.mark.parametrize(
    ("shape", "ndim", "expected"),
    [
        pytest.param((2, 2), 3, (2, 2, 1), id="pad-2d-on-3d"),
        pytest.param((2, 2, 1), 2, (2, 2), id="drop-unit-axis"),
        pytest.param((1, 4, 1), 2, (4, 1), id="drop-unit-axes"),
        pytest.param((2, 2, 2), 2, None, id="too-many-real-axes"),
    ],
)
def test_fit_dims(shape: tuple, ndim: int, expected: tuple | None) -> None:
    assert fit_dims(shape, ndim) == expected


# (request shape, pod shape, host block) -> host extents of the aligned axis orders
ORIENTATIONS = [
    pytest.param((2, 2, 4), (4, 4, 8), (2, 2, 1), [(1, 1, 4), (1, 2, 2), (2, 1, 2)], id="2x2x4"),
    pytest.param((2, 2, 2), (4, 4, 8), (2, 2, 1), [(1, 1, 2)], id="cube-one-order"),
    pytest.param((4, 4, 8), (4, 4, 8), (2, 2, 1), [(2, 2, 8)], id="whole-pod"),
    pytest.param((8, 4, 4), (4, 4, 8), (2, 2, 1), [(2, 2, 8)], id="whole-pod-turned"),
    pytest.param((2, 2, 3), (4, 4, 8), (2, 2, 1), [(1, 1, 3)], id="odd-along-z"),
    pytest.param((1, 2, 2), (4, 4, 8), (2, 2, 1), [(1, 1, 1)], id="one-host-turned"),
    pytest.param((3, 2, 2), (4, 4, 8), (2, 2, 2), [], id="never-whole-hosts"),
    pytest.param((2, 2, 16), (4, 4, 8), (2, 2, 1), [], id="longer-than-the-pod"),
    pytest.param((4, 4), (8, 8), (2, 4), [(2, 1)], id="2d-pod"),
    pytest.param((2, 4), (8, 8), (2, 4), [(1, 1)], id="2d-one-host"),
    pytest.param((4, 4, 1), (8, 8), (2, 4), [(2, 1)], id="3d-request-on-2d-pod"),
    pytest.param((4, 4), (4, 4, 4), (2, 2, 1), [(2, 2, 1)], id="2d-on-3d-lies-flat"),
]


@pytest.mark.parametrize(("shape", "pod", "block", "expected"), ORIENTATIONS)
def test_aligned_orientations(shape: tuple, pod: tuple, block: tuple, expected: list) -> None:
    assert aligned_orientations(shape, pod, block) == expected


@pytest.mark.parametrize(
    ("shape", "words"),
    [
        pytest.param((2, 2, 16), "larger than the pod", id="too-big"),
        pytest.param((3, 2, 2), "not a whole number of hosts", id="not-aligned"),
        pytest.param((2, 2, 2, 2), "more axes", id="too-many-axes"),
    ],
)
def test_misfit_says_why(shape: tuple, words: str) -> None:
    assert words in misfit(shape, (4, 4, 8), (2, 2, 2))


def test_host_labels_round_trip_and_inconsistent_labels_are_no_host() -> None:
    host = TpuHost("pod-a", "v5p", (4, 4, 8), (2, 2, 1), (1, 0, 7))
    assert host.grid == (2, 2, 8) and host.hosts == 32
    assert host_of(host.labels()) == host
    assert host_of({**host.labels(), "tpu.corral/host": "2,0,0"}) is None  # off the grid
    assert host_of({**host.labels(), "tpu.corral/host": "0,0"}) is None  # axes differ
    assert host_of({**host.labels(), "tpu.corral/chips-per-host": "3x2x1"}) is None
    labels = host.labels()
    del labels["tpu.corral/pod"]
    assert host_of(labels) is None


def test_host_count_of_a_request_on_a_pod() -> None:
    host = TpuHost("pod-a", "v5p", (4, 4, 8), (2, 2, 1), (0, 0, 0))
    assert host.host_count(TpuRequest("v5p", (2, 2, 4))) == 4
    assert host.host_count(TpuRequest("V5P", (4, 4, 8))) == 32
    assert host.host_count(TpuRequest("v4", (2, 2, 4))) is None  # another generation
    assert host.host_count(TpuRequest("v5p", (3, 3, 1))) is None


def test_worker_order_runs_x_fastest_and_the_topology_is_the_box_as_placed() -> None:
    hosts = [
        TpuHost("p", "v5p", (4, 4, 8), (2, 2, 1), c)
        for c in [(1, 1, 3), (1, 0, 2), (1, 1, 2), (1, 0, 3)]
    ]
    ordered = sorted(hosts, key=lambda h: worker_order(h.coords))
    assert [h.coords for h in ordered] == [(1, 0, 2), (1, 1, 2), (1, 0, 3), (1, 1, 3)]
    assert slice_topology(hosts) == (2, 4, 2)  # a 2x2x4 request turned along y


def test_slice_env() -> None:
    hosts = [(f"h{i}", TpuHost("p", "v5p", (4, 4, 8), (2, 2, 1), (0, 0, i))) for i in range(4)]
    assert slice_env(TpuRequest("v5p", (4, 2, 2)), hosts) == {
        "TPU_WORKER_HOSTNAMES": "h0,h1,h2,h3",
        "TPU_TOPOLOGY": "2x2x4",
        "TPU_ACCELERATOR_TYPE": "v5p-32",
    }
    unknown = [("h0", None)]  # hosts without labels: the requested shape
    assert slice_env(TpuRequest("v5e", (2, 2)), unknown)["TPU_TOPOLOGY"] == "2x2"


def test_job_spec_derives_the_node_request_of_a_tpu_slice() -> None:
    spec = JobSpec(command="x", tpu=parse_tpu("v5p:2x2x4"), nodes=4)
    assert spec.gpus == GpuRequest(tpu="v5p")
    assert spec.total_gpus == 0.0 and spec.gpus_per_task == 0
    with pytest.raises(ValueError, match="exclude each other"):
        JobSpec(command="x", tpu=parse_tpu("v5p:2x2x4"), gpus=parse_gpus(8))
    with pytest.raises(ValueError, match="no TPU slice"):
        JobSpec(command="x", gpus=GpuRequest(tpu="v5p"))
