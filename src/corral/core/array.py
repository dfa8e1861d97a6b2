"""Job arrays in Slurm's syntax (``0-99``, ``1,3,5-9:2``, ``0-15%4``), element names
(``12_3``) and the throttle: pure functions, shared by the control plane and the simulator.

An array spec is comma-separated items, each an index ``N``, a range ``A-B`` or a stepped
range ``A-B:S``, optionally followed by ``%MAX``: at most MAX elements run at once.
Indices are 0..``MAX_INDEX``, at most ``MAX_ELEMENTS`` per array; repeats are dropped,
the order does not matter. :func:`format_indices` writes indices back compactly, so
that ``parse_array(str(spec)) == spec``.

Each element is a job of its own; the array's id is its first element's job id, and
element ``ID_INDEX`` is the one of index INDEX (:func:`parse_job_ref`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache

MAX_INDEX = 999_999  # the largest index (Slurm: MaxArraySize - 1, 1000 by default)
MAX_ELEMENTS = 100_000  # elements one array may have
MAX_SPEC_LENGTH = 10_000  # characters of a spec
MAX_JOB_ID = 2**63 - 1  # what the database stores

_ITEM = re.compile(r"(\d{1,12})(?:-(\d{1,12})(?::(\d{1,12}))?)?")
_REF = re.compile(r"(\d{1,19})(?:_(\d{1,9}))?")


@dataclass(frozen=True)
class ArraySpec:
    """An array's indices (sorted, unique) and its throttle (None: none)."""

    indices: tuple[int, ...]
    max_running: int | None = None

    @property
    def count(self) -> int:
        return len(self.indices)

    @property
    def min(self) -> int:
        return self.indices[0]

    @property
    def max(self) -> int:
        return self.indices[-1]

    @property
    def step(self) -> int:
        """The distance between neighbouring indices when they are evenly spaced (``1-7:2``:
        2), else 1, as ``SLURM_ARRAY_TASK_STEP``."""
        xs = self.indices
        if len(xs) < 2:
            return 1
        step = xs[1] - xs[0]
        return step if all(b - a == step for a, b in zip(xs, xs[1:], strict=False)) else 1

    @property
    def tasks(self) -> str:
        """The indices, compact (``0-99``, ``1,3,5-9:2``), without the throttle."""
        return format_indices(self.indices)

    def __str__(self) -> str:
        throttle = f"%{self.max_running}" if self.max_running is not None else ""
        return self.tasks + throttle


def parse_array(text: str) -> ArraySpec:
    """Parse a spec; ``ValueError`` naming the bad part."""
    text = text.strip()
    if not text:
        raise ValueError("empty array spec (expected e.g. 0-99, 1,3,5-9:2 or 0-15%4)")
    if len(text) > MAX_SPEC_LENGTH:
        raise ValueError(f"array spec longer than {MAX_SPEC_LENGTH} characters")
    body, percent, throttle = text.partition("%")
    max_running = None
    if percent:
        if not throttle.strip().isdigit():
            raise ValueError(f"%{throttle}: the throttle must be a number of elements, e.g. %4")
        max_running = int(throttle)
        if max_running < 1:
            raise ValueError(f"%{throttle}: the throttle must be at least 1")
    found: set[int] = set()
    for item in body.split(","):
        found.update(_item(item.strip()))
        if len(found) > MAX_ELEMENTS:
            raise ValueError(f"more than {MAX_ELEMENTS} elements; at most {MAX_ELEMENTS} per array")
    return ArraySpec(tuple(sorted(found)), max_running)


def _item(item: str) -> range:
    match = _ITEM.fullmatch(item)
    if match is None:
        raise ValueError(
            f"{item!r} is not an index, a range A-B or A-B:STEP (e.g. 0-99, 1,3,5-9:2, 0-15%4)"
        )
    start = int(match[1])
    end = int(match[2]) if match[2] is not None else start
    step = int(match[3]) if match[3] is not None else 1
    if step < 1:
        raise ValueError(f"{item}: the step must be at least 1")
    if end < start:
        raise ValueError(f"range {item} is empty: the end is below the start")
    if end > MAX_INDEX:
        raise ValueError(f"{item}: index {end} is past the largest, {MAX_INDEX}")
    elements = range(start, end + 1, step)
    if len(elements) > MAX_ELEMENTS:
        raise ValueError(f"{item}: {len(elements)} elements; at most {MAX_ELEMENTS} per array")
    return elements


