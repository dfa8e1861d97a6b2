"""``corral run``: submit a job, stream every task's output by rank, exit with its code.

Slurm's ``srun`` outside an allocation. It takes exactly ``corral submit``'s options: its
signature is built from :func:`corral.cli.jobs.submit`'s (less ``--output``) plus
``--label/--no-label`` and ``--quiet``, so the two never drift apart.

Logs are read by one polling loop over ``log_chunk`` offsets, not a thread per task: a
task that just wrote is polled again soon, an idle one backs off, and one round fetches
at most ``_BATCH`` tasks, so a 64-task (or 1,000-task) job costs the server a bounded
number of requests per second. Each task's text is cut into whole lines before it is
written, so lines of different tasks never interleave mid-line.
"""

from __future__ import annotations

import inspect
import signal
import sys
import time
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

import typer

from corral.cli import jobs as submit_cli
from corral.cli.common import client, err_console

if TYPE_CHECKING:
    from corral.client.client import Client
    from corral.schemas.api import JobOut

app = typer.Typer()

TERMINAL = frozenset({"succeeded", "failed", "cancelled"})
_ACTIVE = 0.25  # seconds until a task that just wrote is read again
_IDLE_RATE = 16.0  # idle tasks back off until together they cost about this many reads/s
_BATCH = 32  # the most log reads in one round
_JOB_POLL = 0.5  # seconds between reads of the job's state
_DRAIN = 3.0  # after the job ended, how long to wait for logs still incomplete


class _Interrupted(Exception):
    """SIGINT or SIGTERM arrived while streaming."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _on_signal(signum: int, _frame: object) -> None:
    raise _Interrupted(signum)


@dataclass
class _Task:
    rank: int
    offset: int = 0
    partial: str = ""
    done: bool = False
    due: float = 0.0  # monotonic time of its next read
    interval: float = _ACTIVE


class LogStream:
    """The logs of one attempt of a job, read by polling, written as (labelled) lines."""

    def __init__(
        self,
        c: Client,
        job_id: int,
        attempt: int,
        world: int,
        label: bool,
        out: IO[str],
    ) -> None:
        self.c, self.job_id, self.attempt, self.label, self.out = c, job_id, attempt, label, out
        self.tasks = [_Task(rank) for rank in range(world)]
        self.width = len(str(world - 1))
        self.raw = world == 1 and not label  # one task unlabelled: pass text straight on
        self.idle_max = max(1.0, world / _IDLE_RATE)

    @property
    def done(self) -> bool:
        return all(t.done for t in self.tasks)

    def poll(self, now: float, everything: bool = False) -> bool:
        """Read the tasks that are due (``everything``: all not done); True if any moved."""
        waiting = [t for t in self.tasks if not t.done and (everything or t.due <= now)]
        if not everything:
            waiting = sorted(waiting, key=lambda t: t.due)[:_BATCH]
        moved = False
        for task in waiting:
            chunk = self.c.log_chunk(self.job_id, task.rank, task.offset, self.attempt)
            grew = chunk.offset > task.offset
            task.offset = chunk.offset
            self._write(task, chunk.data, final=chunk.complete)
            task.done = chunk.complete
            task.interval = _ACTIVE if grew else min(task.interval * 2, self.idle_max)
            task.due = now + task.interval
            moved = moved or grew
        self.out.flush()
        return moved

    def drain(self) -> None:
        """Read until every task's log is complete, or nothing came for ``_DRAIN`` s."""
        quiet_since = time.monotonic()
        while not self.done:
            if self.poll(time.monotonic(), everything=True):
                quiet_since = time.monotonic()
            elif time.monotonic() - quiet_since > _DRAIN:
                break
            else:
                time.sleep(_ACTIVE)
        for task in self.tasks:  # a log that never completed (a lost node): end its line
            self._write(task, "", final=True)
        self.out.flush()

    def next_due(self) -> float:
        return min((t.due for t in self.tasks if not t.done), default=float("inf"))

    def _write(self, task: _Task, data: str, final: bool) -> None:
        if self.raw:
            self.out.write(data)
            return
        text = task.partial + data
        lines = text.split("\n")
        task.partial = lines.pop()
        if final and task.partial:
            lines.append(task.partial)
            task.partial = ""
        prefix = f"{task.rank:>{self.width}}: " if self.label else ""
        self.out.write("".join(f"{prefix}{line}\n" for line in lines))


def exit_code_of(job: JobOut) -> int:
    """The process exit code for an ended job: 0 if it succeeded, else its exit code
    (a signal's as 128+N), else 1."""
    if job.state == "succeeded":
        return 0
    code = job.exit_code
    if code is None or code == 0:
        return 1
    if code < 0:
        return 128 - code
    return code if code < 256 else 1


