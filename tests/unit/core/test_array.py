"""Job array specs (``core.array``): Slurm's syntax, refusals naming the bad part, the
compact form written back, element names, the throttle and an array's overall state."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral.core.array import (
    MAX_ELEMENTS,
    MAX_INDEX,
    Element,
    array_state,
    format_indices,
    parse_array,
    parse_job_ref,
    state_counts,
    throttle,
    throttle_reason,
)


@pytest.mark.parametrize(
    ("text", "indices", "max_running", "canonical"),
    [
        ("0-99", list(range(100)), None, "0-99"),
        ("1,3,5-9:2", [1, 3, 5, 7, 9], None, "1-9:2"),
        ("0-15%4", list(range(16)), 4, "0-15%4"),
        ("1-7:2", [1, 3, 5, 7], None, "1-7:2"),
        ("7", [7], None, "7"),
        ("3,1,2,2", [1, 2, 3], None, "1-3"),  # order and repeats do not matter
        (" 0-3 , 10 ", [0, 1, 2, 3, 10], None, "0-3,10"),
        ("0,2,4,7,8", [0, 2, 4, 7, 8], None, "0-4:2,7-8"),
        ("0,5", [0, 5], None, "0,5"),
        ("0-2:5", [0], None, "0"),  # a step past the end: the start alone
        (f"{MAX_INDEX}", [MAX_INDEX], None, str(MAX_INDEX)),
        ("0-9%100", list(range(10)), 100, "0-9%100"),  # a throttle above the count is kept
    ],
)
def test_parse_reads_slurms_syntax(
    text: str, indices: list[int], max_running: int | None, canonical: str
) -> None:
    spec = parse_array(text)
    assert (list(spec.indices), spec.max_running, str(spec)) == (indices, max_running, canonical)
    assert parse_array(str(spec)) == spec


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("5-1", "range 5-1 is empty: the end is below the start"),
        ("0-15%0", "%0: the throttle must be at least 1"),
        ("%0", "%0: the throttle must be at least 1"),
        ("0-3%", "the throttle must be a number"),
        ("0-3%x", "%x: the throttle must be a number"),
        ("1-3:0", "1-3:0: the step must be at least 1"),
        ("abc", "'abc' is not an index, a range A-B or A-B:STEP"),
        ("1,,2", "'' is not an index"),
        ("-1", "'-1' is not an index"),
        ("1-", "'1-' is not an index"),
        ("", "empty array spec"),
        ("   ", "empty array spec"),
        (f"0-{MAX_INDEX + 1}", f"index {MAX_INDEX + 1} is past the largest, {MAX_INDEX}"),
        (f"0-{MAX_ELEMENTS}", f"{MAX_ELEMENTS + 1} elements; at most {MAX_ELEMENTS} per array"),
        (
            f"0-{MAX_ELEMENTS - 1},{MAX_ELEMENTS}",
            f"more than {MAX_ELEMENTS} elements; at most {MAX_ELEMENTS}",
        ),
        ("1" * 13, "is not an index"),
        ("1," * 6000, "longer than"),
    ],
)
def test_parse_refuses_naming_the_bad_part(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_array(text)


def test_the_variables_slurm_derives() -> None:
    spec = parse_array("1-7:2%2")
    assert (spec.count, spec.min, spec.max, spec.step, spec.tasks) == (4, 1, 7, 2, "1-7:2")
    assert parse_array("0,1,5").step == 1  # uneven: 1
    assert parse_array("4").step == 1


@given(st.sets(st.integers(0, MAX_INDEX), min_size=1, max_size=200), st.integers(1, 50) | st.none())
def test_format_then_parse_gives_the_same_array(indices: set[int], max_running: int | None) -> None:
    text = format_indices(indices) + (f"%{max_running}" if max_running else "")
    spec = parse_array(text)
    assert spec.indices == tuple(sorted(indices)) and spec.max_running == max_running
    assert str(spec) == text  # already canonical


@given(st.lists(st.tuples(st.integers(0, 2000), st.integers(0, 300), st.integers(1, 40))))
def test_ranges_expand_as_python_ranges(items: list[tuple[int, int, int]]) -> None:
    if not items:
        return
    text = ",".join(f"{a}-{a + n}:{s}" for a, n, s in items)
    expected = sorted({i for a, n, s in items for i in range(a, a + n + 1, s)})
    assert list(parse_array(text).indices) == expected


def test_job_refs() -> None:
    assert parse_job_ref("12") == (12, None)
    assert parse_job_ref("12_3") == (12, 3)
    for bad in ("", "12_", "_3", "a_1", "0", "12.3", "12_3_4", str(2**63)):
        with pytest.raises(ValueError, match="job id"):
            parse_job_ref(bad)


def test_the_throttle_holds_back_all_but_the_lowest_indices_it_has_room_for() -> None:
    pending = [Element(100 + i, 100, i, 3) for i in (5, 1, 9, 2, 7)]  # array 100, %3
    pending += [Element(200 + i, 200, i, 2) for i in range(3)]  # array 200, %2
    blocked = throttle(pending, running={100: 1, 200: 2})
    # array 100: 1 running, room for 2 (indices 1 and 2); array 200: none
    assert sorted(blocked) == [105, 107, 109, 200, 201, 202]
    assert blocked[105] == throttle_reason(100, 3)
    assert throttle(pending, running={100: 0, 200: 0}) == {
        job: throttle_reason(array, limit)
        for job, array, limit in ((107, 100, 3), (109, 100, 3), (202, 200, 2))
    }
    over = throttle([Element(1, 1, 0, 2)], running={1: 5})  # throttle lowered: none start
    assert list(over) == [1]


@pytest.mark.parametrize(
    ("states", "overall"),
    [
        ({"pending": 9, "running": 1, "succeeded": 3}, "running"),
        ({"pending": 9, "preempting": 1}, "running"),
        ({"pending": 2, "failed": 1}, "pending"),
        ({"succeeded": 4, "failed": 1, "cancelled": 1}, "failed"),
        ({"succeeded": 4, "cancelled": 1}, "cancelled"),
        ({"succeeded": 4}, "succeeded"),
    ],
)
def test_an_arrays_overall_state(states: dict[str, int], overall: str) -> None:
    assert array_state(states) == overall


def test_state_counts_in_lifecycle_order() -> None:
    assert state_counts({"succeeded": 6, "pending": 90, "running": 4}) == (
        "pending 90, running 4, succeeded 6"
    )