@lru_cache(maxsize=1024)
def parsed_array(text: str) -> ArraySpec:
    """A stored (already validated) spec, memoized."""
    return parse_array(text)


def format_indices(indices: Iterable[int]) -> str:
    """Indices written compactly: runs of neighbours as ``A-B``, evenly spaced runs of
    three or more as ``A-B:S``, the rest one by one (``0,2,4,7,8`` -> ``0-4:2,7-8``)."""
    xs = sorted(set(indices))
    parts: list[str] = []
    i = 0
    while i < len(xs):
        j = i
        if i + 1 < len(xs):
            step = xs[i + 1] - xs[i]
            while j + 1 < len(xs) and xs[j + 1] - xs[j] == step:
                j += 1
            if step == 1 or j - i >= 2:
                parts.append(f"{xs[i]}-{xs[j]}" + (f":{step}" if step > 1 else ""))
                i = j + 1
                continue
        parts.append(str(xs[i]))
        i += 1
    return ",".join(parts)


def element_name(array_job_id: int, task_id: int) -> str:
    """``12_3``: element 3 of array 12."""
    return f"{array_job_id}_{task_id}"


def parse_job_ref(text: str) -> tuple[int, int | None]:
    """``"12"`` -> ``(12, None)`` (a job, or a whole array); ``"12_3"`` -> ``(12, 3)``
    (element 3 of array 12). ``ValueError`` for anything else."""
    match = _REF.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"{text!r} is not a job id (12) or an array element (12_3)")
    job_id = int(match[1])
    if not 1 <= job_id <= MAX_JOB_ID:
        raise ValueError(f"{text!r}: job ids are 1..{MAX_JOB_ID}")
    return job_id, int(match[2]) if match[2] is not None else None


# -- the throttle ----------------------------------------------------------------------


@dataclass(frozen=True)
class Element:
    """A pending element as the throttle sees it."""

    job_id: int
    array_job_id: int
    task_id: int
    max_running: int


def throttle(pending: Iterable[Element], running: Mapping[int, int]) -> dict[int, str]:
    """The pending elements a throttle holds back (job id -> reason): of each throttled
    array, all but its ``max_running - running`` lowest-index pending elements, where
    ``running`` counts each array's running (or preempting) elements."""
    by_array: dict[int, list[Element]] = {}
    for element in pending:
        by_array.setdefault(element.array_job_id, []).append(element)
    blocked: dict[int, str] = {}
    for array_id, elements in by_array.items():
        limit = elements[0].max_running
        room = max(0, limit - running.get(array_id, 0))
        if len(elements) <= room:
            continue
        elements.sort(key=_task_id)
        reason = throttle_reason(array_id, limit)
        for element in elements[room:]:
            blocked[element.job_id] = reason
    return blocked


def throttle_reason(array_job_id: int, max_running: int) -> str:
    """Why a throttled element waits (stable while the throttle is: stored once)."""
    return (
        f"waiting for array {array_job_id}'s throttle: at most {max_running} of its "
        f"elements run at once (%{max_running})"
    )


def _task_id(element: Element) -> int:
    return element.task_id


# -- arrays seen as a whole --------------------------------------------------------------

STATE_ORDER = ("pending", "running", "preempting", "succeeded", "failed", "cancelled")


def array_state(states: Mapping[str, int]) -> str:
    """One state for a whole array from its elements' counts by state: ``running`` while
    any runs (or is preempted), else ``pending`` while any waits; once all ended,
    ``failed`` if any failed, else ``cancelled`` if any was, else ``succeeded``."""
    for state in ("running", "preempting", "pending", "failed", "cancelled"):
        if states.get(state):
            return "running" if state == "preempting" else state
    return "succeeded"


def state_counts(states: Mapping[str, int]) -> str:
    """``pending 90, running 4, succeeded 6``, in lifecycle order."""
    known = [s for s in STATE_ORDER if states.get(s)]
    known += sorted(s for s in states if s not in STATE_ORDER and states[s])
    return ", ".join(f"{s} {states[s]}" for s in known)
