"""What would let a pending job start sooner: relaxed variants that fit now, as sentences."""

from __future__ import annotations

from dataclasses import replace

import pytest

from corral.core.allocation import Allocation
from corral.core.node import Node
from corral.scheduling.advice import MAX_TRIALS, start_sooner
from corral.scheduling.config import SchedulerConfig
from corral.scheduling.registry import build_profile
from corral.scheduling.snapshot import Snapshot
from tests.builders import allocation, gpu_nodes, job, node

NOW = 1000.0
CONFIG = SchedulerConfig()


def holding(job_id: int, node_name: str, gpus: range | list[int], **extra: object) -> Allocation:
    return allocation(job_id).task(node_name, gpus=gpus, **extra).build()  # type: ignore[arg-type]


def leaf(name: str, leaf_name: str) -> Node:
    return node(name).gpus(8).network("z", "s1", leaf_name).build()


# two leaves of two nodes, one node busy in each: two free nodes, but not in one leaf
SPLIT = [leaf("a0", "la"), leaf("a1", "la"), leaf("b0", "lb"), leaf("b1", "lb")]
SPLIT_BUSY = [holding(90, "a1", range(8)), holding(91, "b1", range(8))]
# eight nodes with one free GPU each
ONE_FREE = gpu_nodes(8)
ONE_FREE_BUSY = [holding(90 + i, f"n{i}", range(7)) for i in range(8)]
MIXED_MODELS = [
    node("h0").gpus(8, model="H100").labels(pool="a").build(),
    node("a0").gpus(8, model="A100").labels(pool="a").build(),
    node("h1").gpus(8, model="H100").build(),
]
NVLINK = [node("n0").gpus(8, nvlink=[[0, 1, 2, 3], [4, 5, 6, 7]]).build()]
WAITS = "no single change to its request lets it start now"


@pytest.mark.parametrize(
    ("nodes", "running", "pending", "expected"),
    [
        pytest.param(
            SPLIT,
            SPLIT_BUSY,
            job(1).gpus(8).nodes(2).topology("leaf", "required"),
            [
                "fits now with topology preferred instead of required "
                "(it would run within spine z/s1)"
            ],
            id="topology-preferred-instead-of-required",
        ),
        pytest.param(
            NVLINK,
            [holding(90, "n0", [0, 1, 4])],
            job(1).gpus(4).topology("nvlink", "required"),
            [
                "fits now with topology preferred instead of required "
                "(its GPUs would span NVLink domains)"
            ],
            id="nvlink-preferred-instead-of-required",
        ),
        pytest.param(
            ONE_FREE,
            ONE_FREE_BUSY,
            job(1).gpus(8),
            ["fits now with 8 x 1 GPU (nodes: 8, gpus: 1)"],
            id="one-node-of-8-as-8-nodes-of-1",
        ),
        pytest.param(
            gpu_nodes(2),
            [holding(90, "n0", range(4)), holding(91, "n1", range(4))],
            job(1).gpus(8).tasks(8).cpus(64).memory("400GB"),
            [
                "fits now with 2 x 4 GPUs (nodes: 2, gpus: 4, tasks_per_node: 4, cpus: 32, "
                "memory: 200GB)"
            ],
            id="reshaped-tasks-keep-their-gpus-cpus-and-memory-scale",
        ),
        pytest.param(
            gpu_nodes(3),
            [holding(90, "n0", range(8))],
            job(1).gpus(16),
            ["fits now with 2 x 8 GPUs (nodes: 2, gpus: 8)"],
            id="too-big-for-any-node-spread-over-two",
        ),
        pytest.param(
            [node("n0").gpus(8).labels(pool="a100").build(), node("n1").gpus(8).build()],
            [holding(90, "n0", range(8))],
            job(1).gpus(8).selector(pool="a100"),
            ["fits now without node_selector pool=a100"],
            id="without-node-selector",
        ),
        pytest.param(
            [node("n0").gpus(8).labels(pool="a", rack="r1").build(), node("n1").gpus(8).build()],
            [holding(90, "n0", range(8))],
            job(1).gpus(8).selector(pool="a", rack="r1"),
            ["fits now without node_selector pool=a, rack=r1"],
            id="without-every-label-when-no-single-one-is-enough",
        ),
        pytest.param(
            MIXED_MODELS[:2],
            [holding(90, "h0", range(8))],
            job(1).gpus(8).model("H100*"),
            ["fits now on A100 instead of H100*"],
            id="another-gpu-model",
        ),
        pytest.param(
            MIXED_MODELS,
            [holding(90, "h0", range(8))],
            job(1).gpus(8).model("H100").selector(pool="a"),
            ["fits now without node_selector pool=a", "fits now on A100 instead of H100"],
            id="one-hint-per-change-that-fits",
        ),
        pytest.param(
            gpu_nodes(1),
            [holding(90, "n0", [0], cpus=60)],
            job(1).gpus(1).cpus(64),
            ["fits now with 36 CPUs per node instead of 64"],
            id="fewer-cpus",
        ),
        pytest.param(
            gpu_nodes(1),
            [holding(90, "n0", [0], memory="850GB")],
            job(1).gpus(1).memory("300GB"),
            ["fits now with 150GB memory per node instead of 300GB"],
            id="less-memory",
        ),
        pytest.param(
            gpu_nodes(2),
            [holding(90, "n0", range(8))],
            job(1).gpus(8),
            [
                "as asked it fits the resources free now, but jobs ahead of it come first (see "
                "the reason: the job it waits behind, or its queue's quota)"
            ],
            id="fits-as-asked-but-waits-its-turn",
        ),
        pytest.param(
            gpu_nodes(1),
            [holding(90, "n0", range(8))],
            job(1).gpus(8),
            [
                f"{WAITS}; it starts when running jobs free enough resources (no estimate: the "
                "work it waits for has no runtime_estimate or time_limit, or is too far ahead)"
            ],
            id="nothing-fits-no-estimate",
        ),
        pytest.param(
            gpu_nodes(2),
            [holding(90, "n0", range(8)), holding(91, "n1", range(8))],
            job(1).gpus(8).selector(pool="gone"),
            [f"{WAITS}, and as asked it cannot run on the ready nodes (see the reason)"],
            id="cannot-run-as-asked",
        ),
    ],
)
def test_start_sooner(nodes, running, pending, expected: list[str]) -> None:
    snapshot = Snapshot.build(nodes, running)
    profile = build_profile(CONFIG)
    assert start_sooner(pending.build(), snapshot, profile, CONFIG, NOW) == expected


