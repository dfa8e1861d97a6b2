"""Rich tables and panels for jobs, nodes and queues."""

from __future__ import annotations

import shlex
from datetime import datetime

from rich.console import Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from corral.core.array import state_counts
from corral.core.units import format_duration, format_size
from corral.schemas.api import (
    ArrayOut,
    AuditOut,
    JobOut,
    NodeOut,
    QueueOut,
    ReplicaHealth,
    TokenOut,
)

STATE_STYLE = {
    "pending": "yellow",
    "running": "green",
    "preempting": "magenta",
    "succeeded": "bold green",
    "failed": "bold red",
    "cancelled": "dim",
    "ready": "green",
    "draining": "yellow",
    "lost": "bold red",
}


def state_text(state: str) -> Text:
    return Text(state, style=STATE_STYLE.get(state, ""))


def job_state_text(job: JobOut) -> Text:
    """The job's state, with an ``idle`` marker once its GPUs were flagged idle."""
    text = state_text(job.state)
    if job.idle and job.state in ("running", "preempting"):
        text.append(" idle", style="bold yellow")
    return text


def when(at: float | None) -> str:
    """A local date and time; total: a time no calendar holds reads as its epoch seconds."""
    if at is None:
        return "-"
    try:
        return datetime.fromtimestamp(at).strftime("%Y-%m-%d %H:%M:%S")
    except (OverflowError, OSError, ValueError):
        return f"{at:.6g} (epoch seconds)"


def _estimate(start: float | None, now: float) -> str:
    if start is None:
        return "- (no estimate)"
    return f"{eta(start, now)} ({when(start)}, if running jobs end as estimated)"


def _elapsed(job: JobOut, now: float) -> str:
    if job.started_at is None and job.state in ("running", "preempting"):
        return "starting"
    if job.started_at is None:
        return format_duration((job.ended_at or now) - job.submitted_at) + " wait"
    return format_duration((job.ended_at or now) - job.started_at)


def eta(start: float | None, now: float) -> str:
    """An estimated start as ``~in 1h20m`` (``~now`` when due, ``-`` when unknown)."""
    if start is None:
        return "-"
    return "~now" if start <= now else f"~in {format_duration(start - now)}"


def array_label(array: ArrayOut, throttle: bool = False) -> str:
    """A whole array as squeue names it: ``12_[0-99]`` (``throttle``: ``12_[0-99%4]``)."""
    if array.count == 1 and not throttle:
        return f"{array.job_id}_{array.tasks}"
    limit = f"%{array.max_running}" if throttle and array.max_running is not None else ""
    return f"{array.job_id}_[{array.tasks}{limit}]"


def _is_array_row(job: JobOut) -> bool:
    """A row standing for a whole array (``GET /jobs?group_arrays=true``)."""
    return job.array is not None and job.array_task_id is None


def jobs_table(jobs: list[JobOut], now: float) -> Table:
    table = Table(box=None, header_style="bold", pad_edge=False)
    columns = ("ID", "NAME", "QUEUE", "USER", "STATE", "PRIO", "SHAPE", "GPUS", "TIME", "START")
    for col in columns:
        table.add_column(col, no_wrap=True)
    table.add_column("REASON / NODES", overflow="fold")
    for job in jobs:
        if _is_array_row(job) and job.array is not None:
            detail = state_counts(job.array.states)
        elif job.state == "pending":
            detail = f"#{job.position} {job.reason or ''}" if job.position else job.reason or ""
        elif job.state in ("running", "preempting"):
            detail = ", ".join(dict.fromkeys(t.node for t in job.tasks))
        else:
            detail = job.reason or ""
        table.add_row(
            array_label(job.array, throttle=True)
            if _is_array_row(job) and job.array is not None
            else job.ref,
            Text(job.name or "-"),
            Text(job.queue),
            job.user,
            job_state_text(job),
            job.priority_class or str(job.priority),
            f"{job.nodes}x{job.tasks_per_node}" if not job.roles else f"{len(job.roles)} roles",
            job.manifest.get("resources", {}).get("tpu") or f"{job.total_gpus:g}",
            _elapsed(job, now),
            eta(job.estimated_start, now) if job.state == "pending" else "-",
            Text(detail),
        )
    return table


