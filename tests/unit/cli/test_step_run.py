"""Pieces of ``corral step run``: finding its job, and labelling relayed output."""

from __future__ import annotations

import io

import pytest

from corral.cli.steps import StepRelay
from corral.client.config import resolve_job
from corral.errors import ValidationError
from corral.schemas.steps import StepOut

INSIDE = {"CORRAL_SERVER": "http://h:1", "CORRAL_JOB_ID": "12", "CORRAL_JOB_TOKEN": "crj_x"}


def test_the_job_comes_from_the_tasks_environment() -> None:
    job = resolve_job(INSIDE)
    assert (job.server, job.job_id, job.token) == ("http://h:1", 12, "crj_x")


@pytest.mark.parametrize(
    ("environ", "says"),
    [
        ({}, "CORRAL_SERVER, CORRAL_JOB_ID, CORRAL_JOB_TOKEN not set: run it inside a Corral job"),
        ({**INSIDE, "CORRAL_JOB_TOKEN": ""}, "CORRAL_JOB_TOKEN not set"),
        ({**INSIDE, "CORRAL_JOB_ID": "x"}, "CORRAL_JOB_ID is not a job id"),
    ],
    ids=["outside", "no-token", "bad-id"],
)
def test_outside_a_job_it_says_so(environ: dict[str, str], says: str) -> None:
    with pytest.raises(ValidationError, match=says):
        resolve_job(environ)


def test_labelled_output_prefixes_whole_lines_with_the_rank() -> None:
    step = StepOut(
        job_id=1,
        attempt=0,
        step=1,
        command="x",
        state="running",
        created_at=0.0,
        created_by="u",
        cancelled=False,
        tasks=[],
    )
    out = io.StringIO()
    relay = StepRelay(None, step, out, label=True)  # type: ignore[arg-type]
    relay.partial = {0: "", 1: ""}
    relay._write(0, "a\nb", final=False)
    relay._write(1, "c\n", final=False)
    relay._write(0, "c\n\nd", final=True)
    assert out.getvalue() == "0: a\n1: c\n0: bc\n0: \n0: d\n"
