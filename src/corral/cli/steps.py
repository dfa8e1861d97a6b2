"""``corral step``: run processes on the nodes of the job one is in (``step run``, like
``srun`` inside an allocation), and list, show or cancel a job's steps."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from types import FrameType
from typing import TYPE_CHECKING, Annotated, TextIO

import typer

from corral.cli.common import (
    Output,
    OutputOpt,
    ServerOpt,
    TokenOpt,
    client,
    console,
    parse_pairs,
    print_json,
)
from corral.client.config import resolve_job

if TYPE_CHECKING:
    from corral.client.client import Client
    from corral.schemas.steps import StepOut

app = typer.Typer(help="Job steps: processes a running job starts on its own nodes.")
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
MAX_POLL = 1.0  # seconds between looks at a running step, at most
CANCEL_WAIT = 15.0  # seconds past the job's grace period a cancelled step is waited for
LOG_WAIT = 10.0  # seconds an ended step's last output is waited for


@app.command(context_settings={"allow_interspersed_args": False})
def run(
    command: Annotated[list[str], typer.Argument(help="command and arguments, after --")],
    node: Annotated[
        list[str] | None,
        typer.Option("--node", "-w", help="a node of the job, repeatable (default: all)"),
    ] = None,
    tasks_per_node: Annotated[int, typer.Option("--tasks-per-node", help="processes per node")] = 1,
    env: Annotated[list[str] | None, typer.Option("--env", "-e", help="K=V, repeatable")] = None,
    workdir: Annotated[
        str | None, typer.Option(help="working directory (default: the job's)")
    ] = None,
    label: Annotated[
        bool, typer.Option("--label", "-l", help="prefix each output line with its step rank")
    ] = False,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="do not relay the step's output")
    ] = False,
) -> None:
    """Run COMMAND on the nodes of the job this task belongs to (inside a Corral job only:
    it reads CORRAL_SERVER, CORRAL_JOB_ID and CORRAL_JOB_TOKEN). Relays the output, waits
    for every process, turns SIGINT, SIGTERM and SIGHUP into a cancel of the step, and
    exits with the first non-zero exit code (0 when all succeeded)."""
    from corral.client.client import Client

    job = resolve_job()
    c = Client(job.server, job.token)
    guard = StepSignals()
    step = c.start_step(
        job.job_id, command, node, tasks_per_node, parse_pairs(env or [], "--env"), workdir
    )
    relay = None if quiet else StepRelay(c, step, sys.stdout, label)
    raise typer.Exit(follow_step(c, step, relay, guard))


@app.command("list")
def list_steps(
    job_id: Annotated[int, typer.Argument(metavar="JOB")],
    attempt: Annotated[int | None, typer.Option(help="attempt (default: the current)")] = None,
    server: ServerOpt = None,
    token: TokenOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """A job's steps: state, nodes and exit code of each."""
    steps = _client(server, token).steps(job_id, attempt)
    if output is Output.json:
        print_json(steps)
        return
    console.print(_steps_table(steps))


