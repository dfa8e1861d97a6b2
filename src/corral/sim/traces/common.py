"""What the trace readers share: reading tables, parsing fields and options, shaping jobs.

Every problem with a trace is a ``ValidationError`` with one line that names the file,
the line where there is one, and what was expected: ``jobs.csv:7: num_gpus: expected a
number >= 0, got 'x'``.
"""

from __future__ import annotations

import csv
import io
import math
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from corral.core.node import Device, Node
from corral.core.resources import model_matches
from corral.errors import ValidationError
from corral.schemas.manifest import parse_manifest
from corral.sim.workload import SimJob, Workload

GPUS_PER_NODE = 8
MIB = 1024**2
GIB = 1024**3
GB = 1000**3
DEFAULT_QUEUE = "default"
NO_QUEUE = "none"  # the ``queue=none`` option: every job in the default queue

# Device memory of the GPU models the public traces name; the traces do not say it.
# Models not listed get 0 (only requests with ``gpu_memory`` look at it).
GPU_MEMORY = {
    "a10": 24 * GIB,
    "p100": 16 * GIB,
    "t4": 16 * GIB,
    "v100": 16 * GIB,
    "v100m16": 16 * GIB,
    "v100m32": 32 * GIB,
}


def fail(path: Path, message: str, line: int | None = None) -> ValidationError:
    """The error for a problem in ``path`` (at ``line``), to raise."""
    where = f"{path}:{line}" if line is not None else f"{path}"
    return ValidationError(f"{where}: {message}")


# -- files and rows -------------------------------------------------------------------


def check_file(path: Path, what: str) -> Path:
    """``path`` if it is a readable file, else a ``ValidationError`` naming ``what``."""
    if not path.exists():
        raise ValidationError(f"{what}: file not found: {path}")
    if not path.is_file():
        raise ValidationError(f"{what}: not a file: {path}")
    return path


def read_text(path: Path, what: str) -> str:
    check_file(path, what)
    try:
        return path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise fail(path, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise ValidationError(f"{what}: cannot read {path}: {exc.strerror}") from None


@dataclass(frozen=True)
class Row:
    """One data row of a table: its line number in the file and its fields by column."""

    path: Path
    line: int
    fields: Mapping[str, str]

    def get(self, column: str | None) -> str:
        """The stripped field of ``column``; "" when the table has no such column."""
        return self.fields.get(column, "").strip() if column else ""

    def error(self, column: str, expected: str) -> ValidationError:
        return fail(
            self.path, f"{column}: expected {expected}, got {self.get(column)!r}", self.line
        )


def normalize(column: str) -> str:
    return column.strip().lower().replace(" ", "_").replace("-", "_")


def read_table(
    path: Path,
    what: str,
    *,
    columns: Sequence[str] | None = None,
    delimiter: str = ",",
) -> tuple[list[str], Iterator[Row]]:
    """The header and the rows of a CSV file.

    With ``columns``, the file has no header row (the PAI tables): the fields are named by
    ``columns``, and a first row that repeats them is skipped. Column names are compared
    in lower case with spaces and dashes as underscores. Blank lines are ignored; a row
    with the wrong number of fields is an error.
    """
    text = read_text(path, what)
    quoting = csv.QUOTE_NONE if delimiter == "\t" else csv.QUOTE_MINIMAL
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, quoting=quoting)
    if columns is None:
        header = next(reader, None)
        if not header:
            raise fail(path, "empty file: expected a header row")
        names = [normalize(c) for c in header]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise fail(path, f"header repeats column {dupes[0]!r}", 1)
    else:
        names = list(columns)
    return names, _rows(path, reader, names, headerless=columns is not None)


