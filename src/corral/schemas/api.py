"""REST response and request bodies of ``/api/v1`` (besides the manifest)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from corral.schemas.common import Strict


class Health(BaseModel):
    status: str
    version: str
    time: float


class TaskOut(BaseModel):
    rank: int
    node: str
    node_rank: int
    local_rank: int
    gpus: list[int]
    gpu_share: float = 1.0
    mig: list[str] = Field(default_factory=list)  # MIG instances held, aligned with gpus
    state: str  # assigned | running | terminating | exited | lost | skipped
    pid: int | None = None
    exit_code: int | None = None
    started_at: float | None = None
    ended_at: float | None = None


class EventOut(BaseModel):
    at: float
    attempt: int
    from_state: str
    to_state: str
    reason: str


class AttemptOut(BaseModel):
    attempt: int
    nodes: list[str]
    started_at: float | None
    ended_at: float | None
    outcome: str | None  # why it ended


class JobOut(BaseModel):
    id: int
    name: str | None
    user: str
    queue: str
    state: str
    priority: int
    priority_class: str | None
    preemptible: bool
    attempt: int
    nodes: int
    tasks_per_node: int
    gpus: str  # per node, as asked ("8", "H100:8", "0.5")
    total_gpus: float
    reason: str | None  # why pending, or why it ended
    position: int | None  # place in the queue while pending
    submitted_at: float
    started_at: float | None
    ended_at: float | None
    exit_code: int | None
    manifest: dict[str, Any]
    tasks: list[TaskOut] = Field(default_factory=list)
    attempts: list[AttemptOut] = Field(default_factory=list)
    events: list[EventOut] = Field(default_factory=list)


class JobList(BaseModel):
    jobs: list[JobOut]


class LogOut(BaseModel):
    job_id: int
    attempt: int
    task: int
    offset: int  # where to continue reading
    data: str
    complete: bool  # the task has ended and its whole log is here


class DeviceOut(BaseModel):
    index: int
    model: str
    memory: int
    nvlink_domain: int
    uuid: str | None = None
    used_by: list[int] = Field(default_factory=list)  # job ids
    share_used: float = 0.0


class NodeOut(BaseModel):
    name: str
    state: str
    address: str
    gpus: int
    gpus_used: float
    models: list[str]
    cpus: float
    memory: int
    network: list[str]
    labels: dict[str, str]
    attributes: dict[str, float] = Field(default_factory=dict)
    last_heartbeat: float | None
    jobs: list[int]
    devices: list[DeviceOut]
    reason: str | None = None


class NodeList(BaseModel):
    nodes: list[NodeOut]


class QueueOut(BaseModel):
    name: str
    weight: float
    quota: dict[str, float]
    cohort: str | None
    running: int
    pending: int
    gpus_used: float


class QueueList(BaseModel):
    queues: list[QueueOut]


class TokenCreate(Strict):
    user: str = Field(min_length=1, max_length=128)
    role: str = Field(default="user", pattern="^(admin|user)$")


class TokenOut(BaseModel):
    id: int
    user: str
    role: str
    created_at: float
    revoked_at: float | None
    token: str | None = None  # only when just created


class TokenList(BaseModel):
    tokens: list[TokenOut]


class ErrorOut(BaseModel):
    code: str
    message: str