class Runner:
    """Follows one submitted job: progress on stderr, its tasks' output on ``out``."""

    def __init__(
        self, c: Client, job: JobOut, label: bool | None, quiet: bool, out: IO[str]
    ) -> None:
        self.c, self.job, self.quiet, self.out = c, job, quiet, out
        self.label = job.world_size > 1 if label is None else label
        self.stream: LogStream | None = None
        self.said: tuple[str, str | None] | None = None

    def say(self, text: str, progress: bool = True) -> None:
        if not (progress and self.quiet):
            from rich.markup import escape

            err_console.print(f"corral: {escape(text)}", highlight=False, soft_wrap=True)

    def follow(self) -> int:
        """Stream until the job ends and its logs are read; the exit code."""
        job = self.job
        self.say(f"job {job.id} submitted")
        next_job = 0.0
        while True:
            now = time.monotonic()
            if now >= next_job:
                job = self.job = self.c.get(job.id)
                next_job = now + _JOB_POLL
                self._track(job)
                if job.state in TERMINAL:
                    break
            if self.stream is not None:
                self.stream.poll(now)
            due = min(next_job, self.stream.next_due() if self.stream else next_job)
            time.sleep(max(0.05, due - time.monotonic()))
        if self.stream is None and job.started_at is not None:  # ended between two polls
            self._started(job)
        if self.stream is not None:
            self.stream.drain()
        return self._ended(job)

    def _track(self, job: JobOut) -> None:
        """Report state changes; open the stream of a (new) attempt."""
        if self.stream is not None and job.attempt != self.stream.attempt:
            self.stream.drain()
            self.stream = None
            self.say(f"job {job.id} requeued as attempt {job.attempt}: {job.reason or ''}")
        if job.state == "pending":
            key = ("pending", job.reason)
            if key != self.said:
                self.say(f"job {job.id} pending: {job.reason or 'waiting to be scheduled'}")
            self.said = key
        elif job.state in ("running", "preempting") and self.stream is None:
            self.said = (job.state, None)
            self._started(job)

    def _started(self, job: JobOut) -> None:
        """Say where the job runs (or ran) and open its attempt's stream."""
        nodes = sorted({t.node for t in job.tasks})
        self.say(f"job {job.id} running on {', '.join(nodes) or 'its nodes'}")
        self._open(job)

    def _open(self, job: JobOut) -> None:
        self.stream = LogStream(self.c, job.id, job.attempt, job.world_size, self.label, self.out)

    def _ended(self, job: JobOut) -> int:
        code = exit_code_of(job)
        if job.state == "succeeded":
            self.say(f"job {job.id} succeeded")
        else:
            self.say(f"job {job.id} {job.state}: {job.reason or 'no reason given'}", False)
        return code

    def cancel(self, signum: int) -> int:
        """Cancel the job after SIGINT/SIGTERM; 128 + the signal's number."""
        name = signal.Signals(signum).name
        self.say(f"{name}: cancelling job {self.job.id}", progress=False)
        job = self.c.cancel(self.job.id)
        self.say(f"job {job.id} {job.state}", progress=False)
        return 128 + signum


def _run(command: list[str] | None, label: bool | None, quiet: bool, **options: Any) -> None:
    """Submit a job, stream every task's output ("RANK: line" with --label, the default
    for jobs of more than one task) and exit with the job's exit code (the first failing
    task's). Ctrl-C (or SIGTERM) cancels the job. Takes the options of `corral submit`."""
    server, token = options.pop("server"), options.pop("token")
    file, env = options.pop("file"), options.pop("env") or []
    priority, gpus = options.get("priority"), options.get("gpus")
    if priority and priority.lstrip("-").isdigit():
        options["priority"] = int(priority)
    if gpus:
        options["gpus"] = submit_cli._number(gpus)
    manifest = submit_cli.build_manifest(file, command or [], options, env)
    c = client(server, token)
    job = c.submit(manifest)
    runner = Runner(c, job, label, quiet, sys.stdout)
    handlers = {s: signal.signal(s, _on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        code = runner.follow()
    except _Interrupted as exc:
        for sig in handlers:  # a second signal stops waiting for the cancel
            signal.signal(
                sig, signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL
            )
        code = runner.cancel(exc.signum)
    finally:
        sys.stdout.flush()
    raise typer.Exit(code)


def _signature() -> inspect.Signature:
    """``corral submit``'s parameters (less ``--output``) plus --label and --quiet."""
    params = [
        p
        for p in inspect.signature(submit_cli.submit, eval_str=True).parameters.values()
        if p.name != "output"
    ]
    extra = [
        inspect.Parameter(
            "label",
            inspect.Parameter.KEYWORD_ONLY,
            annotation=bool | None,
            default=typer.Option(
                None,
                "--label/--no-label",
                help="prefix lines with the task's rank (default: for more than one task)",
            ),
        ),
        inspect.Parameter(
            "quiet",
            inspect.Parameter.KEYWORD_ONLY,
            annotation=bool,
            default=typer.Option(False, "--quiet", "-q", help="no progress lines on stderr"),
        ),
    ]
    kinds = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in params]
    return inspect.Signature(kinds + extra)


def run(**params: Any) -> None:
    _run(**params)


run.__signature__ = _signature()  # type: ignore[attr-defined]
run.__doc__ = _run.__doc__
app.command(context_settings={"allow_interspersed_args": False})(run)