def _rows(path: Path, reader: Any, names: list[str], headerless: bool) -> Iterator[Row]:
    first = True
    try:
        for fields in reader:
            if not fields or (len(fields) == 1 and not fields[0].strip()):
                continue
            if first and headerless and [normalize(f) for f in fields] == names:
                first = False
                continue
            first = False
            if len(fields) != len(names):
                raise fail(
                    path,
                    f"expected {len(names)} fields ({','.join(names)}), got {len(fields)}",
                    reader.line_num,
                )
            yield Row(path, reader.line_num, dict(zip(names, fields, strict=True)))
    except csv.Error as exc:
        raise fail(path, f"not valid CSV: {exc}", reader.line_num) from None


def find_column(header: Sequence[str], aliases: Sequence[str], path: Path) -> str:
    """The first of ``aliases`` that the header has; an error naming them if none."""
    found = maybe_column(header, aliases)
    if found is None:
        also = f" (or {', '.join(aliases[1:])})" if len(aliases) > 1 else ""
        raise fail(path, f"header has no {aliases[0]!r} column{also}; it has {','.join(header)}", 1)
    return found


def maybe_column(header: Sequence[str], aliases: Sequence[str]) -> str | None:
    """The first of ``aliases`` that the header has, or None."""
    return next((a for a in aliases if a in header), None)


def queue_column(
    options: Mapping[str, str], header: Sequence[str], defaults: Sequence[str], path: Path
) -> str | None:
    """The column that names each job's queue: option ``queue=COLUMN``, else the first of
    ``defaults`` present; ``queue=none``: no column (every job in ``default``)."""
    chosen = options.get("queue")
    if chosen is None:
        return maybe_column(header, defaults)
    if chosen == NO_QUEUE:
        return None
    if normalize(chosen) not in header:
        raise fail(path, f"option queue={chosen}: the header has no such column", 1)
    return normalize(chosen)


# -- fields ---------------------------------------------------------------------------


def number(
    row: Row,
    column: str,
    *,
    minimum: float = 0.0,
    whole: bool = False,
    default: float | None = None,
) -> float:
    """A finite number >= ``minimum`` (a whole one if ``whole``); ``default`` when empty."""
    text = row.get(column)
    kind = f"a whole number >= {minimum:g}" if whole else f"a number >= {minimum:g}"
    if not text or text.lower() in ("nan", "null", "none"):
        if default is None:
            raise row.error(column, kind)
        return default
    try:
        value = float(text)
    except ValueError:
        raise row.error(column, kind) from None
    if not math.isfinite(value) or value < minimum or (whole and value != int(value)):
        raise row.error(column, kind)
    return value


def optional_number(row: Row, column: str | None, *, whole: bool = False) -> float | None:
    """``number`` for a column that may be missing or empty (then None)."""
    if column is None or row.get(column).lower() in ("", "nan", "null", "none"):
        return None
    return number(row, column, whole=whole)


def timestamp(row: Row, column: str) -> float | None:
    """Seconds: a number, or a date-time (``2020-04-01 08:00:00``, read as UTC); None if empty."""
    text = row.get(column)
    if not text or text.lower() in ("nan", "null", "none", "nat"):
        return None
    try:
        value = float(text)
    except ValueError:
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            raise row.error(column, "seconds or a date-time such as 2020-04-01 08:00:00") from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return moment.timestamp()
    if not math.isfinite(value):
        raise row.error(column, "seconds or a date-time such as 2020-04-01 08:00:00")
    return value


# -- options --------------------------------------------------------------------------


def option_error(fmt: str, key: str, expected: str, value: str) -> ValidationError:
    return ValidationError(f"{fmt} trace: option {key}: expected {expected}, got {value!r}")


def int_option(fmt: str, options: Mapping[str, str], key: str, default: int) -> int:
    value = options.get(key)
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise option_error(fmt, key, "a whole number >= 1", value)
    return number


def float_option(fmt: str, options: Mapping[str, str], key: str, default: float) -> float:
    value = options.get(key)
    if value is None:
        return default
    try:
        number = float(value)
    except ValueError:
        number = -1.0
    if not math.isfinite(number) or number < 0:
        raise option_error(fmt, key, "a number of seconds >= 0", value)
    return number


