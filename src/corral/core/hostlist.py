"""Slurm hostlists: ``node-[00-03,07]`` for ``node-00 node-01 node-02 node-03 node-07``.

:func:`expand` reads a hostlist as ``scontrol show hostnames`` does: comma-separated
items, each a name with bracketed numeric ranges (``tux[0-5,12]``); a range keeps the
width of its lower bound (``n[08-10]``: ``n08 n09 n10``), and several bracket groups in
one item make their cartesian product, the first group varying slowest
(``rack[1-2]-node[1-2]``: ``rack1-node1 rack1-node2 rack2-node1 rack2-node2``). The order
is kept and duplicates stay. Slurm's 3-D ``bgl[123x456]`` form is not supported.

:func:`compress` writes one as ``scontrol show hostlist`` does: names are split into a
prefix and a numeric suffix (its trailing digits), sorted (:func:`host_key`) and
deduplicated, and the names of one prefix go into one bracket group, consecutive numbers
of one width into a range (``gpu[1-3],cpu[01-02]`` comes out ``cpu[01-02],gpu[1-3]``).
With ``sort=False`` the order is kept instead (duplicates still go), and only neighbours
are merged: ``expand(compress(xs, sort=False))`` is ``xs`` without repeats, in order.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable

MAX_RANGE = 65536  # hosts one range may name (Slurm's own limit), against typos like n[0-9999999]

_SUFFIX = re.compile(r"^(.*?)(\d*)$", re.DOTALL)
_FORBIDDEN = re.compile(r"[\[\],\s]")
_NATURAL = re.compile(r"(\d+)")


def host_key(name: str) -> tuple:
    """The order :func:`compress` sorts in: by prefix (naturally: ``rack2-`` before
    ``rack10-``), a name without a numeric suffix before those with one, then by number,
    then by width (``n8`` before ``n08``)."""
    prefix, digits = _split(name)
    natural = tuple(
        (0, int(part), len(part)) if part.isdigit() else (1, part, 0)
        for part in _NATURAL.split(prefix)
        if part
    )
    return (natural, prefix, bool(digits), int(digits) if digits else 0, len(digits))


def compress(names: Iterable[str], *, sort: bool = True) -> str:
    """The hostlist of ``names`` (see the module's docstring); ``""`` for none.

    A ``ValueError`` names a host that cannot be written in a hostlist (empty, or holding
    a comma, a bracket or white space)."""
    unique = list(dict.fromkeys(names))
    for name in unique:
        if not name or _FORBIDDEN.search(name):
            raise ValueError(f"{name!r} is not a host name a hostlist can hold")
    if sort:
        unique.sort(key=host_key)
    items = []
    for prefix, group in itertools.groupby((_split(name) for name in unique), _group_of):
        split = list(group)
        if prefix is None:  # names without a numeric suffix, each on its own
            items.extend(name for name, _ in split)
        elif len(split) == 1:
            items.append(prefix + split[0][1])
        else:
            items.append(f"{prefix}[{','.join(_ranges([digits for _, digits in split]))}]")
    return ",".join(items)


def expand(hostlist: str) -> list[str]:
    """The host names of ``hostlist`` in order (see the module's docstring); ``[]`` for
    an empty one. A ``ValueError`` says what is malformed (an unbalanced or nested
    bracket, a descending range ``n[3-1]``, an empty or non-numeric range)."""
    hosts: list[str] = []
    for item in _items(hostlist):
        hosts.extend(_expand_item(item, hostlist))
    return hosts


def _split(name: str) -> tuple[str, str]:
    """``(prefix, trailing digits)``."""
    match = _SUFFIX.match(name)
    assert match is not None  # the pattern matches every string
    return match.group(1), match.group(2)


def _group_of(part: tuple[str, str]) -> str | None:
    """The bracket group of a split name: its prefix, or None without a number."""
    prefix, digits = part
    return prefix if digits else None


def _ranges(suffixes: list[str]) -> list[str]:
    """Suffixes (in order) as ranges: a run continues while the next suffix is the next
    number padded to the width of the run's first (what :func:`expand` gives back)."""
    ranges = []
    start = 0
    for i in range(1, len(suffixes) + 1):
        first = suffixes[start]
        if i < len(suffixes) and suffixes[i] == str(int(suffixes[i - 1]) + 1).zfill(len(first)):
            continue
        last = suffixes[i - 1]
        ranges.append(first if i - 1 == start else f"{first}-{last}")
        start = i
    return ranges


def _items(hostlist: str) -> list[str]:
    """Top-level items: split at commas and white space outside brackets (empty items
    are skipped, as Slurm does)."""
    items = []
    depth = 0
    current: list[str] = []
    for char in hostlist + ",":
        if char == "[":
            if depth:
                raise ValueError(f"{hostlist!r}: nested '[' in a hostlist")
            depth = 1
        elif char == "]":
            if not depth:
                raise ValueError(f"{hostlist!r}: ']' without '['")
            depth = 0
        elif not depth and (char == "," or char.isspace()):
            if current:
                items.append("".join(current))
            current = []
            continue
        current.append(char)
    if depth:
        raise ValueError(f"{hostlist!r}: '[' without ']'")
    return items


def _expand_item(item: str, hostlist: str) -> list[str]:
    """One item's hosts: the cartesian product of its bracket groups."""
    parts: list[list[str]] = []
    for i, piece in enumerate(re.split(r"\[([^\]]*)\]", item)):
        parts.append(_expand_ranges(piece, hostlist) if i % 2 else [piece])
    return ["".join(choice) for choice in itertools.product(*parts)]


def _expand_ranges(body: str, hostlist: str) -> list[str]:
    """The suffixes of one bracket's body: ``0-5,12`` -> ``0 1 2 3 4 5 12``."""
    suffixes = []
    for part in body.split(","):
        lo, dash, hi = part.partition("-")
        if not lo.isdigit() or dash and not hi.isdigit():
            raise ValueError(f"{hostlist!r}: [{body}] is not a list of numbers and ranges")
        low, high = int(lo), int(hi) if dash else int(lo)
        if high < low:
            raise ValueError(f"{hostlist!r}: range {part} goes down")
        if high - low >= MAX_RANGE:
            raise ValueError(f"{hostlist!r}: range {part} names more than {MAX_RANGE} hosts")
        suffixes.extend(str(n).zfill(len(lo)) for n in range(low, high + 1))
    return suffixes
