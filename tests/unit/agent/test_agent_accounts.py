"""Which Unix account the agent runs a task as (a root agent, real accounts)."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.agent.agent import Agent
from corral.agent.identity import AccountError
from tests.unit.agent.helpers import offline_agent

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("useradd") is None, reason="needs root and useradd"
)


@pytest.fixture
def agent(tmp_path: Path) -> Agent:
    return offline_agent(tmp_path, "accounts-test")


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
