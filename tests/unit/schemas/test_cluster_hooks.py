"""Node hooks in the cluster file: ``prolog:``/``epilog:``/``hook_timeout:`` on a node
become its agent's options under ``corral up --cluster``; the agent's own options."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from corral.cli.daemons import _hook_settings
from corral.embedded.cluster import plan_nodes
from corral.errors import ValidationError

CLUSTER = textwrap.dedent(
    """
    nodes:
      - name: gpu-{0..1}
        gpus: {count: 2}
        prolog: hooks/check.sh
        epilog: /etc/corral/epilog
        hook_timeout: 2m
      - name: cpu-0
    """
)


def test_a_nodes_hooks_become_its_agents_options(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(CLUSTER)
    launches = {n.name: n for n in plan_nodes(None, None, None, path, tmp_path / "home", 0)}
    check = str(tmp_path / "hooks" / "check.sh")  # relative: from the cluster file
    expected = ("--prolog", check, "--epilog", "/etc/corral/epilog", "--hook-timeout", "120")
    assert launches["gpu-0"].agent_args == launches["gpu-1"].agent_args == expected
    assert launches["cpu-0"].agent_args == ()


def test_a_bad_hook_timeout_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(CLUSTER.replace("2m", "0"))
    with pytest.raises(ValidationError, match="hook_timeout"):
        plan_nodes(None, None, None, path, tmp_path / "home", 0)
    with pytest.raises(ValidationError, match="--hook-timeout"):
        _hook_settings(None, None, "soon")
    with pytest.raises(ValidationError, match="--hook-timeout: must be positive"):
        _hook_settings(None, None, "0")


def test_the_agents_hooks_are_absolute_and_a_missing_one_is_only_warned_about(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.chdir(tmp_path)
    settings = _hook_settings(Path("prolog.sh"), None, "90s")
    assert settings.prolog == tmp_path / "prolog.sh" and settings.epilog is None
    assert settings.timeout == 90 and settings.enabled
    assert "is not an executable file" in caplog.text
