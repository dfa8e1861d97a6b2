from __future__ import annotations

from collections.abc import Iterator

import pytest

from corral import train


@pytest.fixture(autouse=True)
def fresh_runtime(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test starts without a TrainInfo, handlers, or task environment."""
    for name in (
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
        "CORRAL_CHECKPOINT_DIR",
        "CORRAL_SERVER",
        "CORRAL_JOB_ID",
        "CORRAL_JOB_TOKEN",
        "CORRAL_TOKEN",
    ):
        monkeypatch.delenv(name, raising=False)
    train.shutdown()
    train.uninstall_signal_handlers()
    yield
    train.shutdown()
    train.uninstall_signal_handlers()
