"""What a step task runs (from the job's tasks on its node) and a step's exit code."""

from __future__ import annotations

import pytest

from corral.schemas.agent import DesiredTask
from corral.schemas.steps import StepTaskOut
from corral.server.db.models import StepRow, StepTaskRow
from corral.server.services.step_sync import step_launch
from corral.server.services.steps import step_exit_code


def base(rank: int, gpus: str, **extra: object) -> DesiredTask:
    fields: dict = dict(
        job_id=7,
        attempt=1,
        rank=rank,
        command=["main"],
        env={"RANK": str(rank), "CUDA_VISIBLE_DEVICES": gpus, "A": "job"},
        workdir="/job",
        grace_period=9.0,
        user="ann",
        cpus=4.0,
        memory=1000,
    )
    return DesiredTask(**{**fields, **extra})


STEP = StepRow(
    job_id=7,
    attempt=1,
    step=3,
    command=["orted"],
    env={"A": "step", "B": "b"},
    workdir=None,
    tasks_per_node=2,
    size=4,
)


def test_a_step_task_runs_in_its_nodes_job_environment() -> None:
    task = StepTaskRow(job_id=7, attempt=1, step=3, rank=3, node="n1", local_rank=1)
    launch = step_launch(task, STEP, [base(2, "0,1"), base(3, "2,3")])
    assert (launch.step, launch.rank, launch.command) == (3, 3, ["orted"])
    assert (launch.workdir, launch.grace_period, launch.user) == ("/job", 9.0, "ann")
    assert launch.env["RANK"] == "2"  # the node's first job task's
    assert launch.env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"  # every GPU the job holds there
    assert (launch.env["A"], launch.env["B"]) == ("step", "b")
    steps = {k: v for k, v in launch.env.items() if k.startswith("CORRAL_STEP_")}
    assert steps == {
        "CORRAL_STEP_ID": "3",
        "CORRAL_STEP_RANK": "3",
        "CORRAL_STEP_WORLD_SIZE": "4",
        "CORRAL_STEP_LOCAL_RANK": "1",
        "CORRAL_STEP_LOCAL_WORLD_SIZE": "2",
        "CORRAL_STEP_NODE_RANK": "1",
    }
    assert (launch.cpus, launch.memory) == (4.0, 1000)  # the node's 8 CPUs, 2000 B, halved


def test_no_limits_when_the_job_asked_for_none() -> None:
    task = StepTaskRow(job_id=7, attempt=1, step=3, rank=0, node="n1", local_rank=0)
    launch = step_launch(task, STEP, [base(0, "", cpus=None, memory=None)])
    assert (launch.cpus, launch.memory) == (None, None)


def out(rank: int, state: str, code: int | None, ended: float | None) -> StepTaskOut:
    return StepTaskOut(
        rank=rank, node="n", local_rank=0, state=state, exit_code=code, ended_at=ended
    )


@pytest.mark.parametrize(
    ("tasks", "code"),
    [
        ([out(0, "exited", 0, 1.0), out(1, "exited", 0, 2.0)], 0),
        ([out(0, "exited", 2, 5.0), out(1, "exited", 3, 4.0)], 3),  # the first to end
        ([out(0, "exited", 0, 1.0), out(1, "lost", None, 2.0)], 1),
        ([out(0, "cancelled", None, 2.0), out(1, "exited", 0, 1.0)], 143),
        ([out(0, "exited", 137, 2.0), out(1, "lost", None, 3.0)], 137),
    ],
    ids=["all-zero", "first-non-zero", "lost-counts-1", "cancelled-counts-143", "by-end-time"],
)
def test_a_steps_exit_code(tasks: list[StepTaskOut], code: int) -> None:
    assert step_exit_code(tasks) == code