def test_nothing_fits_says_when_it_is_expected_to_start() -> None:
    snapshot = Snapshot.build(gpu_nodes(1), [holding(90, "n0", range(8))])
    hints = start_sooner(
        job(1).gpus(8).build(), snapshot, build_profile(CONFIG), CONFIG, NOW, NOW + 4800
    )
    assert hints == [
        f"{WAITS}; expected to start in about 1h20m, as running jobs end "
        "(an estimate: it assumes they run for their estimates)"
    ]


@pytest.mark.parametrize(("bound", "trials"), [(MAX_TRIALS, 11), (5, 5)])
def test_trials_assume_nothing_and_are_bounded(
    bound: int, trials: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("corral.scheduling.advice.MAX_TRIALS", bound)
    labels = {k: "1" for k in "abcde"}
    nodes = [
        node(f"n{i}").gpus(8).labels(**labels).network("z", "s1", f"l{i}").build() for i in range(4)
    ]
    snapshot = Snapshot.build(nodes, [holding(90 + i, f"n{i}", range(6)) for i in range(4)])
    before = [(v.name, list(v.used_milli), v.free_cpus, v.free_memory) for v in snapshot.views()]
    # as asked, topology, 1 reshape (4 x 4), 4 labels one by one and all, model, cpus, memory
    pending = job(1).gpus("H100:8").nodes(2).tasks(8).cpus(64).memory("500GB")
    pending = pending.selector(**labels).topology("leaf", "required")
    profile = build_profile(CONFIG)
    inner, calls = profile.node_set, []

    class Counting:
        name = "counting"

        def select(self, job, request, candidates):  # type: ignore[no-untyped-def]
            calls.append(job.spec)
            return inner.select(job, request, candidates)

    hints = start_sooner(
        pending.build(), snapshot, replace(profile, node_set=Counting()), CONFIG, NOW
    )
    assert hints == [
        f"{WAITS}; it starts when running jobs free enough resources (no estimate: the "
        "work it waits for has no runtime_estimate or time_limit, or is too far ahead)"
    ]
    assert len(calls) == trials
    after = [(v.name, list(v.used_milli), v.free_cpus, v.free_memory) for v in snapshot.views()]
    assert after == before