def job_panel(job: JobOut, now: float, advice: list[str] | None = None) -> Group:
    """One job; ``advice``: what would let it start sooner (for a pending job)."""
    command = job.manifest.get("command")
    command = command if isinstance(command, str) else shlex.join(command or [])
    info = Table.grid(padding=(0, 2))
    info.add_column(style="bold")
    info.add_column(overflow="fold")
    rows = [
        ("State", job_state_text(job)),
        ("Reason", Text(job.reason or "-")),
        *([("Depends on", Text(job.dependency))] if job.dependency else []),
        *([("Held", "yes (corral release to let it run)")] if job.held else []),
        *([("Array", _array_summary(job.array))] if job.array is not None else []),
        *([("Est. start", _estimate(job.estimated_start, now))] if job.state == "pending" else []),
        ("Queue", f"{job.queue} (position {job.position})" if job.position else job.queue),
        ("User", Text(job.user)),
        ("Runs as", Text(job.unix_user or "-")),
        (
            "Priority",
            f"{job.priority_class or ''} {job.priority}".strip()
            + ("" if job.preemptible else " (not preemptible)"),
        ),
        ("Kind", job.kind),
        ("Shape", _shape(job)),
        ("Command", Text(command)),
        ("Attempt", str(job.attempt)),
        ("Submitted", when(job.submitted_at)),
        ("Started", when(job.started_at)),
        ("Ended", when(job.ended_at)),
        ("Run time", "-" if job.started_at is None else _elapsed(job, now)),
    ]
    if job.exit_code is not None:
        rows.append(("Exit code", str(job.exit_code)))
    for key, value in rows:
        info.add_row(key, value)
    title = f"job {job.ref}" + (f" (id {job.id})" if job.ref != str(job.id) else "")
    parts: list = [Panel(info, title=title + (f" · {job.name}" if job.name else ""), expand=False)]
    if advice:
        hints = Table(title="To start sooner", box=None, show_header=False, title_justify="left")
        hints.add_column(overflow="fold")
        for hint in advice:
            hints.add_row(Text(f"- {hint}"))
        parts.append(hints)
    if job.tasks:
        parts.append(_placement(job))
    if job.attempts:
        attempts = Table(title="Attempts", box=None, header_style="bold", title_justify="left")
        for col in ("#", "NODES", "STARTED", "ENDED", "OUTCOME"):
            attempts.add_column(col)
        for a in job.attempts:
            attempts.add_row(
                str(a.attempt),
                ", ".join(a.nodes),
                when(a.started_at),
                when(a.ended_at),
                a.outcome or "-",
            )
        parts.append(attempts)
    if job.events:
        events = Table(title="Events", box=None, header_style="bold", title_justify="left")
        for col in ("TIME", "ATTEMPT", "TRANSITION", "REASON"):
            events.add_column(col)
        for e in job.events:
            arrow = f"{e.from_state} -> {e.to_state}" if e.from_state else e.to_state
            events.add_row(when(e.at), str(e.attempt), arrow, Text(e.reason))
        parts.append(events)
    return Group(*parts)


def _array_summary(array: ArrayOut) -> Text:
    """``12_[0-99] (at most 4 at once): pending 90, running 4, succeeded 6``."""
    limit = f" (at most {array.max_running} at once)" if array.max_running is not None else ""
    return Text(f"{array_label(array)}{limit}: {state_counts(array.states)}")


def _shape(job: JobOut) -> str | Text:
    if job.roles:  # one line per role, in rank order
        return Text("\n".join(job.roles))
    if job.manifest.get("resources", {}).get("tpu"):
        tpu = job.manifest["resources"]["tpu"]
        return f"{job.nodes} node(s) x 1 task(s), TPU slice {tpu}, one task per host"
    return f"{job.nodes} node(s) x {job.tasks_per_node} task(s), {job.gpus} GPU(s) per node"


def _placement(job: JobOut) -> Table:
    """The current attempt's tasks: where, what they hold and use, how they ended; a job
    with roles has its tasks grouped by role (a ROLE column, a rule between roles)."""
    tasks = Table(title="Placement", box=None, header_style="bold", title_justify="left")
    reasons = any(t.reason for t in job.tasks)
    roles = bool(job.roles)
    columns = ("RANK", "NODE", "LOCAL", "GPUS", "STATE", "PID", "EXIT", "PEAK MEM", "CPU TIME")
    if roles:
        columns = ("ROLE", "ROLE RANK", *columns)
    for col in (*columns, *(("REASON",) if reasons else ())):
        tasks.add_column(col, overflow="fold" if col == "REASON" else "ellipsis")
    previous = None
    for t in sorted(job.tasks, key=lambda t: t.rank):
        if roles and previous is not None and t.role != previous:
            tasks.add_section()
        previous = t.role
        gpus = ",".join(map(str, t.gpus)) or "-"
        if t.mig:
            gpus = ",".join(t.mig)
        elif t.gpu_share < 1 and t.gpus:
            gpus += f" ({t.gpu_share:g})"
        tasks.add_row(
            *((Text(t.role), str(t.role_rank)) if roles else ()),
            str(t.rank),
            t.node,
            str(t.local_rank),
            gpus,
            state_text(t.state),
            str(t.pid or "-"),
            "-" if t.exit_code is None else str(t.exit_code),
            format_size(t.peak_memory),
            "-" if t.cpu_seconds is None else cpu_time(t.cpu_seconds),
            *((Text(t.reason or "-"),) if reasons else ()),
        )
    return tasks


