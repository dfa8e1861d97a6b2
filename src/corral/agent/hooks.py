"""Node hooks (Slurm's prolog and epilog): an administrator's program run on a node around
each job, as the agent's account (root on real nodes).

:func:`run_hook` runs one hook: in a session and process group of its own, stdin from
``/dev/null``, stdout and stderr together in a temporary file (a hook that leaves a child
holding its output never blocks the agent), with a time limit. At the limit the whole
process group is killed and the run counts as a failure; when the hook ends, whatever it
left in its group is killed too (a daemon a hook means to keep must leave the group:
``setsid``, ``systemd-run``). A hook that cannot be run (missing, not executable, no
interpreter) fails like one that exits non-zero. The reason of a failure quotes the last
line the hook printed: ``prolog failed (exit 1): GPU 3 ECC errors``.

:func:`hook_env` is what a hook sees: the agent's environment without Corral's own
settings and credentials, and the job's variables, built from what the server decided (a
job's own ``env`` cannot set them): ``CORRAL_JOB_ID``, ``CORRAL_ATTEMPT``, ``CORRAL_NODE``,
``CORRAL_JOB_USER``, ``CORRAL_JOB_GPUS``... and the ``SLURM_*`` names that sites' Slurm
prologs read.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from corral.core.hostlist import compress

PROLOG, EPILOG = "prolog", "epilog"
DEFAULT_TIMEOUT = 300.0  # seconds
OUTPUT_TAIL = 64 * 1024  # bytes of a hook's output kept
LAST_LINE = 300  # characters of the last output line quoted in a reason
# the job's variables a hook gets from the task environment as the server set them
# (CORRAL_* values of a task always come from the server, never from the job's env)
JOB_VARIABLES = (
    "CORRAL_JOB_NAME",
    "CORRAL_NODES",
    "CORRAL_KIND",
    "CORRAL_ARRAY_JOB_ID",
    "CORRAL_ARRAY_TASK_ID",
)


@dataclass(frozen=True)
class HookSettings:
    """The node's hooks (None: none) and the time limit of each run (seconds)."""

    prolog: Path | None = None
    epilog: Path | None = None
    timeout: float = DEFAULT_TIMEOUT

    @property
    def enabled(self) -> bool:
        return self.prolog is not None or self.epilog is not None

    def path(self, hook: str) -> Path | None:
        return self.prolog if hook == PROLOG else self.epilog


@dataclass(frozen=True)
class HookResult:
    """How one run of a hook went: ``reason`` is None on success (exit 0), else says why it
    failed, quoting its last output line. ``exit_code`` is None when it did not run to an
    exit of its own (could not start, timed out, interrupted); 128+N when killed by signal
    N. ``output``: the tail of what it printed."""

    hook: str
    exit_code: int | None
    reason: str | None
    output: str
    seconds: float

    @property
    def ok(self) -> bool:
        return self.reason is None