@app.command()
def show(
    job_id: Annotated[int, typer.Argument(metavar="JOB")],
    step: Annotated[int, typer.Argument(metavar="STEP")],
    attempt: Annotated[int | None, typer.Option(help="attempt (default: the current)")] = None,
    server: ServerOpt = None,
    token: TokenOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """One step: each of its tasks' node, state, exit code and reason."""
    found = _client(server, token).step(job_id, step, attempt)
    if output is Output.json:
        print_json(found)
        return
    console.print(_tasks_table(found))


@app.command()
def cancel(
    job_id: Annotated[int, typer.Argument(metavar="JOB")],
    step: Annotated[int, typer.Argument(metavar="STEP")],
    server: ServerOpt = None,
    token: TokenOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """Stop a step's tasks: SIGTERM, then SIGKILL after the job's grace period."""
    found = _client(server, token).cancel_step(job_id, step)
    if output is Output.json:
        print_json(found)
        return
    console.print(f"step {found.step} of job {found.job_id}: {found.state}, cancel requested")


def _client(server: str | None, token: str | None) -> Client:
    """A client with the given credential; inside a job without one, the job's token."""
    if token is None and not os.environ.get("CORRAL_TOKEN") and os.environ.get("CORRAL_JOB_TOKEN"):
        token = os.environ["CORRAL_JOB_TOKEN"]
    return client(server, token)


class StepSignals:
    """Turns SIGINT, SIGTERM and SIGHUP into a flag the wait loop acts on (a cancel); a
    second one ends the command at once."""

    def __init__(self) -> None:
        self.received: int | None = None
        self.wake = threading.Event()
        for sig in FORWARDED:
            signal.signal(sig, self._handle)

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        if self.received is not None:
            os._exit(128 + signum)
        self.received = signum
        self.wake.set()


class StepRelay:
    """Copies the logs of a step's tasks to ``out`` as they reach the server."""

    def __init__(self, c: Client, step: StepOut, out: TextIO, label: bool) -> None:
        self.c, self.step, self.out, self.label = c, step, out, label
        self.offsets = {t.rank: 0 for t in step.tasks}
        self.partial = {t.rank: "" for t in step.tasks}
        self.complete: set[int] = set()

    def pump(self, step: StepOut) -> bool:
        """Copy what is new; True once every task's whole log has been copied."""
        for task in step.tasks:
            if task.rank in self.complete or task.state == "pending":
                continue
            while True:
                chunk = self.c.log_chunk(
                    step.job_id, task.rank, self.offsets[task.rank], step.attempt, step.step
                )
                moved = chunk.offset > self.offsets[task.rank]
                self.offsets[task.rank] = chunk.offset
                self._write(task.rank, chunk.data, chunk.complete)
                if chunk.complete and not moved:
                    self.complete.add(task.rank)
                if not chunk.data or not moved:
                    break
        self.out.flush()
        return len(self.complete) == len(step.tasks)

    def _write(self, rank: int, data: str, final: bool) -> None:
        if not self.label:
            self.out.write(data)
            return
        *lines, rest = (self.partial[rank] + data).split("\n")
        if final and rest:
            lines.append(rest)
            rest = ""
        for line in lines:
            self.out.write(f"{rank}: {line}\n")
        self.partial[rank] = rest


def follow_step(
    c: Client,
    step: StepOut,
    relay: StepRelay | None,
    guard: StepSignals,
    kill_on_bad_exit: bool = False,
) -> int:
    """Wait for every task of ``step`` (relaying output); its exit code for the command.
    After a signal (a cancel), waits at most the job's grace period and a little more.
    ``kill_on_bad_exit``: a task exiting non-zero cancels the others (srun's ``-K``)."""
    pause = 0.05
    cancelled_at = ended_at = None
    grace = float(os.environ.get("CORRAL_GRACE_PERIOD") or 30)
    while True:
        now = time.monotonic()
        if guard.received is not None and cancelled_at is None:
            c.cancel_step(step.job_id, step.step)
            cancelled_at = now
            guard.wake.clear()
        step = c.step(step.job_id, step.step, step.attempt)
        if kill_on_bad_exit and cancelled_at is None and any(t.exit_code for t in step.tasks):
            if step.state != "ended":
                c.cancel_step(step.job_id, step.step)
            cancelled_at = now
        drained = relay.pump(step) if relay else True
        if step.state == "ended":
            ended_at = ended_at or now
            if drained or now - ended_at > LOG_WAIT:
                break
        if cancelled_at is not None and now - cancelled_at > grace + CANCEL_WAIT:
            return 128 + (guard.received or signal.SIGTERM)
        guard.wake.wait(pause)
        pause = min(MAX_POLL, pause * 2)
    for task in step.tasks:
        if task.exit_code or task.state in ("lost", "cancelled"):
            code = "no exit code" if task.exit_code is None else f"exit code {task.exit_code}"
            why = f" ({task.reason})" if task.reason else ""
            print(
                f"corral: step {step.step} task {task.rank} on {task.node}: {task.state}, "
                f"{code}{why}",
                file=sys.stderr,
            )
    return step.exit_code or 0


def _steps_table(steps: list[StepOut]):  # noqa: ANN202 - a rich Table
    from rich.table import Table

    from corral.cli.render import state_text

    table = Table(box=None, header_style="bold")
    for column in ("STEP", "STATE", "TASKS", "NODES", "EXIT", "BY", "COMMAND"):
        table.add_column(column)
    for step in steps:
        nodes = list(dict.fromkeys(t.node for t in step.tasks))
        shown = ",".join(nodes[:3]) + (f",+{len(nodes) - 3}" if len(nodes) > 3 else "")
        table.add_row(
            str(step.step),
            state_text(step.state + (" (cancelled)" if step.cancelled else "")),
            _counts(step),
            shown,
            "-" if step.exit_code is None else str(step.exit_code),
            step.created_by,
            _command(step.command),
        )
    return table


def _tasks_table(step: StepOut):  # noqa: ANN202 - a rich Table
    from rich.table import Table

    from corral.cli.render import state_text

    table = Table(
        title=f"job {step.job_id} step {step.step}: {_command(step.command)}",
        box=None,
        header_style="bold",
    )
    for column in ("RANK", "NODE", "LOCAL", "STATE", "EXIT", "REASON"):
        table.add_column(column)
    for task in step.tasks:
        table.add_row(
            str(task.rank),
            task.node,
            str(task.local_rank),
            state_text(task.state),
            "-" if task.exit_code is None else str(task.exit_code),
            task.reason or "",
        )
    return table


def _counts(step: StepOut) -> str:
    counts: dict[str, int] = {}
    for task in step.tasks:
        counts[task.state] = counts.get(task.state, 0) + 1
    return " ".join(f"{n} {state}" for state, n in counts.items())


def _command(command: list[str] | str) -> str:
    import shlex

    text = command if isinstance(command, str) else shlex.join(command)
    return text if len(text) <= 60 else text[:57] + "..."
