"""The dependency syntax and the table of verdicts (``core.dependency``)."""

from __future__ import annotations

import pytest

from corral.core.dependency import (
    MAX_REFS,
    ArrayObserved,
    Observed,
    Seen,
    Verdict,
    evaluate,
    parse_dependency,
)
from corral.core.job import JobState

P, R, S, F, C = (JobState(s) for s in ("pending", "running", "succeeded", "failed", "cancelled"))


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("afterok:12:13,afterany:14", "afterok:12:13,afterany:14"),
        (" afterok:12 , afterok:13 ", "afterok:12:13"),
        ("afterok:12:12", "afterok:12"),
        ("singleton", "singleton"),
        ("afterok:1?afternotok:2", "afterok:1?afternotok:2"),
        ("after:prep,singleton", "after:prep,singleton"),
    ],
)
def test_parse_gives_the_canonical_text(text: str, canonical: str) -> None:
    assert str(parse_dependency(text)) == canonical


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty"),
        ("afterok", "expected afterok:JOB"),
        ("afterok:", "is not a job"),
        ("before:1", "unknown dependency type"),
        ("singleton:1", "takes no job"),
        ("afterok:1,afterany:2?afterok:3", "not both"),
        ("singleton?afterok:1", "singleton cannot be an alternative"),
        ("afterok:" + ":".join(map(str, range(MAX_REFS + 1))), f"at most {MAX_REFS}"),
    ],
)
def test_parse_refuses(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_dependency(text)


@pytest.mark.parametrize(
    ("kind", "seen", "verdict"),
    [
        ("after", Observed(P), Verdict.WAITING),
        ("after", Observed(P, started=True), Verdict.SATISFIED),  # requeued: it did start
        ("after", Observed(R, started=True), Verdict.SATISFIED),
        ("after", Observed(C), Verdict.SATISFIED),  # cancelled while pending
        ("afterok", Observed(R, True), Verdict.WAITING),
        ("afterok", Observed(S, True), Verdict.SATISFIED),
        ("afterok", Observed(F, True), Verdict.NEVER),
        ("afterok", Observed(C), Verdict.NEVER),
        ("afternotok", Observed(F, True), Verdict.SATISFIED),
        ("afternotok", Observed(C), Verdict.SATISFIED),  # as Slurm: cancelled is not ok
        ("afternotok", Observed(S, True), Verdict.NEVER),
        ("afterany", Observed(R, True), Verdict.WAITING),
        ("afterany", Observed(F, True), Verdict.SATISFIED),
        ("afterany", None, Verdict.NEVER),  # the job is gone
    ],
)
def test_the_table(kind: str, seen: Observed | None, verdict: Verdict) -> None:
    observed = {} if seen is None else {"7": seen}
    assert evaluate(parse_dependency(f"{kind}:7"), observed).verdict is verdict


def test_reasons_and_combinations() -> None:
    both = parse_dependency("afterok:1,afterany:2")
    gate = evaluate(both, {"1": Observed(R, True), "2": Observed(P)})
    assert gate.reason == "waiting for job 1 to succeed (afterok), job 2 to end (afterany)"
    gate = evaluate(both, {"1": Observed(F, True), "2": Observed(P)})
    assert gate == evaluate(both, {"1": Observed(F, True), "2": Observed(S, True)})
    assert gate.reason == "dependency never satisfied: afterok:1: job 1 failed"
    either = parse_dependency("afterok:1?afterok:2")
    assert evaluate(either, {"1": Observed(F), "2": Observed(S)}).verdict is Verdict.SATISFIED
    assert evaluate(either, {"1": Observed(F), "2": Observed(R)}).reason == (
        "waiting for one of: job 2 to succeed (afterok)"
    )
    assert evaluate(either, {"1": Observed(F), "2": Observed(C)}).reason == (
        "dependency never satisfied: afterok:1: job 1 failed; afterok:2: job 2 was cancelled"
    )
    single = parse_dependency("singleton")
    assert evaluate(single, {}).verdict is Verdict.SATISFIED
    assert evaluate(single, {}, "4").reason == (
        "waiting for job 4 of the same name to end (singleton)"
    )


def arr(total: int, started: int = 0, ok: int = 0, failed: int = 0, cancelled: int = 0) -> Seen:
    return ArrayObserved(total, started, ok, failed, cancelled)


@pytest.mark.parametrize(
    ("kind", "seen", "verdict"),
    [
        # after: every element started (or ended)
        ("after", arr(3, started=2), Verdict.WAITING),
        ("after", arr(3, started=3), Verdict.SATISFIED),
        # afterok: all succeeded; never once one failed or was cancelled
        ("afterok", arr(3, 3, ok=2), Verdict.WAITING),
        ("afterok", arr(3, 3, ok=3), Verdict.SATISFIED),
        ("afterok", arr(3, 1, failed=1), Verdict.NEVER),  # decided before the rest end
        ("afterok", arr(3, 3, ok=2, cancelled=1), Verdict.NEVER),
        # afternotok: all ended, one or more not ok; never if all succeeded
        ("afternotok", arr(3, 3, ok=1, failed=1), Verdict.WAITING),
        ("afternotok", arr(3, 3, ok=2, failed=1), Verdict.SATISFIED),
        ("afternotok", arr(3, 3, cancelled=3), Verdict.SATISFIED),
        ("afternotok", arr(3, 3, ok=3), Verdict.NEVER),
        # afterany: all ended
        ("afterany", arr(3, 3, ok=1, failed=1), Verdict.WAITING),
        ("afterany", arr(3, 3, ok=1, failed=1, cancelled=1), Verdict.SATISFIED),
    ],
)
def test_the_table_for_whole_arrays(kind: str, seen: Seen, verdict: Verdict) -> None:
    assert evaluate(parse_dependency(f"{kind}:7"), {"7": seen}).verdict is verdict


def test_reasons_for_arrays_and_elements() -> None:
    waiting = evaluate(parse_dependency("afterok:7,after:8_2"), {"7": arr(4), "8_2": Observed(P)})
    assert waiting.reason == (
        "waiting for every element of array 7 to succeed (afterok), job 8_2 to start (after)"
    )
    never = evaluate(parse_dependency("afterok:7"), {"7": arr(4, 4, ok=1, failed=2, cancelled=1)})
    assert never.reason == (
        "dependency never satisfied: afterok:7: 3 of 4 elements of array 7 failed or were cancelled"
    )
    never = evaluate(parse_dependency("afternotok:7"), {"7": arr(2, 2, ok=2)})
    assert never.reason == (
        "dependency never satisfied: afternotok:7: every element of array 7 succeeded"
    )
    assert str(parse_dependency("afterok:7_3:7")) == "afterok:7_3:7"
