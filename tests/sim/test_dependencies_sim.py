"""Dependencies in simulator jobs files: jobs named by ``name``; a dependent job reaches
the scheduler once its dependency holds, and one never satisfied ends cancelled."""

from __future__ import annotations

import pytest

from corral.errors import ValidationError
from corral.schemas.cluster import load_cluster
from corral.sim.engine import simulate
from corral.sim.jobs_file import load_jobs
from corral.sim.result import Outcome

ONE_NODE = "nodes:\n  - name: n0\n    gpus: {count: 8, model: H100}\n"


def run(jobs_yaml: str):
    result = simulate(load_cluster(ONE_NODE).to_nodes(), load_jobs(jobs_yaml))
    return {j.name: j for j in result.jobs}


def test_a_chain_with_one_never_satisfied() -> None:
    jobs = run(
        "- {name: prep, submit_time: 0, duration: 100, resources: {gpus: 1}}\n"
        "- {name: train, submit_time: 0, duration: 50, resources: {gpus: 1},"
        " dependency: 'afterok:prep'}\n"
        "- {name: report, submit_time: 0, duration: 10, resources: {gpus: 1},"
        " dependency: 'afterany:train'}\n"
        # fails at its time limit: its afterok dependent is never satisfied
        "- {name: flaky, submit_time: 0, duration: 100, time_limit: 20, resources: {gpus: 1}}\n"
        "- {name: after-flaky, submit_time: 0, duration: 10, resources: {gpus: 1},"
        " dependency: 'afterok:flaky'}\n"
        "- {name: cleanup, submit_time: 0, duration: 10, resources: {gpus: 1},"
        " dependency: 'afternotok:flaky'}\n"
        "- {name: tail, submit_time: 0, duration: 5, resources: {gpus: 1},"
        " dependency: 'afterany:after-flaky'}\n"
        # starts with prep: ``after`` needs only a start
        "- {name: side, submit_time: 0, duration: 5, resources: {gpus: 1},"
        " dependency: 'after:prep'}\n"
        # names a job submitted later: waits for it to arrive and end
        "- {name: early, submit_time: 0, duration: 5, resources: {gpus: 1},"
        " dependency: 'afterok:late'}\n"
        "- {name: late, submit_time: 300, duration: 5, resources: {gpus: 1}}\n"
    )
    assert (jobs["prep"].start_time, jobs["prep"].end_time) == (0, 100)
    assert (jobs["train"].start_time, jobs["train"].end_time) == (100, 150)
    assert (jobs["report"].start_time, jobs["report"].state) == (150, Outcome.COMPLETED)
    assert jobs["flaky"].state is Outcome.FAILED
    never = jobs["after-flaky"]
    assert (never.state, never.end_time, never.start_time) == (Outcome.CANCELLED, 20, None)
    assert never.reason == "dependency never satisfied: afterok:flaky: job flaky failed"
    assert jobs["cleanup"].start_time == 20
    assert jobs["tail"].start_time == 20  # after the cancelled one: afterany holds
    assert jobs["side"].start_time == 0
    assert jobs["early"].start_time == 305


def test_a_dependency_on_a_refused_job() -> None:
    jobs = run(
        "- {name: big, submit_time: 0, duration: 10, resources: {gpus: 16}}\n"  # refused
        "- {name: a, submit_time: 0, duration: 10, dependency: 'afterok:big'}\n"
        "- {name: b, submit_time: 0, duration: 10, dependency: 'afterany:big'}\n"
    )
    assert jobs["big"].state is Outcome.REFUSED
    assert jobs["a"].state is Outcome.CANCELLED
    assert jobs["b"].state is Outcome.COMPLETED


@pytest.mark.parametrize(
    ("jobs_yaml", "message"),
    [
        ("- {name: a, submit_time: 0, duration: 1, dependency: 'afterok:zz'}\n", "no job named"),
        (
            "- {name: a, submit_time: 0, duration: 1, dependency: 'afterok:b'}\n"
            "- {name: b, submit_time: 0, duration: 1, dependency: 'afterany:a'}\n",
            "dependency cycle: a -> b -> a",
        ),
        ("- {name: a, submit_time: 0, duration: 1, dependency: 'afterok:a'}\n", "cycle: a -> a"),
        ("- {name: a, submit_time: 0, duration: 1, dependency: 'afterbad:a'}\n", "unknown"),
        ("- {name: a, submit_time: 0, duration: 1, hold: true}\n", "hold"),
    ],
)
def test_bad_dependencies_in_a_jobs_file(jobs_yaml: str, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        load_jobs(jobs_yaml)
