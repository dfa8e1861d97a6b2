"""Slurm hostlists: Slurm's documented examples, malformed input, and round trips."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral.core.hostlist import MAX_RANGE, compress, expand, host_key

EXPANDED = [
    # (hostlist, its hosts): from Slurm's man pages and `scontrol show hostnames`
    ("tux[0-5,12,20-25]", [f"tux{i}" for i in (0, 1, 2, 3, 4, 5, 12, *range(20, 26))]),
    ("node1,node[2-5,12]", ["node1", "node2", "node3", "node4", "node5", "node12"]),
    ("linux[1-3,6]", ["linux1", "linux2", "linux3", "linux6"]),
    ("node-[00-03,07]", ["node-00", "node-01", "node-02", "node-03", "node-07"]),
    ("gpu[1-3],cpu[01-02]", ["gpu1", "gpu2", "gpu3", "cpu01", "cpu02"]),
    ("n[08-10]", ["n08", "n09", "n10"]),  # a range keeps its lower bound's width
    ("n[8-10]", ["n8", "n9", "n10"]),
    ("n[098-100]", ["n098", "n099", "n100"]),
    ("rack[1-2]-node[1-2]", ["rack1-node1", "rack1-node2", "rack2-node1", "rack2-node2"]),
    ("login,compute[1-2]", ["login", "compute1", "compute2"]),
    ("n[3,1,2]", ["n3", "n1", "n2"]),  # order kept
    ("a b,c", ["a", "b", "c"]),  # white space separates too
    ("n1,n1", ["n1", "n1"]),  # duplicates kept, as scontrol does
    ("", []),
]

COMPRESSED = [
    # (hosts, sorted hostlist, order-keeping hostlist)
    (["node-00", "node-01", "node-02", "node-03", "node-07"], "node-[00-03,07]", None),
    (["gpu1", "gpu2", "gpu3", "cpu01", "cpu02"], "cpu[01-02],gpu[1-3]", "gpu[1-3],cpu[01-02]"),
    (["n10", "n08", "n09"], "n[08-10]", "n[10,08-09]"),
    (["n9", "n10", "n9"], "n[9-10]", None),
    (["node-b", "node-a"], "node-a,node-b", "node-b,node-a"),  # no number: each on its own
    (["rack10-n1", "rack2-n1"], "rack2-n1,rack10-n1", "rack10-n1,rack2-n1"),  # natural order
    (["n", "n2", "n1"], "n,n[1-2]", "n,n[2,1]"),
    (["n1"], "n1", None),  # a single host needs no brackets
    ([], "", None),
]


@pytest.mark.parametrize(("hostlist", "hosts"), EXPANDED)
def test_expand_reads_slurms_examples(hostlist: str, hosts: list[str]) -> None:
    assert expand(hostlist) == hosts


@pytest.mark.parametrize(("hosts", "hostlist", "kept"), COMPRESSED)
def test_compress_writes_slurms_form(hosts: list[str], hostlist: str, kept: str | None) -> None:
    assert compress(hosts) == hostlist
    assert compress(hosts, sort=False) == (kept or hostlist)


@pytest.mark.parametrize(
    ("hostlist", "error"),
    [
        ("n[3-1]", "goes down"),
        ("n[1-3", "'[' without ']'"),
        ("n1-3]", "']' without '['"),
        ("n[[1]]", "nested"),
        ("n[]", "not a list of numbers"),
        ("n[a-b]", "not a list of numbers"),
        ("n[1-]", "not a list of numbers"),
        ("n[1,,2]", "not a list of numbers"),
        (f"n[0-{MAX_RANGE}]", "more than"),
    ],
)
def test_expand_refuses_malformed_hostlists(hostlist: str, error: str) -> None:
    with pytest.raises(ValueError, match=re.escape(error)):
        expand(hostlist)


@pytest.mark.parametrize("bad", ["", "a,b", "n[1]", "a b"])
def test_compress_refuses_names_a_hostlist_cannot_hold(bad: str) -> None:
    with pytest.raises(ValueError, match="not a host name"):
        compress(["n1", bad])


prefixes = st.text(alphabet="ab-.", min_size=0, max_size=3)
suffixes = st.one_of(
    st.just(""),
    st.integers(0, 120).map(str),
    st.tuples(st.integers(0, 120), st.integers(1, 4)).map(lambda t: str(t[0]).zfill(t[1])),
)
names = st.tuples(prefixes, suffixes).map("".join).filter(bool)
host_lists = st.lists(names, max_size=30)


@given(host_lists)
def test_expand_undoes_compress_in_sorted_order(hosts: list[str]) -> None:
    assert expand(compress(hosts)) == sorted(set(hosts), key=host_key)


@given(host_lists)
def test_expand_undoes_an_order_keeping_compress(hosts: list[str]) -> None:
    assert expand(compress(hosts, sort=False)) == list(dict.fromkeys(hosts))
