"""The agent protocol: register once, then sync (heartbeat, report, pull) repeatedly.

Level-triggered: each sync carries everything the agent runs and the log bytes the server
lacks; the answer is everything the agent should run. Either side may restart.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, model_validator

from corral.schemas.common import Strict


class DeviceIn(Strict):
    index: int = Field(ge=0)
    model: str
    memory: int = Field(ge=0)
    nvlink_domain: int = 0
    uuid: str | None = None
    mig: list[str] = Field(default_factory=list)
    kind: Literal["gpu", "tpu"] = "gpu"  # a TPU chip's model is its generation (v5p)
    # the UUID of each MIG instance (from NVML), aligned with ``mig``; empty: not known
    # (simulated or declared devices get deterministic names instead)
    mig_uuids: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _aligned(self) -> DeviceIn:
        if self.mig_uuids and len(self.mig_uuids) != len(self.mig):
            raise ValueError(
                f"mig_uuids: {len(self.mig_uuids)} UUIDs for {len(self.mig)} MIG instances"
            )
        return self


class RegisterRequest(Strict):
    name: str = Field(min_length=1, max_length=253, pattern=r"^[A-Za-z0-9._-]+$")
    agent_id: str = Field(min_length=1, max_length=64)  # the column's width
    address: str = Field(max_length=253)
    devices: list[DeviceIn] = Field(default_factory=list)
    cpus: float = Field(ge=0)
    memory: int = Field(ge=0)
    network: list[str] = Field(default_factory=list)
    labels: dict[str, str] = Field(default_factory=dict)
    attributes: dict[str, float] = Field(default_factory=dict)  # for scoring plugins


class RegisterResponse(BaseModel):
    node: str
    node_token: str
    sync_interval: float


class TaskReport(Strict):
    job_id: int
    attempt: int
    rank: int
    state: str  # running | terminating | exited
    pid: int | None = None
    exit_code: int | None = None
    started_at: float | None = None
    ended_at: float | None = None


class LogChunk(Strict):
    job_id: int
    attempt: int
    rank: int
    offset: int = Field(ge=0)
    data: str  # base64


class SyncRequest(Strict):
    node: str
    agent_id: str = Field(min_length=1, max_length=64)
    tasks: list[TaskReport] = Field(default_factory=list)
    logs: list[LogChunk] = Field(default_factory=list)
    free_ports: list[int] = Field(default_factory=list)
    attributes: dict[str, float] | None = None  # fresh readings (temperature...); None: same
    shutdown: bool = False  # the agent is stopping: its tasks are gone, requeue their jobs


class DesiredTask(BaseModel):
    job_id: int
    attempt: int
    rank: int
    command: list[str] | str
    env: dict[str, str]
    workdir: str | None
    grace_period: float


class TaskAck(BaseModel):
    job_id: int
    attempt: int
    rank: int
    log_offset: int  # bytes of this task's log the server holds
    final: bool  # the server recorded the task's exit


class SyncResponse(BaseModel):
    tasks: list[DesiredTask]
    acks: list[TaskAck]
    sync_interval: float


class WatchResponse(BaseModel):
    version: int  # pass it back as ``since``; a change means: sync now
