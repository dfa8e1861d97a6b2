"""How a task process is started: a tiny ``/bin/sh`` shim, held at a gate until the agent
has put it in its cgroup and recorded it, then run as the task's account.

The shim leads its own session and process group. Popen's ``user``/``group``/
``extra_groups`` drop privileges (no ``preexec_fn``: the agent is threaded). The shim gets
the gate pipe as stdin and the exit-status file as stdout (a POSIX shell can only name
descriptors 0-9, and Popen cannot choose the numbers of passed descriptors), moves them to
fds 3 and 4, waits for the gate, enters the working directory as the account, runs the
command with default signal dispositions and writes its exit status (128+N for signal N)
to the status file before exiting with it. SIGTERM (INT, HUP) to the shim itself is caught,
so a stopped task's own exit status is what is reported (and a task's ``kill 0`` does not
end its shim); one that arrives before the command has started means it never starts, and
the shim exits 128+N at once.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path

from corral.agent.identity import Account, account_env
from corral.agent.taskstate import process_children, process_cmdline

GATE_CLOSED_EXIT = 125
WORKDIR_EXIT = 126

SHIM = f"""\
exec 3<&0 4>&1 1>&2 </dev/null
read -r _ <&3 || exit {GATE_CLOSED_EXIT}
exec 3<&-
if ! cd -- "$1" 2>/dev/null; then
  echo "corral: cannot start task: cannot enter working directory $1 as $(id -un)" >&2
  echo {WORKDIR_EXIT} >&4
  exit {WORKDIR_EXIT}
fi
shift
sig=
trap 'sig=${{sig:-143}}' TERM
trap 'sig=${{sig:-130}}' INT
trap 'sig=${{sig:-129}}' HUP
if [ -z "$sig" ]; then
  "$@" 4>&-
  rc=$?
else
  rc=$sig
fi
echo "$rc" >&4
exit "$rc"
"""


@dataclass(frozen=True)
class ShimSpec:
    """What the shim runs: ``account`` is set only when the task switches account."""

    argv: list[str]
    env: dict[str, str]
    workdir: str
    account: Account | None


def prepare(
    command: list[str] | str,
    env: dict[str, str],
    workdir: str | None,
    account: Account | None,
    base_env: dict[str, str],
) -> ShimSpec:
    """Check what can be checked before starting; raises OSError or ValueError like a failed
    exec would (missing command, missing working directory, empty command)."""
    argv = ["/bin/sh", "-c", command] if isinstance(command, str) else list(command)
    if not argv:
        raise ValueError("empty command")
    full_env = {**base_env, **(account_env(account) if account else {}), **env}
    _check_command(argv[0], full_env.get("PATH", os.defpath))
    switch = account is not None and account.uid != os.geteuid()
    if workdir is not None:
        if not os.path.isdir(workdir):
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), workdir)
        where = os.path.abspath(workdir)
    elif switch and account is not None and os.path.isdir(account.home):
        where = account.home
    else:
        where = "/" if switch else os.getcwd()
    return ShimSpec(argv, full_env, where, account if switch else None)


def spawn(spec: ShimSpec, log_path: Path, status_fd: int) -> tuple[subprocess.Popen[bytes], int]:
    """Start the shim held at its gate; returns it and the gate's write end (pass it to
    ``release``). Takes ownership of ``status_fd``. Raises OSError/SubprocessError."""
    gate_read, gate_write = os.pipe()
    try:
        log_fd = open_log(log_path)
        try:
            drop = {}
            if spec.account is not None:
                drop = {
                    "user": spec.account.uid,
                    "group": spec.account.gid,
                    "extra_groups": list(spec.account.groups),
                }
            proc = subprocess.Popen(
                ["/bin/sh", "-c", SHIM, "corral-shim", spec.workdir, *spec.argv],
                env=spec.env,
                stdin=gate_read,
                stdout=status_fd,
                stderr=log_fd,
                close_fds=True,
                start_new_session=True,
                **drop,  # type: ignore[arg-type]
            )
        finally:
            os.close(log_fd)
    except BaseException:
        os.close(gate_write)
        raise
    finally:
        os.close(gate_read)
        os.close(status_fd)
    return proc, gate_write


def release(gate: int) -> None:
    """Let the shim run its command (and close ``gate``)."""
    try:
        os.write(gate, b"go\n")
    except BrokenPipeError:
        pass  # the shim is gone already; its exit is reaped like any other
    finally:
        os.close(gate)


def open_log(path: Path) -> int:
    """Open ``path`` for appending, creating it and its parents. A link there is refused,
    and so is anything but a plain file with one name: the agent may be root and the
    directory the task's."""
    path.parent.mkdir(parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NOCTTY
    try:
        fd = os.open(path, flags | os.O_NONBLOCK, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OSError(errno.ELOOP, "refusing a symbolic link as the log", str(path)) from None
        raise
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
        os.close(fd)
        raise OSError(errno.EPERM, "the log is not a plain file", str(path))
    os.set_blocking(fd, True)
    return fd


def _check_command(name: str, path: str) -> None:
    if name.startswith("/"):
        if not os.path.exists(name):
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), name)
        if os.path.isdir(name) or not os.access(name, os.X_OK):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), name)
    elif "/" not in name and shutil.which(name, path=path) is None:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), name)


def started_commands(shim: int, shim_cmdline: bytes) -> list[int]:
    """The shim's children that have exec'd their command (a fork of the shim not yet
    exec'd still shows the shim's command line)."""
    return [
        pid
        for pid in process_children(shim)
        if (line := process_cmdline(pid)) is not None and line != shim_cmdline
    ]
