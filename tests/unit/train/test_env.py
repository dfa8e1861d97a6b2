"""Parsing the task environment (SPEC section 4 / torchrun) and initialising from it."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from corral import train
from corral.train import DistEnv, TrainError, parse_env

FULL = {
    "RANK": "3",
    "WORLD_SIZE": "4",
    "LOCAL_RANK": "1",
    "LOCAL_WORLD_SIZE": "2",
    "MASTER_ADDR": "10.0.0.1",
    "MASTER_PORT": "29500",
}


def without(*names: str) -> dict[str, str]:
    return {k: v for k, v in FULL.items() if k not in names}


GOOD = {
    "nothing set: a single process": ({}, DistEnv(0, 1, 0, 1, None, None)),
    "corral/torchrun environment": (FULL, DistEnv(3, 4, 1, 2, "10.0.0.1", 29500)),
    "no LOCAL_WORLD_SIZE: world size": (
        without("LOCAL_WORLD_SIZE"),
        DistEnv(3, 4, 1, 4, "10.0.0.1", 29500),
    ),
    "world of one needs no master": (
        {"RANK": "0", "WORLD_SIZE": "1"},
        DistEnv(0, 1, 0, 1, None, None),
    ),
    "empty variables count as unset": (
        {"RANK": "", "WORLD_SIZE": ""},
        DistEnv(0, 1, 0, 1, None, None),
    ),
}

BAD = {
    "no MASTER_PORT": (without("MASTER_PORT"), "MASTER_PORT is not set"),
    "no master at all": (
        without("MASTER_ADDR", "MASTER_PORT"),
        "MASTER_ADDR, MASTER_PORT are not set",
    ),
    "no LOCAL_RANK": (without("LOCAL_RANK"), "LOCAL_RANK is not set"),
    "RANK without WORLD_SIZE": ({"RANK": "0"}, "WORLD_SIZE is not set"),
    "WORLD_SIZE without RANK": ({"WORLD_SIZE": "2"}, "RANK is not set"),
    "rank out of range": ({**FULL, "RANK": "4"}, "RANK=4 is not below WORLD_SIZE=4"),
    "not a number": ({**FULL, "WORLD_SIZE": "four"}, "WORLD_SIZE='four' is not an integer"),
    "zero world": ({**FULL, "WORLD_SIZE": "0"}, "WORLD_SIZE=0 must be at least 1"),
    "port out of range": ({**FULL, "MASTER_PORT": "70000"}, "not a TCP port"),
}


@pytest.mark.parametrize(("env", "expected"), GOOD.values(), ids=GOOD.keys())
def test_parse_env(env: dict[str, str], expected: DistEnv) -> None:
    assert parse_env(env) == expected


@pytest.mark.parametrize(("env", "message"), BAD.values(), ids=BAD.keys())
def test_incomplete_environment_names_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(TrainError, match=message):
        parse_env(env)


def test_single_process_is_idempotent() -> None:
    info = train.init_distributed(env={"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0"})
    assert (info.rank, info.world_size, info.backend) == (0, 1, None)
    assert info.device in ("cpu", "cuda:0")
    assert train.init_distributed(env=FULL) is info  # a second call changes nothing
    assert train.current() is info


def test_incomplete_environment_fails_before_anything_starts() -> None:
    with pytest.raises(TrainError, match="MASTER_ADDR"):
        train.init_distributed(env=without("MASTER_ADDR"))
    assert train.current() is None


class FakeJax:
    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.shutdowns = 0
        self.distributed = SimpleNamespace(initialize=self.initialize, shutdown=self.shutdown)

    def shutdown(self) -> None:
        self.shutdowns += 1

    def initialize(self, **kwargs: Any) -> None:
        self.calls.append(kwargs)


def test_jax_gets_coordinator_processes_and_id() -> None:
    jax = FakeJax()
    info = train.init_jax_distributed(env=FULL, jax_module=jax)
    assert jax.calls == [
        {"coordinator_address": "10.0.0.1:29500", "num_processes": 4, "process_id": 3}
    ]
    assert (info.rank, info.world_size, info.backend) == (3, 4, "jax")
    assert train.init_jax_distributed(env=FULL, jax_module=jax) is info
    assert len(jax.calls) == 1
    train.shutdown()
    assert jax.shutdowns == 1 and train.current() is None


def test_jax_single_process_initialises_nothing() -> None:
    jax = FakeJax()
    train.init_jax_distributed(env={}, jax_module=jax)
    assert jax.calls == []


def test_missing_jax_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real_import = builtins.__import__

    def no_jax(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "jax" or name.startswith("jax."):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_jax)
    monkeypatch.delitem(__import__("sys").modules, "jax", raising=False)
    with pytest.raises(TrainError, match="jax is not installed"):
        train.init_jax_distributed(env=FULL)