def choice_option(
    fmt: str, options: Mapping[str, str], key: str, choices: Sequence[str], default: str
) -> str:
    value = options.get(key, default)
    if value not in choices:
        raise option_error(fmt, key, " or ".join(choices), value)
    return value


def path_option(options: Mapping[str, str], key: str, beside: Path, default: str) -> Path | None:
    """The path in option ``key``, else ``default`` next to ``beside`` when that exists.

    ``key=none`` means no file. A path named in the option must exist (the caller checks);
    the default one is used only if it is there.
    """
    value = options.get(key)
    if value is not None:
        return None if value == "none" else Path(value).expanduser()
    candidate = beside.parent / default
    return candidate if candidate.is_file() else None


def states_option(options: Mapping[str, str]) -> frozenset[str] | None:
    """``states=COMPLETED,FAILED``: keep only jobs in these states (case-insensitive)."""
    value = options.get("states")
    if value is None:
        return None
    return frozenset(s.strip().lower() for s in value.split(",") if s.strip())


# -- jobs -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Shape:
    """Per-node GPUs of a job over ``nodes`` nodes; ``rounded``: more GPUs than asked."""

    nodes: int
    gpus: int | float
    rounded: bool = False


def gang(total: float, gpus_per_node: int, nodes: int | None = None) -> Shape:
    """How ``total`` GPUs become ``nodes`` x per-node GPUs.

    A fraction below one GPU stays a fraction on one node. Above one, the count is whole
    (a fraction above one rounds up). Without ``nodes``: one node up to ``gpus_per_node``
    GPUs, else ``ceil(total / gpus_per_node)`` nodes. The GPUs are split evenly; where they
    do not divide, each node gets the rounded-up share (so at most ``nodes - 1`` extra
    GPUs), which ``rounded`` reports.
    """
    if total <= 0:
        return Shape(nodes or 1, 0)
    if total < 1 and (nodes is None or nodes == 1):
        milli = max(1, round(total * 1000))
        if milli < 1000:
            return Shape(1, milli / 1000, rounded=milli / 1000 > total + 1e-9)
        return Shape(1, 1, rounded=total + 1e-9 < 1)
    count = math.ceil(total - 1e-9)
    rounded = count > total + 1e-9
    if nodes is None:
        nodes = max(1, math.ceil(count / gpus_per_node))
    per_node = math.ceil(count / nodes)
    return Shape(nodes, per_node, rounded=rounded or per_node * nodes != count)


class Names:
    """Unique job names: a repeated name gets ``-2``, ``-3``... in the order seen."""

    def __init__(self) -> None:
        self._seen: set[str] = set()

    def claim(self, name: str) -> str:
        unique, n = name, 1
        while unique in self._seen:
            n += 1
            unique = f"{name}-{n}"
        self._seen.add(unique)
        return unique


