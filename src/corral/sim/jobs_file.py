"""The simulator's jobs file (SPEC section 5): a YAML or JSON list of manifests, each with
``submit_time`` and ``duration`` (seconds, or strings such as ``15m``) and optionally
``checkpoint_interval`` and ``user`` (who submits it: ``SimJob.user``). A ``dependency``
names other jobs of the file by ``name`` (``afterok:prep``); ``hold`` is refused (nothing
would release the job). An entry with ``array`` (``0-9%2``) is a job array: one job per
index, named ``{name}_{index}``, each with the entry's duration; a dependency on the
entry's name waits for all of them, on ``{name}_{index}`` for one."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import yaml

from corral.core.array import parse_array
from corral.core.dependency import parse_dependency
from corral.core.units import parse_duration
from corral.errors import ValidationError
from corral.schemas.manifest import parse_manifest
from corral.sim.workload import ArrayElement, NodeEvent, NodeEventKind, SimJob, Workload

SIM_KEYS = ("submit_time", "duration", "checkpoint_interval")
USER_KEY = "user"  # not a manifest key: the server takes the user from the token
PLACEHOLDER_COMMAND = "simulated"


def load_jobs(text: str, source: str = "jobs file") -> Workload:
    """Parse and validate a jobs file; errors name the entry and the field."""
    try:
        data: Any = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValidationError(f"{source}: not valid YAML or JSON: {exc}") from None
    events: Any = []
    if isinstance(data, dict):
        unknown = sorted(set(data) - {"jobs", "node_events"})
        if unknown:
            raise ValidationError(f"{source}: unknown keys {unknown} (expected jobs, node_events)")
        events, data = data.get("node_events") or [], data.get("jobs")
    if not isinstance(data, list):
        raise ValidationError(f"{source}: expected a list of jobs (or a mapping with jobs:)")
    jobs = [job for i, entry in enumerate(data) for job in _job(entry, i, source)]
    arrays: dict[str, list[str]] = {}  # array name -> its elements' names
    for job in jobs:
        if job.array is not None:
            arrays.setdefault(job.array.name, []).append(job.name)
    names = [j.name for j in jobs] + list(arrays)
    dupes = sorted(name for name, count in Counter(names).items() if count > 1)
    if dupes:
        raise ValidationError(f"{source}: job names must be unique; repeated: {', '.join(dupes)}")
    _check_dependencies(jobs, arrays, source)
    jobs.sort(key=_order)
    if not isinstance(events, list):
        raise ValidationError(f"{source}: node_events: expected a list")
    node_events = sorted(
        (_node_event(e, i, source) for i, e in enumerate(events)), key=lambda e: e.time
    )
    return Workload(jobs=tuple(jobs), node_events=tuple(node_events), source=source)


def _node_event(entry: Any, index: int, source: str) -> NodeEvent:
    """``{time: 1h, node: gpu-03, kind: fail}`` (kind: fail or recover)."""
    where = f"{source}: node_events.{index}"
    if not isinstance(entry, dict) or set(entry) != {"time", "node", "kind"}:
        raise ValidationError(f"{where}: expected {{time, node, kind: fail|recover}}")
    try:
        return NodeEvent(
            parse_duration(entry["time"]), str(entry["node"]), NodeEventKind(entry["kind"])
        )
    except ValueError as exc:
        raise ValidationError(f"{where}: {exc}") from None


def _order(job: SimJob) -> tuple:
    """Submission order: by time, then name (an array's elements by index)."""
    if job.array is None:
        return (job.submit_time, job.name, -1)
    return (job.submit_time, job.array.name, job.array.task)


def _job(entry: Any, index: int, source: str) -> list[SimJob]:
    where = f"{source}: job {index}"
    if not isinstance(entry, dict):
        raise ValidationError(f"{where}: expected a mapping")
    manifest = {k: v for k, v in entry.items() if k not in SIM_KEYS and k != USER_KEY}
    name = str(manifest.setdefault("name", f"job-{index}"))
    where = f"{source}: job {index} ({name})"
    manifest.setdefault("command", PLACEHOLDER_COMMAND)
    times: dict[str, float | None] = {}
    for key in SIM_KEYS:
        value = entry.get(key)
        if value is None:
            if key != "checkpoint_interval":
                raise ValidationError(f"{where}: {key}: field required")
            times[key] = None
            continue
        try:
            times[key] = parse_duration(value)
        except ValueError as exc:
            raise ValidationError(f"{where}: {key}: {exc}") from None
    if times["checkpoint_interval"] is not None and times["checkpoint_interval"] <= 0:
        raise ValidationError(f"{where}: checkpoint_interval: must be positive")
    if manifest.get("hold"):
        raise ValidationError(f"{where}: hold: nothing releases a simulated job; leave it out")
    try:
        parsed = parse_manifest(manifest)
        spec = parsed.to_spec()
    except ValidationError as exc:
        raise ValidationError(f"{where}: {exc.message.removeprefix('manifest: ')}") from None
    user = entry.get(USER_KEY)
    if user is not None and (not isinstance(user, str) or not user.strip()):
        raise ValidationError(f"{where}: {USER_KEY}: expected a user name")
    job = SimJob(
        name=name,
        spec=spec,
        submit_time=float(times["submit_time"] or 0.0),
        duration=float(times["duration"] or 0.0),
        checkpoint_interval=times["checkpoint_interval"],
        user=user.strip() if user else None,
        dependency=parse_dependency(parsed.dependency) if parsed.dependency else None,
    )
    if not parsed.array:
        return [job]
    array = parse_array(parsed.array)
    return [
        replace(job, name=f"{name}_{task}", array=ArrayElement(name, task, array.max_running))
        for task in array.indices
    ]


def _check_dependencies(jobs: list[SimJob], arrays: dict[str, list[str]], source: str) -> None:
    """Every job a dependency names is in the file, and none depends on itself, even
    through others (names may point forward, so cycles are possible here). An array's
    name stands for all its elements."""
    graph: dict[str, Sequence[str]] = {
        j.name: j.dependency.refs if j.dependency else () for j in jobs
    }
    graph.update(arrays)
    for name, refs in graph.items():
        missing = [r for r in refs if r not in graph]
        if missing:
            raise ValidationError(
                f"{source}: job {name}: dependency: no job named {missing[0]!r} in the file"
            )
    done: set[str] = set()
    for start in graph:
        path: list[str] = []
        stack = [(start, iter(graph[start]))]
        on_path = {start}
        path.append(start)
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                stack.pop()
                on_path.discard(path.pop())
                done.add(node)
            elif child in on_path:
                cycle = " -> ".join([*path[path.index(child) :], child])
                raise ValidationError(f"{source}: dependency cycle: {cycle}")
            elif child not in done:
                stack.append((child, iter(graph[child])))
                on_path.add(child)
                path.append(child)
