"""Job dependencies in Slurm's syntax (``afterok:12:13,afterany:14``, ``singleton``), and
whether one holds: a pure function of the dependency and the states of the jobs it names.

Which state satisfies a condition, and which makes it unsatisfiable for good, is a table
(``RULES``), like the job lifecycle. ``after``: the other job started (or ended: a pending
job cancelled counts, as in Slurm); ``afterok``: it succeeded; ``afternotok``: it ended
any other way (failed, timed out, lost, cancelled: Slurm counts cancelled as not ok);
``afterany``: it ended. ``singleton``: every earlier job of the same user and name has
ended. Conditions joined by ``,`` must all hold; by ``?``, any one (the two may not mix).

A reference to a whole job array (``afterok:12``, 12 an array's id) is seen as
``ArrayObserved``, its elements counted: ``after`` holds once every element started (or
ended), ``afterok`` once all succeeded (never once one failed or was cancelled),
``afternotok`` once all ended and one or more did not succeed (never if all succeeded),
``afterany`` once all ended. An element (``afterok:12_3``) is a job like any other.

References are strings: job ids (or ``ARRAYID_INDEX``) in the control plane, job names in
a simulator jobs file.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from corral.core.job import JobState

MAX_REFS = 64  # jobs one dependency may name
MAX_LENGTH = 4096
SINGLETON = "singleton"
_REF = re.compile(r"[A-Za-z0-9._-]{1,253}")


class DependencyType(StrEnum):
    AFTER = "after"
    AFTEROK = "afterok"
    AFTERNOTOK = "afternotok"
    AFTERANY = "afterany"


class Verdict(StrEnum):
    SATISFIED = "satisfied"
    WAITING = "waiting"
    NEVER = "never"  # can no longer be satisfied


_S, _F, _C = JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED
_ENDED = frozenset({_S, _F, _C})

# type -> (what it waits for, in words; states that satisfy it; states that never will)
RULES: dict[DependencyType, tuple[str, frozenset[JobState], frozenset[JobState]]] = {
    DependencyType.AFTER: ("start", _ENDED, frozenset()),  # or started: see ``Observed``
    DependencyType.AFTEROK: ("succeed", frozenset({_S}), frozenset({_F, _C})),
    DependencyType.AFTERNOTOK: ("fail", frozenset({_F, _C}), frozenset({_S})),
    DependencyType.AFTERANY: ("end", _ENDED, frozenset()),
}


@dataclass(frozen=True)
class Condition:
    type: DependencyType
    ref: str  # a job id (control plane) or name (simulator)


@dataclass(frozen=True)
class Dependency:
    conditions: tuple[Condition, ...] = ()
    singleton: bool = False
    any_of: bool = False  # joined by ``?``: one condition suffices

    @property
    def refs(self) -> tuple[str, ...]:
        """The jobs it names, each once, in order."""
        return tuple(dict.fromkeys(c.ref for c in self.conditions))

    def __str__(self) -> str:
        """The canonical text (consecutive conditions of one type grouped)."""
        parts: list[str] = []
        last: DependencyType | None = None
        for cond in self.conditions:
            if cond.type is last and not self.any_of:
                parts[-1] += f":{cond.ref}"
            else:
                parts.append(f"{cond.type}:{cond.ref}")
            last = cond.type
        if self.singleton:
            parts.append(SINGLETON)
        return ("?" if self.any_of else ",").join(parts)


def parse_dependency(text: str) -> Dependency:
    """Parse Slurm's syntax; ``ValueError`` naming what is wrong."""
    text = text.strip()
    if not text:
        raise ValueError("empty dependency")
    if len(text) > MAX_LENGTH:
        raise ValueError(f"longer than {MAX_LENGTH} characters")
    if "," in text and "?" in text:
        raise ValueError("use either ',' (all must hold) or '?' (any one), not both")
    any_of = "?" in text
    conditions: list[Condition] = []
    singleton = False
    for part in text.split("?" if any_of else ","):
        name, *refs = part.strip().split(":")
        if name == SINGLETON:
            if refs:
                raise ValueError("singleton takes no job")
            singleton = True
            continue
        try:
            kind = DependencyType(name)
        except ValueError:
            known = ", ".join([*DependencyType, SINGLETON])
            raise ValueError(f"unknown dependency type {name!r} (expected {known})") from None
        if not refs:
            raise ValueError(f"{name}: expected {name}:JOB[:JOB...]")
        for ref in refs:
            if not _REF.fullmatch(ref):
                raise ValueError(f"{name}: {ref!r} is not a job")
            conditions.append(Condition(kind, ref))
    dependency = Dependency(tuple(dict.fromkeys(conditions)), singleton, any_of)
    if len(dependency.refs) > MAX_REFS:
        raise ValueError(f"names {len(dependency.refs)} jobs; at most {MAX_REFS}")
    if any_of and singleton:
        raise ValueError("singleton cannot be an alternative ('?'); join it with ','")
    return dependency


