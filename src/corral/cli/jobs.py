"""Job commands: submit, jobs, show, logs, cancel, hold, release, wait, preempt."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from corral.cli.common import (
    Output,
    OutputOpt,
    ServerOpt,
    TokenOpt,
    client,
    console,
    err_console,
    parse_pairs,
    print_json,
)
from corral.cli.watch import IntervalOpt, WatchOpt
from corral.cli.watch import watch as show_again
from corral.core.array import state_counts
from corral.errors import ValidationError
from corral.schemas.limits import MAX_JOB_PAGE

if TYPE_CHECKING:
    from rich.console import RenderableType

    from corral.schemas.api import JobList, JobOut
    from corral.schemas.manifest import JobManifest

# Rich, the client (httpx) and the schemas (pydantic) are imported inside the commands
# that use them, not here: building the `corral` app imports none of them (issue 21).

app = typer.Typer()


def build_manifest(
    file: Path | None, command: list[str], flags: dict[str, Any], env: list[str]
) -> JobManifest:
    """The manifest from ``-f`` (if any) with the command-line flags laid over it."""
    from corral.schemas.manifest import load_manifest, parse_manifest

    data: dict[str, Any] = {}
    if file is not None:
        try:
            text = sys.stdin.read() if str(file) == "-" else file.read_text()
        except OSError as exc:
            raise ValidationError(f"cannot read {file}: {exc.strerror}") from None
        data = load_manifest(text, str(file)).model_dump(mode="json", exclude_none=True)
    resources = data.setdefault("resources", {})
    for key in ("gpus", "gpu_model", "cpus", "memory", "tpu"):
        if flags.get(key) is not None:
            resources[key] = flags.pop(key)
        flags.pop(key, None)
    mounts = flags.pop("mounts", None)
    data.update({k: v for k, v in flags.items() if v is not None})
    if mounts:  # added to the file's
        data["mounts"] = [*data.get("mounts", []), *mounts]
    if env:
        data["env"] = {**data.get("env", {}), **parse_pairs(env, "--env")}
    if command:
        one = len(command) == 1 and any(c.isspace() for c in command[0])
        data["command"] = command[0] if one else list(command)
    if "command" not in data:
        raise ValidationError(
            "no command: use `corral submit [options] -- COMMAND ...` or -f job.yaml"
        )
    return parse_manifest(data)


@app.command(context_settings={"allow_interspersed_args": False})
def submit(
    command: Annotated[
        list[str] | None, typer.Argument(help="command and arguments, after --")
    ] = None,
    file: Annotated[
        Path | None, typer.Option("-f", "--file", help="job manifest YAML ('-' for stdin)")
    ] = None,
    name: Annotated[str | None, typer.Option(help="job name")] = None,
    kind: Annotated[
        str | None, typer.Option(help="job kind: pytorch (default), jax, mpi, ray, tpu")
    ] = None,
    queue: Annotated[str | None, typer.Option(help="queue (default: default)")] = None,
    priority: Annotated[str | None, typer.Option(help="priority class or integer")] = None,
    nodes: Annotated[int | None, typer.Option(help="number of nodes")] = None,
    tasks_per_node: Annotated[
        int | None, typer.Option("--tasks-per-node", help="processes per node")
    ] = None,
    gpus: Annotated[
        str | None, typer.Option(help="GPUs per node: 8, H100:8, 0.5 or 1g.10gb")
    ] = None,
    gpu_model: Annotated[
        str | None, typer.Option("--gpu-model", help="glob on the GPU model")
    ] = None,
    tpu: Annotated[
        str | None, typer.Option(help="a TPU slice instead of GPUs: GENERATION:SHAPE, v5p:2x2x4")
    ] = None,
    cpus: Annotated[float | None, typer.Option(help="CPUs per node")] = None,
    memory: Annotated[str | None, typer.Option(help="memory per node, e.g. 256GB")] = None,
    time_limit: Annotated[str | None, typer.Option("--time-limit", help="e.g. 4h")] = None,
    preemptible: Annotated[bool | None, typer.Option("--preemptible/--no-preemptible")] = None,
    grace_period: Annotated[str | None, typer.Option("--grace-period", help="e.g. 60s")] = None,
    requeue: Annotated[bool | None, typer.Option("--requeue/--no-requeue")] = None,
    env: Annotated[list[str] | None, typer.Option("--env", "-e", help="K=V, repeatable")] = None,
    workdir: Annotated[str | None, typer.Option(help="working directory of the tasks")] = None,
    image: Annotated[
        str | None,
        typer.Option(
            help="container image: a root filesystem directory, oci:PATH, oci-archive:PATH "
            "or docker-archive:PATH (docs/containers.md)"
        ),
    ] = None,
    mounts: Annotated[
        list[str] | None,
        typer.Option("--mount", help="HOST[:CONTAINER][:ro] mounted into the image; repeatable"),
    ] = None,
    shm_size: Annotated[
        str | None, typer.Option("--shm-size", help="size of /dev/shm in the image, e.g. 16GB")
    ] = None,
    dependency: Annotated[
        str | None,
        typer.Option("--dependency", "-d", help="e.g. afterok:12:13,afterany:14 or singleton"),
    ] = None,
    hold: Annotated[
        bool, typer.Option("--hold", "-H", help="submit held: not scheduled until released")
    ] = False,
    array: Annotated[
        str | None,
        typer.Option(
            "--array", "-a", help="a job array: 0-99, 1,3,5-9:2; %MAX: at most MAX at once"
        ),
    ] = None,
    server: ServerOpt = None,
    token: TokenOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """Submit a job; prints its id (with -o json, the job). A job array prints its id and
    elements (with -o json, its first element with ``array``: its id and every job id)."""
    prio: Any = int(priority) if priority and priority.lstrip("-").isdigit() else priority
    gpu_value: Any = _number(gpus) if gpus else None
    manifest = build_manifest(
        file,
        command or [],
        {
            "name": name,
            "kind": kind,
            "queue": queue,
            "priority": prio,
            "nodes": nodes,
            "tasks_per_node": tasks_per_node,
            "gpus": gpu_value,
            "gpu_model": gpu_model,
            "tpu": tpu,
            "cpus": cpus,
            "memory": memory,
            "time_limit": time_limit,
            "preemptible": preemptible,
            "grace_period": grace_period,
            "requeue": requeue,
            "workdir": workdir,
            "image": image,
            "mounts": mounts,
            "shm_size": shm_size,
            "dependency": dependency,
            "hold": hold or None,
            "array": array,
        },
        env or [],
    )
    job = client(server, token).submit(manifest)
    if output is Output.json:
        print_json(job)
    elif job.array is not None:
        from corral.cli.render import array_label

        count = job.array.count
        print(
            f"submitted job array {job.array.job_id} ({count} element{'s' * (count != 1)}: "
            f"{array_label(job.array)})"
        )
    else:
        print(job.id)


@app.command()
def jobs(
    all: Annotated[bool, typer.Option("--all", "-a", help="include ended jobs")] = False,
    queue: Annotated[str | None, typer.Option(help="only this queue")] = None,
    state: Annotated[str | None, typer.Option(help="only this state")] = None,
    array: Annotated[
        bool, typer.Option("--array", "-r", help="one row per element of a job array")
    ] = False,
    limit: Annotated[
        int | None,
        typer.Option(
            "--limit",
            "-n",
            min=1,
            max=MAX_JOB_PAGE,
            help="only the newest N, saying how many more there are (-o json: remaining)",
        ),
    ] = None,
    watch: WatchOpt = False,
    interval: IntervalOpt = 2.0,
    server: ServerOpt = None,
    token: TokenOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """The queue: pending jobs with their reason, position and estimated start, running
    jobs with their nodes. A job array is one row, its elements counted by state, unless
    --array (-r, as squeue's) lists every element. Every job, oldest first; with --limit N
    the newest N, and how many more there are."""
    from corral.schemas.api import JobList

    c = client(server, token)

    def fetch() -> JobList:
        if limit is None:
            return JobList(jobs=c.list(all=all, queue=queue, state=state, group_arrays=not array))
        return c.job_page(all, queue, state, not array, limit, count=True)

    def draw(found: JobList) -> RenderableType:
        from rich.console import Group
        from rich.text import Text

        from corral.cli.render import jobs_table

        if not found.jobs:
            return Text("no jobs" + ("" if all else " (use --all to include ended jobs)"))
        if not found.remaining:
            return jobs_table(found.jobs, time.time())
        more = Text(
            f"... and {found.remaining:,} more, older; raise --limit, or leave it out to "
            "list them all"
        )
        return Group(jobs_table(found.jobs, time.time()), more)

    def dump(found: JobList) -> dict[str, Any]:
        extra = {} if limit is None else {"remaining": found.remaining}
        return {"jobs": found.jobs, **extra}

    if watch:
        show_again(fetch, draw, dump, interval, output)
        return
    found = fetch()
    print_json(dump(found)) if output is Output.json else console.print(draw(found))


@app.command()
def show(
    job_id: Annotated[str, typer.Argument(metavar="JOB")],
    server: ServerOpt = None,
    token: TokenOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """One job: state, placement per task, attempts and events; for a pending job its
    estimated start and what would let it start sooner. JOB: an id, or ID_INDEX for an
    element of a job array (an array's id shows its first element and the array's counts)."""
    c = client(server, token)
    job = c.get(job_id)
    advice = c.advice(job.id) if job.state == "pending" else []
    if output is Output.json:
        print_json({**job.model_dump(mode="json"), "advice": advice})
    else:
        from corral.cli.render import job_panel

        console.print(job_panel(job, time.time(), advice))


@app.command()
def logs(
    job_id: Annotated[str, typer.Argument(metavar="JOB")],
    task: Annotated[
        int | None,
        typer.Option(
            "--task", "-t", help="task rank (default: the job's first task that is no daemon)"
        ),
    ] = None,
    attempt: Annotated[int | None, typer.Option(help="attempt (default: the latest)")] = None,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="keep printing until the task ends")
    ] = False,
    step: Annotated[
        int, typer.Option("--step", "-s", help="a job step's output: --task is its step rank")
    ] = 0,
    server: ServerOpt = None,
    token: TokenOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """A task's stdout and stderr (by default the first task whose outcome is the job's:
    task 0, or an MPI job's launcher; with --step, that step's task, rank 0 by default)."""
    c = client(server, token)
    found = c.get(job_id) if task is None or "_" in job_id else None
    number = found.id if found is not None else int(job_id)
    if task is None:
        task = 0 if step else _main_task(found.tasks if found is not None else [])
    if output is Output.json:
        chunk = c.log_chunk(number, task, 0, attempt, step)
        print_json(chunk)
        return
    for piece in c.follow_logs(number, task, attempt, follow=follow, step=step):
        sys.stdout.write(piece)
        sys.stdout.flush()


def _main_task(tasks: list) -> int:
    """The first task not of a daemon role (whose output tells the job's story)."""
    return next((t.rank for t in sorted(tasks, key=lambda t: t.rank) if not t.daemon), 0)


@app.command()
def cancel(
    job_ids: Annotated[list[str], typer.Argument(metavar="JOB...")],
    server: ServerOpt = None,
    token: TokenOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """Cancel jobs; running tasks get SIGTERM, then SIGKILL after the grace period. An
    array's id cancels every element of it, ID_INDEX one element."""
    c = client(server, token)
    _print_states([(j, c.cancel(j)) for j in job_ids], output)


@app.command()
def hold(
    job_ids: Annotated[list[str], typer.Argument(metavar="JOB...")],
    server: ServerOpt = None,
    token: TokenOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """Hold pending jobs: they are not scheduled until released. An array's id holds every
    pending element of it."""
    c = client(server, token)
    _print_states([(j, c.hold(j)) for j in job_ids], output)


@app.command()
def release(
    job_ids: Annotated[list[str], typer.Argument(metavar="JOB...")],
    server: ServerOpt = None,
    token: TokenOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """Release held jobs (an array's id: every held element of it)."""
    c = client(server, token)
    _print_states([(j, c.release(j)) for j in job_ids], output)


@app.command()
def preempt(
    job_ids: Annotated[list[str], typer.Argument(metavar="JOB...")],
    server: ServerOpt = None,
    token: TokenOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """Preempt now, as the scheduler would: SIGTERM, grace period, requeue."""
    c = client(server, token)
    _print_states([(j, c.preempt(j)) for j in job_ids], output, arrays=False)


def _print_states(answers: list[tuple[str, JobOut]], output: Output, arrays: bool = True) -> None:
    """Each job's state after an action (with ``arrays``, a whole array's elements
    counted by state when a name is an array's id)."""
    if output is Output.json:
        print_json({"jobs": [job for _, job in answers]})
        return
    from corral.cli.render import state_text
    from corral.client.client import names_array

    for ref, job in answers:
        if arrays and names_array(ref, job) and job.array is not None:
            console.print(f"job array {job.id}: {state_counts(job.array.states)}")
        else:
            console.print(f"job {job.ref}: ", state_text(job.state))


@app.command()
def wait(
    job_ids: Annotated[list[str], typer.Argument(metavar="JOB...")],
    timeout: Annotated[float | None, typer.Option(help="give up after this many seconds")] = None,
    server: ServerOpt = None,
    token: TokenOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """Block until the jobs end; exit code 0 only if all succeeded. An array's id waits
    for every element of it."""
    try:
        done = client(server, token).wait(job_ids, timeout=timeout)
    except TimeoutError as exc:
        err_console.print(f"error: {exc}")
        raise typer.Exit(2) from None
    if output is Output.json:
        print_json({"jobs": done})
    from corral.cli.render import state_text
    from corral.client.client import names_array

    failed = False
    for ref, job in zip(job_ids, done, strict=True):
        if names_array(ref, job) and job.array is not None:
            states = job.array.states
            failed |= states.get("succeeded", 0) != job.array.count
            if output is not Output.json:
                console.print(f"job array {job.id}: {state_counts(states)}")
            continue
        failed |= job.state != "succeeded"
        if output is not Output.json:
            console.print(f"job {job.ref}: ", state_text(job.state), f" ({job.reason})")
    if failed:
        raise typer.Exit(1)


def _number(text: str) -> int | float | str:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


@app.command()
def kinds(output: OutputOpt = Output.table) -> None:
    """The job kinds this installation knows (``kind:`` in a manifest), plugins included."""
    from rich.table import Table

    from corral.kinds.registry import kinds as known

    found = [
        {"name": k.name, "summary": k.summary, "module": type(k).__module__}
        for k in known().values()
    ]
    if output is Output.json:
        print_json(found)
        return
    table = Table(box=None, header_style="bold", pad_edge=False)
    for col in ("KIND", "WHAT IT DOES", "MODULE"):
        table.add_column(col)
    for row in found:
        table.add_row(row["name"], row["summary"], row["module"])
    console.print(table)
