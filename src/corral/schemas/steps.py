"""Job steps (``/api/v1/jobs/{id}/steps``): a running job starts more processes on its own
nodes through their agents, like Slurm's ``srun`` inside an allocation."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field, field_validator

from corral.schemas.common import Strict
from corral.schemas.manifest import MAX_ARGS, MAX_ENV, Arg, EnvKey

MAX_STEP_NODES = 100_000  # as many as a job may have
MAX_STEP_TASKS_PER_NODE = 1024  # as a job's tasks_per_node
MAX_STEPS = 10_000  # steps per attempt of a job: a listing of them all is one page
STEP_TASK_STATES = ("pending", "running", "exited", "lost", "cancelled")
FINAL_STEP_TASK_STATES = ("exited", "lost", "cancelled")
NodeName = Annotated[str, Field(min_length=1, max_length=253)]


class StepIn(Strict):
    """What to run: ``tasks_per_node`` processes on each of ``nodes`` (default: every node
    where the job's current attempt still runs a task), ranked in the order given."""

    command: (
        Annotated[list[Arg], Field(min_length=1, max_length=MAX_ARGS)]
        | Annotated[str, Field(min_length=1, max_length=131_072)]
    )
    env: dict[EnvKey, Arg] = Field(default_factory=dict, max_length=MAX_ENV)
    nodes: Annotated[list[NodeName], Field(min_length=1, max_length=MAX_STEP_NODES)] | None = None
    tasks_per_node: int = Field(default=1, ge=1, le=MAX_STEP_TASKS_PER_NODE)
    workdir: Annotated[str, Field(max_length=4096)] | None = None

    @field_validator("command")
    @classmethod
    def _command(cls, value: list[str] | str) -> list[str] | str:
        if isinstance(value, str) and not value.strip():
            raise ValueError("must not be empty")
        return value

    @field_validator("env")
    @classmethod
    def _env(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if not key or "=" in key:
                raise ValueError(f"invalid variable name {key!r}")
        return value

    @field_validator("nodes")
    @classmethod
    def _unique(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and len(set(value)) != len(value):
            twice = sorted({n for n in value if value.count(n) > 1})
            raise ValueError(f"a node is named more than once: {', '.join(twice[:5])}")
        return value


class StepTaskOut(BaseModel):
    rank: int  # CORRAL_STEP_RANK: 0..n-1 over the step's tasks
    node: str
    local_rank: int  # CORRAL_STEP_LOCAL_RANK: its index among the step's tasks on its node
    state: str  # pending | running | exited | lost | cancelled (never started)
    pid: int | None = None
    exit_code: int | None = None  # 128+N when a signal N ended it
    started_at: float | None = None
    ended_at: float | None = None
    reason: str | None = None  # why it ended, when not by itself


class StepOut(BaseModel):
    job_id: int
    attempt: int
    step: int  # CORRAL_STEP_ID: 1, 2, ... within the attempt
    command: list[str] | str
    state: str  # pending (nothing started yet) | running | ended
    created_at: float
    created_by: str  # the user, or job:<id> when the job's own token started it
    cancelled: bool
    # once ended: the first non-zero exit code by end time (a task that never reported one
    # counts 1 when lost, 143 when cancelled before it started), else 0; None before
    exit_code: int | None = None
    tasks: list[StepTaskOut]


class StepList(BaseModel):
    steps: list[StepOut]