@dataclass(frozen=True)
class Observed:
    """What a dependency sees of a job it names."""

    state: JobState
    started: bool = False  # it ran at some point (a requeued job is pending again)


@dataclass(frozen=True)
class ArrayObserved:
    """What a dependency sees of a whole job array: its elements, counted."""

    total: int
    started: int = 0  # that ran at some point, or ended (a pending one cancelled counts)
    succeeded: int = 0
    failed: int = 0
    cancelled: int = 0

    @property
    def ended(self) -> int:
        return self.succeeded + self.failed + self.cancelled


Seen = Observed | ArrayObserved


@dataclass(frozen=True)
class Gate:
    """Whether a dependency holds now, with the reason when it does not."""

    verdict: Verdict
    reason: str = ""


def check(cond: Condition, seen: Seen | None) -> Verdict:
    """One condition against the job (or array) it names (None: that job is gone)."""
    if seen is None:
        return Verdict.NEVER
    if isinstance(seen, ArrayObserved):
        return _check_array(cond.type, seen)
    _, good, bad = RULES[cond.type]
    if seen.state in good or (cond.type is DependencyType.AFTER and seen.started):
        return Verdict.SATISFIED
    return Verdict.NEVER if seen.state in bad else Verdict.WAITING


def _check_array(kind: DependencyType, seen: ArrayObserved) -> Verdict:
    not_ok = seen.failed + seen.cancelled
    if kind is DependencyType.AFTER:
        done = seen.started >= seen.total
    elif kind is DependencyType.AFTEROK:
        if not_ok:
            return Verdict.NEVER
        done = seen.succeeded >= seen.total
    elif kind is DependencyType.AFTERNOTOK:
        if seen.ended >= seen.total and not not_ok:
            return Verdict.NEVER
        done = seen.ended >= seen.total
    else:
        done = seen.ended >= seen.total
    return Verdict.SATISFIED if done else Verdict.WAITING


def evaluate(
    dependency: Dependency,
    observed: Mapping[str, Seen],
    singleton_blocker: str | None = None,
) -> Gate:
    """Whether ``dependency`` holds, given the jobs it names (missing: gone) and, for
    ``singleton``, an earlier unfinished job of the same user and name (None: none)."""
    verdicts = [(c, check(c, observed.get(c.ref))) for c in dependency.conditions]
    never = [(c, v) for c, v in verdicts if v is Verdict.NEVER]
    waiting = [c for c, v in verdicts if v is Verdict.WAITING]
    if dependency.any_of and verdicts:
        if any(v is Verdict.SATISFIED for _, v in verdicts):
            return Gate(Verdict.SATISFIED)
        if not waiting:
            return Gate(Verdict.NEVER, _never(never, observed))
        waits = ", ".join(_waits(c, observed.get(c.ref)) for c in waiting)
        return Gate(Verdict.WAITING, "waiting for one of: " + waits)
    if never:
        return Gate(Verdict.NEVER, _never(never[:1], observed))
    what = [_waits(c, observed.get(c.ref)) for c in waiting]
    if dependency.singleton and singleton_blocker is not None:
        what.append(f"job {singleton_blocker} of the same name to end (singleton)")
    if what:
        return Gate(Verdict.WAITING, "waiting for " + ", ".join(what))
    return Gate(Verdict.SATISFIED)


def _waits(cond: Condition, seen: Seen | None) -> str:
    if isinstance(seen, ArrayObserved):
        return f"every element of array {cond.ref} to {_ARRAY_WAITS[cond.type]} ({cond.type})"
    return f"job {cond.ref} to {RULES[cond.type][0]} ({cond.type})"


def _never(never: list[tuple[Condition, Verdict]], observed: Mapping[str, Seen]) -> str:
    details = []
    for cond, _ in never:
        seen = observed.get(cond.ref)
        if isinstance(seen, ArrayObserved):
            if cond.type is DependencyType.AFTERNOTOK:
                how = f"every element of array {cond.ref} succeeded"
            else:
                bad = seen.failed + seen.cancelled
                how = f"{bad} of {seen.total} elements of array {cond.ref} failed or were cancelled"
            details.append(f"{cond.type}:{cond.ref}: {how}")
            continue
        how = "no longer exists" if seen is None else _ENDED_WORDS.get(seen.state, seen.state)
        details.append(f"{cond.type}:{cond.ref}: job {cond.ref} {how}")
    return "dependency never satisfied: " + "; ".join(details)


_ARRAY_WAITS = {
    DependencyType.AFTER: "start",
    DependencyType.AFTEROK: "succeed",
    DependencyType.AFTERNOTOK: "end, one or more of them not ok",
    DependencyType.AFTERANY: "end",
}


_ENDED_WORDS = {_S: "succeeded", _F: "failed", _C: "was cancelled"}
