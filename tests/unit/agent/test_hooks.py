"""The node hook runner (``corral.agent.hooks``): real scripts, real process groups."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from corral.agent.hooks import EPILOG, PROLOG, hook_env, last_line, run_hook
from tests.unit.agent.test_supervisor import pid_alive, read_pids, wait_for

pytestmark = [pytest.mark.timeout(60)]


def script(tmp_path: Path, body: str, name: str = "hook", mode: int = 0o755) -> Path:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(mode)
    return path


def test_a_hook_that_exits_0_passes_with_its_output_and_environment(tmp_path: Path) -> None:
    hook = script(tmp_path, 'echo "job $CORRAL_JOB_ID in $(pwd)"\necho warning >&2\n')
    result = run_hook(PROLOG, hook, {"CORRAL_JOB_ID": "7", "PATH": os.defpath}, timeout=10)
    assert result.ok and result.reason is None and result.exit_code == 0
    assert result.output == "job 7 in /\nwarning\n"  # stdout and stderr together, in /


def test_a_failing_hook_is_reported_with_its_last_output_line(tmp_path: Path) -> None:
    hook = script(tmp_path, "echo checking GPUs\necho 'GPU 3 ECC errors' >&2\necho\nexit 1\n")
    result = run_hook(PROLOG, hook, {}, timeout=10)
    assert not result.ok and result.exit_code == 1
    assert result.reason == "prolog failed (exit 1): GPU 3 ECC errors"
    silent = run_hook(EPILOG, script(tmp_path, "exit 4\n", "quiet"), {}, timeout=10)
    assert silent.reason == "epilog failed (exit 4)" and silent.output == ""
    killed = run_hook(EPILOG, script(tmp_path, "kill -9 $$\n", "killed"), {}, timeout=10)
    assert killed.reason == "epilog failed (killed by signal 9)" and killed.exit_code == 137


def test_a_hook_past_its_time_limit_is_killed_with_its_children(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    hook = script(
        tmp_path, f"echo still scrubbing\nsleep 300 &\necho $! > {pids}\nsleep 300\necho never\n"
    )
    started = time.monotonic()
    result = run_hook(PROLOG, hook, {"PATH": os.defpath}, timeout=0.5)
    assert time.monotonic() - started < 5
    assert not result.ok and result.exit_code is None
    assert result.reason == "prolog timed out after 0.5s: still scrubbing"
    (child,) = read_pids(pids, 1)
    wait_for(lambda: not pid_alive(child), what="the hook's child to be killed")


def test_what_a_hook_leaves_in_its_group_is_killed_when_it_ends(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    hook = script(tmp_path, f"sleep 300 >/dev/null 2>&1 &\necho $! > {pids}\n")
    result = run_hook(EPILOG, hook, {"PATH": os.defpath}, timeout=10)
    assert result.ok
    (child,) = read_pids(pids, 1)
    wait_for(lambda: not pid_alive(child), what="the hook's leftover to be killed")


def test_a_hook_that_cannot_run_fails_with_why(tmp_path: Path) -> None:
    plain = script(tmp_path, "exit 0\n", "plain", mode=0o644)
    result = run_hook(PROLOG, plain, {}, timeout=10)
    assert not result.ok and result.exit_code is None
    assert result.reason == f"prolog {plain} cannot run: Permission denied"
    missing = run_hook(EPILOG, tmp_path / "nope", {}, timeout=10)
    assert missing.reason == f"epilog {tmp_path / 'nope'} cannot run: No such file or directory"


def test_a_cancelled_hook_is_killed_at_once(tmp_path: Path) -> None:
    cancel = threading.Event()
    threading.Timer(0.2, cancel.set).start()
    started = time.monotonic()
    result = run_hook(PROLOG, script(tmp_path, "sleep 300\n"), {"PATH": os.defpath}, 60, cancel)
    assert time.monotonic() - started < 5
    assert result.reason == "prolog interrupted: the agent is stopping"


def test_last_line_skips_blank_lines_and_shortens_long_ones() -> None:
    assert last_line("a\nb  \n\n  \n") == "b"
    assert last_line("") == ""
    long = last_line("x" * 1000)
    assert len(long) == 300 and long.endswith("...")


def test_a_hook_sees_the_jobs_variables_from_the_server_not_the_jobs_env() -> None:
    task_env = {
        "CORRAL_JOB_NAME": "train",
        "CORRAL_NODES": "node-a,node-b,node-a",
        "CORRAL_KIND": "pytorch",
        "CORRAL_JOB_TOKEN": "secret",  # a credential: never a hook's
        "PATH": "/tmp/evil",  # the job's own env: never a hook's
        "SLURM_JOB_USER": "root",
        "LD_PRELOAD": "/tmp/evil.so",
    }
    base = {"PATH": "/usr/bin:/bin", "CORRAL_JOIN_TOKEN": "agent-secret", "SLURM_JOB_ID": "1"}
    env = hook_env(base, PROLOG, 12, 1, "node-b", "root", [3, 1], task_env)
    assert env["PATH"] == "/usr/bin:/bin"
    assert "LD_PRELOAD" not in env and "CORRAL_JOB_TOKEN" not in env
    assert "CORRAL_JOIN_TOKEN" not in env
    assert env["CORRAL_JOB_ID"] == env["SLURM_JOB_ID"] == "12"
    assert env["CORRAL_ATTEMPT"] == "1" and env["CORRAL_NODE"] == env["SLURMD_NODENAME"] == "node-b"
    assert env["CORRAL_JOB_USER"] == env["SLURM_JOB_USER"] == "root"
    assert env["SLURM_JOB_UID"] == "0" and env["SLURM_JOB_GID"] == "0"
    assert env["CORRAL_JOB_GPUS"] == env["SLURM_JOB_GPUS"] == env["CUDA_VISIBLE_DEVICES"] == "1,3"
    assert env["CORRAL_JOB_NAME"] == env["SLURM_JOB_NAME"] == "train"
    assert env["SLURM_JOB_NODELIST"] == "node-a,node-b" and env["CORRAL_KIND"] == "pytorch"
    assert env["CORRAL_HOOK"] == "prolog" and env["SLURM_SCRIPT_CONTEXT"] == "prolog_slurmd"
