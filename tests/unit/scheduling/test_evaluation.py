"""The indexed evaluator: candidates kept current from the snapshot's change log."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from corral.core.job import PlacementPolicy, TopologyLevel
from corral.core.node import NodeState
from corral.scheduling.config import SchedulerConfig
from corral.scheduling.evaluation import Candidates, NodeEvaluator
from corral.scheduling.framework import NodeRequest, Profile, ScoredNode
from corral.scheduling.plugins.topology import DOMAIN_KEYS
from corral.scheduling.registry import build_profile
from corral.scheduling.snapshot import Snapshot
from tests.builders import allocation, job, node

PROFILE = build_profile(SchedulerConfig())


def request(gpus: int | float | str = 1) -> NodeRequest:
    return NodeRequest.of(job(1).gpus(gpus).build().spec, PlacementPolicy.BINPACK)


def nodes(count: int = 6) -> list:
    return [
        node(f"n{i}").gpus(8).network("z", f"s{i // 4}", f"l{i // 2}").build() for i in range(count)
    ]


def ranked(candidates: Candidates) -> list[tuple[str, float]]:
    return [(c.node.name, c.score) for c in candidates]


def fresh(snapshot: Snapshot, req: NodeRequest) -> Candidates:
    """What a brand-new evaluator says (the reference for the kept one)."""
    return NodeEvaluator(PROFILE).evaluate(req, snapshot)


def counting_profile(calls: list[str]) -> Profile:
    """The default profile with one score that records the nodes it is run on."""

    class Counting:
        name = "counting"
        weight = 1.0

        def score(self, req: NodeRequest, view: object) -> float:
            calls.append(view.name)  # type: ignore[attr-defined]
            return 0.0

    return replace(build_profile(SchedulerConfig()), scores=(Counting(),))


def test_kept_index_matches_a_fresh_one_after_every_change() -> None:
    rng = random.Random(3)
    cluster = nodes(8)
    snapshot = Snapshot(cluster)
    kept = NodeEvaluator(PROFILE)
    shapes = [request(1), request(4), request(8), request(0.5)]
    held: list = []
    for step in range(200):
        if held and rng.random() < 0.4:
            snapshot.release(held.pop(rng.randrange(len(held))))
        else:
            target = rng.choice(cluster)
            count = rng.choice((1, 2, 4))
            gpus = rng.sample(range(8), count)
            alloc = allocation(step).task(target.name, gpus=gpus).build()
            held.append(alloc)
            snapshot.assume(alloc)
        for shape in rng.sample(shapes, 2):
            got = kept.evaluate(shape, snapshot)
            want = fresh(snapshot, shape)
            assert ranked(got) == ranked(want)
            assert got.rejections == want.rejections
            assert got.resolvable == want.resolvable


def test_only_changed_nodes_are_evaluated_again() -> None:
    calls: list[str] = []
    profile = counting_profile(calls)
    cluster = [node(f"n{i}").gpus(8).labels(id=str(i)).build() for i in range(5)]
    snapshot = Snapshot(cluster)
    evaluator = NodeEvaluator(profile)
    evaluator.evaluate(request(1), snapshot)
    assert sorted(calls) == ["n0", "n1", "n2", "n3", "n4"]
    calls.clear()
    snapshot.assume(allocation(1).task("n3", gpus=[0]).build())
    evaluator.evaluate(request(1), snapshot)
    assert calls == ["n3"]


def test_nodes_alike_but_for_their_name_share_one_plugin_run() -> None:
    calls: list[str] = []
    profile = counting_profile(calls)
    cluster = [node(f"n{i}").gpus(8).build() for i in range(4)]
    cluster.append(node("other").gpus(8).labels(pool="x").build())
    NodeEvaluator(profile).evaluate(request(1), Snapshot(cluster))
    assert len(calls) == 2  # one of n0..n3, and "other" (its labels differ)


@pytest.mark.parametrize(
    ("excluded", "length", "first"),
    [
        pytest.param({}, 6, "n0", id="none-excluded"),
        pytest.param({"n0": 9}, 5, "n1", id="best-excluded"),
        pytest.param({"n0": 9, "n1": 9, "n5": 9}, 3, "n2", id="several"),
    ],
)
def test_excluded_nodes_are_skipped_and_counted_as_reserved(
    excluded: dict[str, int], length: int, first: str
) -> None:
    candidates = NodeEvaluator(PROFILE).evaluate(request(1), Snapshot(nodes()), excluded)
    assert len(candidates) == length
    assert candidates[0].node.name == first
    assert candidates.best(1)[0].name == first
    assert candidates.rejections == ({"reserved for job 9": len(excluded)} if excluded else {})
    assert candidates.resolvable == 6


def test_a_rejected_reserved_node_is_counted_once() -> None:
    cluster = [*nodes(2), node("d").gpus(8).state(NodeState.DRAINING).build()]
    candidates = NodeEvaluator(PROFILE).evaluate(request(1), Snapshot(cluster), {"d": 4})
    assert len(candidates) == 2
    assert candidates.rejections == {"reserved for job 4": 1}
    assert candidates.resolvable == 3


def test_domain_sizes_and_best_in_a_domain() -> None:
    snapshot = Snapshot(nodes())
    snapshot.assume(allocation(1).task("n2", gpus=list(range(8))).build())  # l1 loses n2
    leaf = DOMAIN_KEYS[TopologyLevel.LEAF]
    candidates = NodeEvaluator(PROFILE).evaluate(request(8), snapshot, {"n4": 2})
    assert candidates.domain_sizes(leaf) == {("z", "s0", "l0"): 2, ("z", "s0", "l1"): 1,
                                             ("z", "s1", "l2"): 1}  # fmt: skip
    assert [v.name for v in candidates.best_in(leaf, ("z", "s1", "l2"), 2)] == ["n5"]
    assert [v.name for v in candidates.best_in(leaf, ("z", "s0", "l0"), 5)] == ["n0", "n1"]


def test_a_change_log_that_was_trimmed_makes_the_index_start_over() -> None:
    cluster = nodes(2)
    snapshot = Snapshot(cluster)
    evaluator = NodeEvaluator(PROFILE)
    evaluator.evaluate(request(8), snapshot)
    alloc = allocation(1).task("n0", gpus=list(range(8))).build()
    for _ in range(10_000):  # far past the log's length: old positions fall off
        undo = snapshot.assume(alloc)
        undo()
    snapshot.assume(alloc)
    assert snapshot.changes_since(0) is None
    assert ranked(evaluator.evaluate(request(8), snapshot)) == ranked(fresh(snapshot, request(8)))


def test_candidates_of_a_plain_list_rank_by_score_then_name() -> None:
    views = Snapshot(nodes(3)).views()
    plain = [ScoredNode(views[2], 5.0), ScoredNode(views[0], 1.0), ScoredNode(views[1], 5.0)]
    candidates = Candidates.of(plain)
    assert [c.node.name for c in candidates] == ["n1", "n2", "n0"]
    assert [c.node.name for c in candidates[1:]] == ["n2", "n0"]
    assert candidates[-1].node.name == "n0"
    with pytest.raises(IndexError):
        candidates[3]
