"""Job arrays in simulator jobs files: one entry with ``array`` is one job per index
(``name_INDEX``), a throttle (``%MAX``) keeps at most MAX running, and dependencies name
the whole array or one element."""

from __future__ import annotations

import pytest

from corral.errors import ValidationError
from corral.schemas.cluster import load_cluster
from corral.sim.engine import simulate
from corral.sim.jobs_file import load_jobs
from corral.sim.result import Outcome
from tests.sim.test_dependencies_sim import run


def test_a_throttled_array_and_dependencies_on_it() -> None:
    jobs = run(
        "- {name: work, submit_time: 0, duration: 10, resources: {gpus: 1}, array: '0-5%2'}\n"
        "- {name: merge, submit_time: 0, duration: 5, resources: {gpus: 1},"
        " dependency: 'afterok:work'}\n"
        "- {name: after-3, submit_time: 0, duration: 5, resources: {gpus: 1},"
        " dependency: 'afterok:work_3'}\n"
        "- {name: started, submit_time: 0, duration: 5, resources: {gpus: 1},"
        " dependency: 'after:work'}\n"
    )
    starts = [jobs[f"work_{i}"].start_time for i in range(6)]
    assert starts == [0, 0, 10, 10, 20, 20]  # two at a time, lowest index first
    assert all(jobs[f"work_{i}"].state is Outcome.COMPLETED for i in range(6))
    assert jobs["merge"].start_time == 30  # every element succeeded
    assert jobs["after-3"].start_time == 20  # work_3 ran 10..20
    assert jobs["started"].start_time == 20  # every element started


def test_an_array_with_a_failed_element() -> None:
    two_nodes = "nodes:\n" + "".join(
        f"  - name: n{i}\n    gpus: {{count: 8, model: H100}}\n" for i in range(2)
    )
    jobs_yaml = (
        "jobs:\n"
        "- {name: a, submit_time: 0, duration: 10, resources: {gpus: 8}, requeue: false,"
        " array: '0-1'}\n"
        "- {name: ok, submit_time: 0, duration: 1, dependency: 'afterok:a'}\n"
        "- {name: notok, submit_time: 0, duration: 1, dependency: 'afternotok:a'}\n"
        "- {name: any, submit_time: 0, duration: 1, dependency: 'afterany:a'}\n"
        "node_events:\n"
        "- {time: 5, node: n1, kind: fail}\n"  # a_1 runs there: lost, not requeued
    )
    result = simulate(load_cluster(two_nodes).to_nodes(), load_jobs(jobs_yaml))
    jobs = {j.name: j for j in result.jobs}
    assert (jobs["a_0"].state, jobs["a_1"].state) == (Outcome.COMPLETED, Outcome.FAILED)
    never = jobs["ok"]
    assert (never.state, never.end_time) == (Outcome.CANCELLED, 5)  # decided once a_1 failed
    assert never.reason == (
        "dependency never satisfied: afterok:a: 1 of 2 elements of array a failed or were cancelled"
    )
    assert jobs["notok"].start_time == 10  # once every element ended, one of them failed
    assert jobs["any"].start_time == 10


def test_array_names_and_bad_specs_in_a_jobs_file() -> None:
    workload = load_jobs("- {name: w, submit_time: 0, duration: 1, array: '1,3,5-9:2'}\n")
    assert [j.name for j in workload.jobs] == ["w_1", "w_3", "w_5", "w_7", "w_9"]
    with pytest.raises(ValidationError, match="range 5-1 is empty"):
        load_jobs("- {name: w, submit_time: 0, duration: 1, array: '5-1'}\n")
    with pytest.raises(ValidationError, match="repeated: w_1"):
        load_jobs(
            "- {name: w, submit_time: 0, duration: 1, array: '0-1'}\n"
            "- {name: w_1, submit_time: 0, duration: 1}\n"
        )
    with pytest.raises(ValidationError, match="no job named 'w_7'"):
        load_jobs(
            "- {name: w, submit_time: 0, duration: 1, array: '0-1'}\n"
            "- {name: x, submit_time: 0, duration: 1, dependency: 'afterok:w_7'}\n"
        )
