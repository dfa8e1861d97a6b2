"""Which Unix account the agent runs a task as (a root agent, real accounts)."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.agent.agent import Agent, AgentSettings
from corral.agent.host import describe_host
from corral.agent.identity import AccountError

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("useradd") is None, reason="needs root and useradd"
)


@pytest.fixture
def agent(tmp_path: Path) -> Agent:
    settings = AgentSettings(
        servers=["http://127.0.0.1:9"],
        join_token="unused",
        name="accounts-test",
        address="127.0.0.1",
        node=describe_host("1xH100", {}),
        home=tmp_path / "agent",
        checkpoint_root=tmp_path / "checkpoints",
        contain=False,
    )
    return Agent(settings)


@pytest.fixture
def root_alias() -> Iterator[str]:
    """An account that is uid 0 under another name."""
    name = f"crl-toor-{secrets.token_hex(3)}"
    subprocess.run(
        ["useradd", "--non-unique", "--uid", "0", "--no-create-home", name],
        check=True,
        capture_output=True,
    )
    try:
        yield name
    finally:
        # --force: userdel refuses an account whose uid (0) has running processes
        subprocess.run(["userdel", "--force", name], capture_output=True, check=True)


def test_root_runs_as_the_agent_itself(agent: Agent) -> None:
    assert agent._account("root") is None


def test_an_alias_of_root_is_refused(agent: Agent, root_alias: str) -> None:
    with pytest.raises(AccountError, match="uid 0"):
        agent._account(root_alias)


def test_a_missing_account_is_refused(agent: Agent) -> None:
    with pytest.raises(AccountError, match="no Unix account"):
        agent._account(f"crl-ghost-{secrets.token_hex(3)}")