@dataclass
class JobMaker:
    """Builds ``SimJob`` values through the manifest model (so validation is the server's).

    ``submit_time`` is the trace's own (absolute) time; :meth:`workload` makes it relative
    to the first submission. Also keeps the tallies for the workload's ``source`` text:
    rows skipped by reason and notes on adjustments.
    """

    fmt: str
    path: Path
    names: Names = field(default_factory=Names)
    jobs: list[SimJob] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)
    notes: Counter[str] = field(default_factory=Counter)

    def add(
        self,
        row: Row | None,
        *,
        name: str,
        submit: float,
        duration: float,
        queue: str = DEFAULT_QUEUE,
        shape: Shape = Shape(1, 0),
        gpu_model: str | None = None,
        cpus: float | None = None,
        memory: float | None = None,
        user: str | None = None,
        command: str | None = None,
    ) -> SimJob:
        """One job; ``cpus`` and ``memory`` (bytes) are per node; ``user`` who submitted it
        (an empty one is None); ``command`` what it ran, when the trace says (run-time
        predictions look at it; default ``trace:<name>``)."""
        name = self.names.claim(name)
        resources: dict[str, object] = {"gpus": shape.gpus}
        if gpu_model and shape.gpus:
            resources["gpu_model"] = gpu_model
        if cpus is not None:
            resources["cpus"] = round(cpus, 3)
        if memory is not None:
            resources["memory"] = int(memory)
        manifest = {
            "name": name,
            "queue": queue or DEFAULT_QUEUE,
            "nodes": shape.nodes,
            "resources": resources,
            "command": command or f"trace:{name}",
        }
        try:
            spec = parse_manifest(manifest).to_spec()
        except ValidationError as exc:
            detail = exc.message.removeprefix("manifest: ")
            raise fail(self.path, f"job {name!r}: {detail}", row.line if row else None) from None
        if shape.rounded:
            self.notes["GPU requests rounded up to whole GPUs per node"] += 1
        job = SimJob(
            name=name,
            spec=spec,
            submit_time=submit,
            duration=max(0.0, duration),
            user=user or None,
        )
        self.jobs.append(job)
        return job

    def skip(self, reason: str) -> None:
        self.skipped[reason] += 1

    def span(
        self, start: float | None, end: float | None, no_start: str = "no start time"
    ) -> float | None:
        """``end - start``, or None after counting why the row is skipped."""
        if start is None:
            self.skip(no_start)
        elif end is None:
            self.skip("no end time")
        elif end < start:
            self.skip("ends before it starts")
        else:
            return end - start
        return None

    def workload(
        self,
        rows: int,
        unit: str = "rows",
        nodes: Sequence[Node] | None = None,
        extra: str = "",
        *,
        untimed: str | None = None,
    ) -> Workload:
        """The jobs sorted by (submit time, name), times relative to the first submission.

        ``untimed``: why the submit and run times are made up (the workload is then not
        ``timed``, and this is its note). Otherwise, where every job submits at the same
        moment, a note says the trace is one batch.
        """
        start = min((j.submit_time for j in self.jobs), default=0.0)
        jobs = [replace(j, submit_time=j.submit_time - start) if start else j for j in self.jobs]
        jobs.sort(key=lambda j: (j.submit_time, j.name))
        text = f"{self.fmt} {self.path.name}: {len(jobs)} jobs from {rows} {unit}"
        if self.skipped:
            reasons = ", ".join(f"{r}: {n}" for r, n in sorted(self.skipped.items()))
            text += f", {self.skipped.total()} skipped ({reasons})"
        for note, n in sorted(self.notes.items()):
            text += f"; {n} {note}"
        if extra:
            text += f"; {extra}"
        notes: tuple[str, ...] = ()
        if untimed:
            notes = (untimed,)
        elif len(jobs) > 1 and jobs[0].submit_time == jobs[-1].submit_time:
            notes = (
                f"all {len(jobs)} jobs of {self.path.name} submit at the same moment (one "
                "batch): wait and JCT count the time spent behind the jobs of the batch",
            )
        return Workload(
            jobs=tuple(jobs),
            nodes=tuple(nodes) if nodes is not None else None,
            source=text,
            timed=untimed is None,
            notes=notes,
        )


def make_node(name: str, gpus: int, model: str, cpus: float, memory: int) -> Node:
    """A node with ``gpus`` devices of ``model`` (memory from ``GPU_MEMORY``, else 0)."""
    device_memory = GPU_MEMORY.get(model.lower(), 0)
    return Node(
        name=name,
        devices=tuple(Device(index=i, model=model, memory=device_memory) for i in range(gpus)),
        cpus=cpus,
        memory=memory,
    )