def run_hook(
    hook: str,
    path: Path,
    env: Mapping[str, str],
    timeout: float,
    cancel: threading.Event | None = None,
) -> HookResult:
    """Run ``path`` as ``hook`` (``prolog``/``epilog``) with exactly ``env``, in ``/``;
    kill its process group at ``timeout`` seconds, or when ``cancel`` is set (the agent is
    stopping). Never raises for a hook that fails or cannot run."""
    started = time.monotonic()
    try:  # (the output file too: a full /tmp fails the hook, it does not stop the agent)
        with tempfile.TemporaryFile(prefix=f"corral-{hook}-") as out:
            proc = subprocess.Popen(
                [str(path)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=dict(env),
                cwd="/",
                start_new_session=True,
            )
            ended = _wait(proc.pid, started + timeout, cancel)
            _killpg(proc.pid)  # at the limit the hook, else what it left (its pid: the group)
            code = proc.wait()
            output = _tail(out)
    except OSError as exc:
        why = exc.strerror or str(exc)
        return HookResult(hook, None, f"{hook} {path} cannot run: {why}", "", 0.0)
    seconds = time.monotonic() - started
    last = last_line(output)
    quoted = f": {last}" if last else ""
    if not ended:
        why = "interrupted: the agent is stopping" if cancel and cancel.is_set() else None
        why = why or f"timed out after {timeout:g}s"
        return HookResult(hook, None, f"{hook} {why}{quoted}", output, seconds)
    if code == 0:
        return HookResult(hook, 0, None, output, seconds)
    if code < 0:
        how, code = f"killed by signal {-code}", 128 - code
    else:
        how = f"exit {code}"
    return HookResult(hook, code, f"{hook} failed ({how}){quoted}", output, seconds)


def hook_env(
    base: Mapping[str, str],
    hook: str,
    job_id: int,
    attempt: int,
    node: str,
    user: str | None,
    gpus: Sequence[int],
    task_env: Mapping[str, str],
) -> dict[str, str]:
    """What ``hook`` of one job attempt on ``node`` sees (see the module's docstring).
    ``base``: the agent's environment; ``user``: the job's Unix account (None: the agent's,
    which its tasks then run as); ``gpus``: the indices the job holds on this node;
    ``task_env``: one of its tasks' environments, as the server sent it."""
    env = {k: v for k, v in base.items() if not k.startswith(("CORRAL_", "SLURM_"))}
    account = user or _agent_user()
    devices = ",".join(str(i) for i in sorted(set(gpus)))
    env.update(
        CORRAL_HOOK=hook,
        CORRAL_JOB_ID=str(job_id),
        CORRAL_ATTEMPT=str(attempt),
        CORRAL_NODE=node,
        CORRAL_JOB_USER=account,
        CORRAL_JOB_GPUS=devices,
        CUDA_VISIBLE_DEVICES=devices,
        SLURM_SCRIPT_CONTEXT=f"{hook}_slurmd",
        SLURM_JOB_ID=str(job_id),
        SLURM_JOB_USER=account,
        SLURM_JOB_GPUS=devices,
        SLURMD_NODENAME=node,
    )
    env.update({k: task_env[k] for k in JOB_VARIABLES if k in task_env})
    if env.get("CORRAL_JOB_NAME"):
        env["SLURM_JOB_NAME"] = env["CORRAL_JOB_NAME"]
    names = [n for n in env.get("CORRAL_NODES", "").split(",") if n] or [node]
    try:
        env["SLURM_JOB_NODELIST"] = compress(names, sort=False)
    except ValueError:  # a name a hostlist cannot hold
        env["SLURM_JOB_NODELIST"] = ",".join(dict.fromkeys(names))
    with contextlib.suppress(KeyError):
        entry = pwd.getpwnam(account)
        env.update(SLURM_JOB_UID=str(entry.pw_uid), SLURM_JOB_GID=str(entry.pw_gid))
    return env


def last_line(output: str) -> str:
    """The last non-blank line of ``output``, stripped and shortened for a reason."""
    for line in reversed(output.splitlines()):
        line = line.strip()
        if line:
            return line if len(line) <= LAST_LINE else line[: LAST_LINE - 3] + "..."
    return ""


def _wait(pid: int, deadline: float, cancel: threading.Event | None) -> bool:
    """Wait until ``pid`` (our child) exits, without reaping it (its unreaped pid keeps the
    group id reserved for :func:`_killpg`); False at ``deadline`` or on ``cancel``."""
    pause = 0.005
    while True:
        try:
            info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return True
        if info is not None and info.si_pid == pid:
            return True
        left = deadline - time.monotonic()
        if left <= 0 or (cancel is not None and cancel.is_set()):
            return False
        pause = min(pause * 2, 0.1, left)
        if cancel is not None:
            cancel.wait(pause)
        else:
            time.sleep(pause)


def _killpg(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _tail(out: IO[bytes]) -> str:
    size = out.seek(0, os.SEEK_END)
    out.seek(max(0, size - OUTPUT_TAIL))
    return out.read().decode(errors="replace")


def _agent_user() -> str:
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return str(os.geteuid())
