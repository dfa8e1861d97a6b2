"""The job steps that run Open MPI's daemons (``kind: mpi``), through the SDK.

:class:`StepBroker` runs in the launcher beside mpirun. Each rsh agent mpirun starts
(``corral.kinds.mpi_rsh``, one per node) asks it over a Unix socket in the launcher's
private directory to run a daemon on a node; the broker starts the step, watches every
daemon's step with one listing of the job's steps per poll, and answers with the exit
code. So the agents stay small (standard library only) and the server sees one client
per job, however many nodes. :func:`run_step` does the same for an agent on its own.

Protocol, JSON lines: the agent sends ``{"node", "line"}``; the broker answers
``{"step": N}`` once started, then ``{"exit": CODE, "output": TEXT}`` (``output``: what a
failed daemon printed), or ``{"error": TEXT}`` when the step could not start. The agent
sends ``{"cancel": true}`` after a signal; an agent that goes away before the end has its
step cancelled, as ssh's remote command dies with its connection.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from corral.client import Client
from corral.errors import ConnectionFailedError, CorralError
from corral.schemas.steps import StepOut

POLL_START, MAX_POLL = 0.05, 1.0  # seconds between looks at the steps: first, at most
CANCEL_WAIT = 15.0  # seconds past the job's grace period a cancelled step is waited for
LOG_WAIT = 5.0  # seconds a failed step's last output is waited for
# step creations in flight at once: the server takes a job's one at a time anyway
CONCURRENT_STARTS = 1
START_TRIES = 4  # a step creation the server failed (5xx, not applied) is tried again


def daemon_command(line: str, python: str = sys.executable) -> list[str]:
    """What a daemon's step runs on its node: Open MPI's remote command line, as ssh would
    run it (``corral.kinds.mpi_node daemon``)."""
    return [python, "-m", "corral.kinds.mpi_node", "daemon", line]


def failure_output(client: Client, step: StepOut) -> str:
    """How a failed step ended and what its process printed (waiting a little for the end
    of its log to reach the server)."""
    task = step.tasks[0]
    why = f" ({task.reason})" if task.reason else ""
    head = (
        f"corral mpi: Open MPI's daemon on {task.node} (step {step.step}) ended: "
        f"{task.state}, exit code {step.exit_code}{why}\n"
    )
    parts, offset = [head], 0
    deadline = time.monotonic() + LOG_WAIT
    with contextlib.suppress(CorralError):
        while True:
            chunk = client.log_chunk(step.job_id, task.rank, offset, step.attempt, step.step)
            parts.append(chunk.data)
            moved = chunk.offset > offset
            offset = chunk.offset
            if (chunk.complete and not moved) or time.monotonic() > deadline:
                break
            if not moved:
                time.sleep(0.2)
    return "".join(parts)


def start_daemon(client: Client, job_id: int, node: str, line: str) -> StepOut:
    """Start the daemon's step on ``node``. A creation the server answered with an error of
    its own (5xx: nothing was stored) is tried again; one whose outcome is unknown (the
    connection broke mid-request) is not, since a second daemon would clash with the first.
    """
    for attempt in range(START_TRIES):
        try:
            return client.start_step(job_id, daemon_command(line), nodes=[node])
        except ConnectionFailedError:
            raise
        except CorralError as exc:
            if exc.status_code < 500 or attempt + 1 == START_TRIES:
                raise
            time.sleep(0.1 * 2**attempt)
    raise AssertionError("not reached")


def run_step(
    client: Client,
    job_id: int,
    node: str,
    line: str,
    signalled: Callable[[], int | None],
    wake: threading.Event,
) -> int:
    """Run the daemon on ``node`` as a step and wait for it (an agent without a broker):
    its exit code, 255 when it could not start. Once ``signalled()`` names a signal, the
    step is cancelled and waited for the grace period and a little more."""
    try:
        step = start_daemon(client, job_id, node, line)
    except CorralError as exc:
        print(f"corral mpi: cannot start Open MPI's daemon on {node}: {exc}", file=sys.stderr)
        return 255
    grace = float(os.environ.get("CORRAL_GRACE_PERIOD") or 30)
    pause, cancelled_at = POLL_START, None
    while True:
        now = time.monotonic()
        signum = signalled()
        if signum is not None and cancelled_at is None:
            wake.clear()
            with contextlib.suppress(ConnectionFailedError):  # else: again next round
                client.cancel_step(job_id, step.step)
                cancelled_at = now
        try:
            step = client.step(job_id, step.step, step.attempt)
        except ConnectionFailedError:
            pass  # the server is briefly away (a failover): look again
        except CorralError as exc:
            print(f"corral mpi: lost step {step.step} on {node}: {exc}", file=sys.stderr)
            return 255
        else:
            if step.state == "ended":
                break
        if cancelled_at is not None and now - cancelled_at > grace + CANCEL_WAIT:
            return 128 + (signum or 15)
        wake.wait(pause)
        pause = min(MAX_POLL, pause * 2)
    code = step.exit_code or 0
    if code and cancelled_at is None:
        sys.stderr.write(failure_output(client, step))
    return code


@dataclass
class _Daemon:
    step: int
    conn: socket.socket
    ended: bool = False
    cancelled: bool = False


class StepBroker:
    """Starts and watches the daemons' steps for the rsh agents of one mpirun (see the
    module's docstring). :meth:`start` it before mpirun, :meth:`close` it after."""

    def __init__(self, client: Client, job_id: int, path: str) -> None:
        self.client, self.job_id, self.path = client, job_id, path
        self._live: dict[int, _Daemon] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closing = threading.Event()
        self._starts = threading.BoundedSemaphore(CONCURRENT_STARTS)
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)

    def start(self) -> None:
        self._server.bind(self.path)  # in a private (0700) directory: the job's user only
        self._server.listen(1024)
        threading.Thread(target=self._accept, name="mpi-accept", daemon=True).start()
        threading.Thread(target=self._watch, name="mpi-watch", daemon=True).start()

    def close(self, wait: float = 10.0) -> None:
        """Stop: give the daemons' steps ``wait`` seconds to end by themselves (they end
        with mpirun), then cancel what is left."""
        deadline = time.monotonic() + wait
        while self._live and time.monotonic() < deadline:
            time.sleep(0.1)
        self._closing.set()
        self._wake.set()
        with contextlib.suppress(OSError):
            self._server.close()
        with self._lock:
            left = list(self._live.values())
        for daemon in left:
            self._cancel(daemon)

    def _accept(self) -> None:
        while not self._closing.is_set():
            try:
                conn, _ = self._server.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        """One agent: start its step, then read its cancel (or its going away)."""
        with conn, conn.makefile("rb") as reader:
            try:
                request = json.loads(reader.readline())
                node, line = str(request["node"]), str(request["line"])
            except (ValueError, KeyError, TypeError, OSError):
                _send(conn, {"error": "not a daemon request"})
                return
            try:
                with self._starts:
                    started = start_daemon(self.client, self.job_id, node, line)
            except CorralError as exc:
                _send(conn, {"error": f"cannot start Open MPI's daemon on {node}: {exc}"})
                return
            daemon = _Daemon(started.step, conn)
            with self._lock:
                self._live[daemon.step] = daemon
            self._wake.set()
            _send(conn, {"step": daemon.step})
            with contextlib.suppress(OSError):
                for message in reader:  # until the agent closes: after the answer, or gone
                    if b"cancel" in message:
                        self._cancel(daemon)
            with self._lock:
                gone = not daemon.ended
                self._live.pop(daemon.step, None)
            if gone:
                self._cancel(daemon)

    def _cancel(self, daemon: _Daemon) -> None:
        if daemon.cancelled or daemon.ended:
            return
        daemon.cancelled = True
        with contextlib.suppress(CorralError):
            self.client.cancel_step(self.job_id, daemon.step)

    def _watch(self) -> None:
        """Look at the live steps (one listing per poll) and answer each that ended."""
        pause = POLL_START
        while not self._closing.is_set():
            with self._lock:
                live = dict(self._live)
            for step in self._ended(live) if live else ():
                daemon = live[step.step]
                with self._lock:
                    daemon.ended = True
                    self._live.pop(step.step, None)
                threading.Thread(target=self._answer, args=(daemon, step), daemon=True).start()
            if self._wake.wait(pause if live else MAX_POLL):
                self._wake.clear()
                pause = POLL_START
            else:
                pause = min(MAX_POLL, pause * 2)

    def _ended(self, live: dict[int, _Daemon]) -> list[StepOut]:
        try:
            listed = {s.step: s for s in self.client.steps(self.job_id)}
        except CorralError:
            return []  # the server is briefly away: look again
        found = []
        for number in live:
            step = listed.get(number)
            if step is None:  # past the listing's limit
                try:
                    step = self.client.step(self.job_id, number)
                except CorralError:
                    continue
            if step.state == "ended":
                found.append(step)
        return found

    def _answer(self, daemon: _Daemon, step: StepOut) -> None:
        code = step.exit_code or 0
        output = failure_output(self.client, step) if code and not daemon.cancelled else ""
        _send(daemon.conn, {"exit": code, "output": output})


def _send(conn: socket.socket, message: dict) -> None:
    with contextlib.suppress(OSError):
        conn.sendall(json.dumps(message).encode() + b"\n")
