"""The agent protocol: register once, then sync (heartbeat, report, pull) repeatedly.

Level-triggered: each sync carries everything the agent runs and the log bytes the server
lacks; the answer is everything the agent should run. Either side may restart. The tasks of
job steps (``schemas.steps``) travel in lists of their own (``steps``, ``step_logs``,
``step_acks``) whose items also name the step.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field, model_validator

from corral.schemas.common import Count, Int64, Strict


class DeviceIn(Strict):
    index: Count
    model: str
    memory: Count
    nvlink_domain: Int64 = 0
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
    memory: Count
    network: list[str] = Field(default_factory=list)
    labels: dict[str, str] = Field(default_factory=dict)
    attributes: dict[str, float] = Field(default_factory=dict)  # for scoring plugins
    # the node credential an earlier registration of this name returned (None: first time)
    credential: str | None = Field(default=None, max_length=128)


class RegisterResponse(BaseModel):
    node: str
    node_token: str
    sync_interval: float
    # a new node credential when the name was registered for the first time (or after
    # ``corral reset-node``): keep it and present it at every later registration; else None
    credential: str | None = None
    log_cap: int  # bytes of each task's log the server keeps (the agent may drop more)


class TaskReport(Strict):
    job_id: Int64
    attempt: Int64
    rank: Int64
    state: str  # running | terminating | exited
    pid: Int64 | None = None
    exit_code: Int64 | None = None
    started_at: float | None = None
    ended_at: float | None = None
    peak_memory: Int64 | None = None  # bytes: the task's highest memory use so far
    cpu_seconds: float | None = Field(default=None, ge=0)  # CPU time used so far
    reason: str | None = Field(default=None, max_length=1024)  # why it ended, if it did


class StepReport(TaskReport):
    """A report on the task of rank ``rank`` of a job step."""

    step: Annotated[int, Field(ge=1, le=2**31 - 1)]


class LogChunk(Strict):
    """Bytes of a task's log from ``offset``. An offset past the bytes the server holds
    (the ack's ``log_offset``) means the agent dropped the bytes in between (past the
    log cap); the server accepts the chunk and records the gap as dropped."""

    job_id: Int64
    attempt: Int64
    rank: Int64
    offset: Count
    data: str  # base64


class StepLogChunk(LogChunk):
    step: Annotated[int, Field(ge=1, le=2**31 - 1)]


class GpuTelemetry(Strict):
    """One reading of one GPU (NVML, or generated for a simulated GPU).

    ``ecc_errors`` (uncorrectable, volatile) and ``xid_errors`` (critical Xid events seen
    since the agent started) are counters; the server drains the node when one rises.
    """

    index: int = Field(ge=0)
    utilization: float = Field(ge=0, le=100)  # duty cycle, percent
    memory_used: int = Field(ge=0)  # bytes
    memory_total: int = Field(ge=0)
    temperature: float | None = None  # Celsius
    power: float | None = None  # watts
    ecc_errors: int = Field(default=0, ge=0)
    xid_errors: int = Field(default=0, ge=0)
    last_xid: int | None = None  # the code of the latest critical Xid event, if any


class HookFailure(Strict):
    """A node hook that failed for a job attempt (``corral agent --prolog/--epilog``): the
    server drains the node; after a prolog it also gives back the job's tasks here, which
    never started, and requeues the job. ``exit_code``: None when the hook did not exit on
    its own (could not start, timed out)."""

    job_id: Int64
    attempt: Int64
    hook: Literal["prolog", "epilog"]
    exit_code: Int64 | None = None
    reason: str = Field(min_length=1, max_length=1024)  # quotes the hook's last output line


class SyncRequest(Strict):
    node: str
    agent_id: str = Field(min_length=1, max_length=64)
    tasks: list[TaskReport] = Field(default_factory=list)
    logs: list[LogChunk] = Field(default_factory=list)
    free_ports: list[Annotated[int, Field(ge=0, le=65535)]] = Field(default_factory=list)
    attributes: dict[str, float] | None = None  # fresh readings (temperature...); None: same
    shutdown: bool = False  # the agent is stopping: its tasks are gone, requeue their jobs
    gpus: list[GpuTelemetry] | None = None  # per-GPU readings at this sync; None: none taken
    steps: list[StepReport] = Field(default_factory=list)  # every step task it knows
    step_logs: list[StepLogChunk] = Field(default_factory=list)
    hook_failures: list[HookFailure] = Field(default_factory=list)  # not yet reported ones


class MountSpec(BaseModel):
    """A host path mounted into a task's container (``core.container.Mount``)."""

    source: str
    target: str
    read_only: bool = False


class DesiredTask(BaseModel):
    job_id: int
    attempt: int
    rank: int
    command: list[str] | str
    env: dict[str, str]
    workdir: str | None
    grace_period: float
    gpus: list[int] = Field(default_factory=list)  # device indices the task holds on this node
    user: str | None = None  # the Unix account the task runs as (the job's)
    # this task's share of the job's per-node resources.cpus / memory (bytes); None or 0:
    # the job asked for none, no limit
    cpus: float | None = None
    memory: int | None = None
    # the container it runs in (SPEC section 7); no image: the node's own filesystem
    image: str | None = None
    mounts: list[MountSpec] = Field(default_factory=list)
    shm_size: int | None = None  # bytes of its /dev/shm
    # every GPU the job holds on this node (device files in the container: local ranks
    # reach each other's GPUs, as without one); ``gpus`` are the task's own
    node_gpus: list[int] = Field(default_factory=list)


class DesiredStepTask(DesiredTask):
    """A job step's task: ``rank`` is its step rank (``CORRAL_STEP_RANK``)."""

    step: int


class TaskAck(BaseModel):
    job_id: int
    attempt: int
    rank: int
    log_offset: int  # bytes of this task's log the server holds
    final: bool  # the server recorded the task's exit


class StepAck(TaskAck):
    step: int


class SyncResponse(BaseModel):
    tasks: list[DesiredTask]
    acks: list[TaskAck]
    steps: list[DesiredStepTask] = Field(default_factory=list)  # step tasks to run here
    step_acks: list[StepAck] = Field(default_factory=list)
    sync_interval: float
    # how often an agent with nothing new to report syncs (None: every ``sync_interval``);
    # the watch still wakes it at once for new work
    heartbeat_interval: float | None = None
    log_cap: int  # bytes of each task's log the server keeps (the agent may drop more)
    # a spot notice: tasks stopped now get at most this grace (their job's otherwise)
    stop_grace: float | None = None


class WatchResponse(BaseModel):
    version: int  # pass it back as ``since``; a change means: sync now
