"""Open MPI's rsh agent for ``kind: mpi`` (``plm_rsh_agent``): it runs Open MPI's remote
daemon as a job step on the Corral node, never over ssh.

Open MPI runs it as it would run ssh: ``AGENT [OPTIONS] HOST WORD...``, where the words
form a remote shell command line (``orted -mca ess "env" ...``). ``HOST`` is a hostfile
name the launcher made (``CORRAL_MPI_ALIASES`` maps it to the Corral node; any other name
is taken as a node name). The step runs ``python -m corral.kinds.mpi_node daemon LINE`` on
that node, as the job's user, in the job's containment and environment there.

Under the launcher it asks the launcher's step broker (``CORRAL_MPI_BROKER``, see
``corral.kinds.mpi_steps``) and imports nothing beyond the standard library; on its own
(``mpiexec -launcher-exec`` inside any Corral task) it uses the SDK with the task's job
token. Either way it waits for the step and exits with its exit code, 255 (as ssh) when the
step could not start; SIGTERM, SIGINT and SIGHUP cancel the step. What a failed daemon
printed is copied to stderr, where Open MPI shows it.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import sys
import threading
import time
from collections.abc import Sequence
from types import FrameType

ALIASES_ENV = "CORRAL_MPI_ALIASES"  # JSON {hostfile name: node}
BROKER_ENV = "CORRAL_MPI_BROKER"  # the launcher's step broker (a Unix socket)
SSH_VALUE_OPTIONS = frozenset("BbcDEeFIiJLlmOoPpQRSWw")  # ssh options that take a value
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
CONNECTION_ERROR = 255  # ssh's exit code when it could not run the command
CANCEL_WAIT = 15.0  # seconds past the job's grace period a cancelled step is waited for


def parse_args(argv: Sequence[str]) -> tuple[str, str]:
    """``(host, remote command line)`` from an ssh-style command line: leading options
    (and the values of ssh's options that take one) are skipped; the words after the host
    are joined with spaces, as ssh joins them. ``ValueError`` when there is no host or no
    command."""
    args = list(argv)
    i = 0
    while i < len(args) and args[i].startswith("-") and len(args[i]) > 1:
        option = args[i]
        i += 1
        if option == "--":
            break
        if option[1] in SSH_VALUE_OPTIONS and len(option) == 2:
            i += 1  # its value is the next word
    if i >= len(args):
        raise ValueError("no host given")
    host, words = args[i], args[i + 1 :]
    line = " ".join(words).strip()
    if not line:
        raise ValueError(f"no command given for {host} (an interactive login is not supported)")
    return host, line


def node_of(host: str, aliases_json: str | None) -> str:
    """The Corral node a hostfile name stands for."""
    try:
        aliases = json.loads(aliases_json) if aliases_json else {}
    except ValueError:
        aliases = {}
    found = aliases.get(host) if isinstance(aliases, dict) else None
    return found if isinstance(found, str) else host


class _Signals:
    """Turns SIGTERM, SIGINT and SIGHUP into a flag (a cancel of the step) and a byte on a
    pipe (which wakes a ``select``)."""

    def __init__(self) -> None:
        self.received: int | None = None
        self.wake = threading.Event()
        self.pipe, writer = os.pipe()
        os.set_blocking(writer, False)
        signal.set_wakeup_fd(writer)
        for sig in FORWARDED:
            signal.signal(sig, self._handle)

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        if self.received is None:
            self.received = signum
        self.wake.set()


def main(argv: Sequence[str] | None = None) -> int:
    try:
        host, line = parse_args(sys.argv[1:] if argv is None else argv)
    except ValueError as exc:
        print(f"corral mpi rsh: {exc}", file=sys.stderr)
        return CONNECTION_ERROR
    guard = _Signals()
    node = node_of(host, os.environ.get(ALIASES_ENV))
    broker = os.environ.get(BROKER_ENV)
    if broker:
        return via_broker(broker, node, line, guard)
    return on_its_own(node, line, guard)


def via_broker(path: str, node: str, line: str, guard: _Signals) -> int:
    """Ask the launcher's broker to run the daemon; its answer's exit code."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
        sock.sendall(json.dumps({"node": node, "line": line}).encode() + b"\n")
    except OSError as exc:
        print(f"corral mpi rsh: no step broker at {path}: {exc}", file=sys.stderr)
        return CONNECTION_ERROR
    grace = float(os.environ.get("CORRAL_GRACE_PERIOD") or 30)
    deadline = None
    buffer = b""
    with sock:
        while True:
            if guard.received is not None and deadline is None:
                deadline = time.monotonic() + grace + CANCEL_WAIT
                try:
                    sock.sendall(b'{"cancel": true}\n')
                except OSError:
                    return 128 + guard.received
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([sock, guard.pipe], [], [], timeout)
            if not ready:
                return 128 + (guard.received or signal.SIGTERM)
            if guard.pipe in ready:
                os.read(guard.pipe, 512)
            if sock not in ready:
                continue
            try:
                data = sock.recv(65536)
            except OSError:
                data = b""
            if not data:
                print(f"corral mpi rsh: the step broker went away ({node})", file=sys.stderr)
                return CONNECTION_ERROR
            buffer += data
            while b"\n" in buffer:
                raw, buffer = buffer.split(b"\n", 1)
                answer = json.loads(raw)
                if "error" in answer:
                    print(f"corral mpi rsh: {answer['error']}", file=sys.stderr)
                    return CONNECTION_ERROR
                if "exit" in answer:
                    sys.stderr.write(answer.get("output") or "")
                    return int(answer["exit"])


def on_its_own(node: str, line: str, guard: _Signals) -> int:
    """Run the daemon's step with the SDK and the task's job token."""
    from corral.client import Client
    from corral.client.config import resolve_job
    from corral.errors import CorralError
    from corral.kinds.mpi_steps import run_step

    try:
        job = resolve_job()
    except CorralError as exc:
        print(f"corral mpi rsh: {exc}", file=sys.stderr)
        return CONNECTION_ERROR
    with Client(job.server, job.token) as client:
        return run_step(client, job.job_id, node, line, lambda: guard.received, guard.wake)


if __name__ == "__main__":
    sys.exit(main())