def cluster_gpus_per_node(nodes: Iterable[Node]) -> int | None:
    """The GPUs per node that a trace's gangs should be cut to on ``nodes``: the count of
    the GPU nodes when they all have the same, else the largest count (a job that spans
    nodes then fits the biggest ones; on the smaller ones it may not fit, and is refused
    as on a real cluster). Whole GPUs only: TPU chips and GPUs in MIG mode do not count.
    None without GPU nodes."""
    counts = {c for c in (n.capacity(None) for n in nodes) if c}
    return max(counts) if counts else None


def cluster_summary(path: Path, nodes: Sequence[Node]) -> str:
    gpus = sum(n.gpu_count for n in nodes)
    models = sorted({d.model for n in nodes for d in n.devices})
    return f"cluster {path.name}: {len(nodes)} nodes, {gpus} GPUs ({', '.join(models) or 'none'})"


# -- GPU model constraints ------------------------------------------------------------

_PLAIN = set("*?[]!")


def model_glob(allowed: Iterable[str], universe: Iterable[str]) -> tuple[str | None, bool]:
    """One ``model_matches`` pattern for "any of ``allowed``", and whether it is exact.

    Exact means: among the models the trace knows of (``universe``, plus ``allowed``), the
    pattern matches the allowed ones and no other. A glob has no alternation, so this
    tries a few shapes (the name itself, a common prefix or suffix, character classes on
    the first, last or every position, a negated class) and keeps the first exact one.
    None when every known model is allowed. Where nothing is exact, the first allowed
    model (the request is narrowed, never widened) with ``False``.
    """
    wanted = list(dict.fromkeys(m.strip() for m in allowed if m.strip()))
    if not wanted:
        return None, True
    known = {m.strip().lower(): m.strip() for m in universe if m.strip()}
    known.update((m.lower(), m) for m in wanted)
    target = {m.lower() for m in wanted}
    if target == set(known):
        return None, True
    others = [m for low, m in known.items() if low not in target]
    for pattern in _candidates(wanted, others):
        if {m for m in known if model_matches(m, pattern)} == target:
            return pattern, True
    return wanted[0], False


def _candidates(wanted: list[str], others: list[str]) -> Iterator[str]:
    if len(wanted) == 1 and not _PLAIN & set(wanted[0]):
        yield wanted[0]
    prefix = _common_prefix(wanted)
    suffix = _common_prefix([w[::-1] for w in wanted])[::-1]
    if prefix and not _PLAIN & set(prefix):
        yield f"{prefix}*"
    if suffix and not _PLAIN & set(suffix):
        yield f"*{suffix}"
    first = _char_class({w[0] for w in wanted})
    last = _char_class({w[-1] for w in wanted})
    if first:
        yield f"{first}*"
    if last:
        yield f"*{last}"
    shortest = min(len(w) for w in wanted)
    if first and last and shortest >= 2:
        yield f"{first}*{last}"
    positions = [_char_class({w[i] for w in wanted}) for i in range(shortest)]
    if None not in positions:
        same_length = all(len(w) == shortest for w in wanted)
        yield "".join(filter(None, positions)) + ("" if same_length else "*")
    not_first = _char_class({o[0] for o in others}, negate=True)
    not_last = _char_class({o[-1] for o in others}, negate=True)
    if not_first:
        yield f"{not_first}*"
    if not_last:
        yield f"*{not_last}"


def _common_prefix(words: list[str]) -> str:
    prefix = words[0]
    for word in words[1:]:
        while not word.startswith(prefix):
            prefix = prefix[:-1]
    return prefix


def _char_class(chars: set[str], negate: bool = False) -> str | None:
    """``[abc]`` (``[!abc]`` negated) of alphanumeric characters; a single one bare."""
    if not chars or not all(c.isalnum() for c in chars):
        return None
    body = "".join(sorted({c.upper() for c in chars}))
    if negate:
        return f"[!{body}]"
    return body if len(body) == 1 else f"[{body}]"
