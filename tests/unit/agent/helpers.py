"""Shared pieces of the agent's tests: the two supervision modes, and an agent that talks
to no server."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from corral.agent.agent import Agent, AgentSettings
from corral.agent.cgroups import CgroupManager, probe_cgroups
from corral.agent.host import describe_host

MODES = ["group", "cgroup"]
"""Fixture params: supervise tasks as process groups, or in cgroups (skipped without)."""


def cgroups_for(mode: str) -> CgroupManager | None:
    """None for "group"; for "cgroup", a manager under a fresh node root (the test is
    skipped where this host has no usable cgroups)."""
    if mode != "cgroup":
        return None
    probe = probe_cgroups(f"t{uuid.uuid4().hex[:10]}")
    if probe.manager is None:
        pytest.skip(probe.line)
    return probe.manager


def offline_agent(tmp_path: Path, name: str) -> Agent:
    """An agent (process groups, one simulated GPU) whose server is never reached: its
    methods are driven by the test."""
    settings = AgentSettings(
        servers=["http://127.0.0.1:9"],
        join_token="unused",
        name=name,
        address="127.0.0.1",
        node=describe_host("1xH100", {}),
        home=tmp_path / "agent",
        checkpoint_root=tmp_path / "checkpoints",
        contain=False,
    )
    return Agent(settings)
