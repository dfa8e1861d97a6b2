"""Exact resume helpers: RNG states and the data order."""

from __future__ import annotations

import random

import pytest

from corral.train import ResumableSampler, capture_rng, restore_rng


def draws() -> list[float]:
    out = [random.random()]
    numpy = pytest.importorskip("numpy")
    out.append(float(numpy.random.rand()))
    torch = pytest.importorskip("torch")
    out.append(float(torch.rand(1).item()))
    return out


def test_rng_states_come_back() -> None:
    saved = capture_rng()
    first = draws()
    draws()
    restore_rng(saved)
    assert draws() == first


def test_rng_states_survive_a_checkpoint(tmp_path) -> None:
    from corral import train

    random.seed(5)
    train.save({"rng": capture_rng()}, 1, directory=tmp_path)
    expected = draws()
    random.seed(99)
    _, state = train.load_latest(tmp_path)
    restore_rng(state["rng"])
    assert draws() == expected


def test_ranks_split_each_epoch_without_overlap() -> None:
    samplers = [ResumableSampler(10, seed=1, rank=r, world_size=3) for r in range(3)]
    parts = [s.indices(0) for s in samplers]
    assert all(len(p) == 3 for p in parts)
    assert len(set().union(*parts)) == 9  # one sample dropped so ranks stay even
    assert samplers[0].indices(0) != samplers[0].indices(1)  # a new order each epoch
    assert ResumableSampler(4, shuffle=False).indices(3) == [0, 1, 2, 3]


def test_take_crosses_epochs_and_resumes_exactly() -> None:
    straight = ResumableSampler(10, seed=3, rank=1, world_size=2)
    expected = [straight.take(3) for _ in range(6)]
    assert straight.state_dict() == {"epoch": 3, "position": 3, "seed": 3}

    first = ResumableSampler(10, seed=3, rank=1, world_size=2)
    got = [first.take(3) for _ in range(4)]
    resumed = ResumableSampler(10, seed=3, rank=1, world_size=2)
    resumed.load_state_dict(first.state_dict())
    got += [resumed.take(3) for _ in range(2)]
    assert got == expected


def test_iteration_counts_position_and_moves_to_the_next_epoch() -> None:
    sampler = ResumableSampler(6, seed=0)
    it = iter(sampler)
    head = [next(it), next(it)]
    assert sampler.position == 2
    rest = list(it)
    assert head + rest == sampler.indices(0)
    assert (sampler.epoch, sampler.position) == (1, 0)


def test_state_of_another_seed_is_refused() -> None:
    with pytest.raises(ValueError, match="seed"):
        ResumableSampler(6, seed=0).load_state_dict({"epoch": 1, "position": 0, "seed": 1})