def cpu_time(seconds: float) -> str:
    """CPU seconds for a table: ``12.3s`` below a minute, else as a duration."""
    return f"{seconds:.1f}s" if seconds < 60 else format_duration(seconds)


def nodes_table(nodes: list[NodeOut], now: float) -> Table:
    """One row per node; a REASON column when a node is drained or lost (why: an admin, GPU
    errors, a failed prolog...)."""
    table = Table(box=None, header_style="bold", pad_edge=False)
    reasons = any(n.reason and n.state != "ready" for n in nodes)
    for col in (
        "NAME",
        "STATE",
        "GPUS (USED/TOTAL)",
        "MODEL",
        "DEVICES",
        "CPUS",
        "MEMORY",
        "NETWORK",
        "JOBS",
        "HEARTBEAT",
        *(("REASON",) if reasons else ()),
    ):
        table.add_column(col, no_wrap=col not in ("DEVICES", "JOBS", "REASON"))
    for node in nodes:
        cells = "".join(
            "■" if d.share_used >= 1 else ("◧" if d.share_used > 0 else "□") for d in node.devices
        )
        used = f"{node.gpus_used:g}/{node.gpus}"
        if node.tpu_chips:  # a TPU host: its chips, and their generation as the model
            used = f"{node.tpu_chips_used}/{node.tpu_chips} TPU"
        table.add_row(
            node.name,
            state_text(node.state),
            used,
            ", ".join(node.models) or "-",
            cells or "-",
            f"{node.cpus:g}",
            format_size(node.memory),
            "/".join(node.network) or "-",
            ", ".join(map(str, node.jobs)) or "-",
            "-"
            if node.last_heartbeat is None
            else format_duration(now - node.last_heartbeat) + " ago",
            *((Text((node.reason or "-") if node.state != "ready" else "-"),) if reasons else ()),
        )
    return table


def queues_table(queues: list[QueueOut]) -> Table:
    table = Table(box=None, header_style="bold", pad_edge=False)
    columns = ("QUEUE", "WEIGHT", "QUOTA", "COHORT", "GPUS USED", "BORROWED", "SHARE")
    for col in (*columns, "RUNNING", "PENDING"):
        table.add_column(col, justify="right" if col in ("GPUS USED", "SHARE") else "left")
    for q in queues:
        quota = ", ".join(f"{k}={v:g}" for k, v in q.quota.items()) or "unlimited"
        if q.borrowing_limit:
            quota += " (borrow <= " + ", ".join(f"{v:g}" for v in q.borrowing_limit.values()) + ")"
        borrowed = ", ".join(f"{k}={v:g}" for k, v in q.borrowed.items()) or "-"
        table.add_row(
            q.name,
            f"{q.weight:g}",
            quota,
            q.cohort or "-",
            f"{q.gpus_used:g}",
            borrowed,
            f"{q.share:.1%}",
            str(q.running),
            str(q.pending),
        )
    return table


def tokens_table(tokens: list[TokenOut]) -> Table:
    table = Table(box=None, header_style="bold", pad_edge=False)
    for col in ("ID", "USER", "UNIX USER", "ROLE", "CREATED", "REVOKED"):
        table.add_column(col)
    for t in tokens:
        table.add_row(
            str(t.id),
            Text(t.user),
            Text(t.unix_user or t.user) if t.role in ("admin", "user") else Text("-"),
            t.role,
            when(t.created_at),
            when(t.revoked_at),
        )
    return table


def replicas_table(replicas: list[ReplicaHealth]) -> Table:
    table = Table("SERVER", "STATUS", "VERSION", "ROLE", "LEADER", "EPOCH", box=None)
    for r in replicas:
        h = r.health
        if h is None:
            table.add_row(r.address, Text("unreachable", style="red"), "", "", "", "")
            continue
        role = Text("leader", style="bold green") if h.leader else Text("follower")
        leader = h.leader_address or Text("none (election pending)", style="yellow")
        epoch = "" if h.leader_epoch is None else str(h.leader_epoch)
        table.add_row(r.address, h.status, h.version, role, leader, epoch)
    return table


def audit_table(entries: list[AuditOut]) -> Table:
    table = Table(box=None, header_style="bold", pad_edge=False)
    for col in ("TIME", "USER", "ROLE", "TOKEN", "METHOD", "PATH", "TARGET", "STATUS"):
        table.add_column(col)
    for e in entries:
        table.add_row(
            when(e.at),
            e.user or "-",
            e.role or "-",
            "-" if e.token_id is None else str(e.token_id),
            e.method,
            e.path,
            e.target or "-",
            str(e.status),
        )
    return table
