"""REST response and request bodies of ``/api/v1`` (besides the manifest)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from corral.schemas.common import Strict
from corral.schemas.limits import MAX_JOB_PAGE as MAX_JOB_PAGE  # the routers' and CLI's


class Body(BaseModel):
    """Base of the response bodies: each builds its validator when first used, not at
    import, so that a command reading one kind of answer (``corral show``: a job) pays for
    that one alone (issue 21, a CLI that starts fast). Not for request bodies: FastAPI
    warns about a deferred model as a body parameter."""

    model_config = ConfigDict(defer_build=True)


class Health(Body):
    status: str  # "ok", or "degraded" when this replica cannot read the database
    version: str
    time: float
    replica: str | None = None  # this replica's id in the leader election
    leader: bool = False  # whether this replica runs the scheduling loop
    leader_address: str | None = None  # the URL of the replica that does
    leader_epoch: int | None = None  # grows by one with every new leader
    leader_since: float | None = None  # when that leader took the lease


class ReplicaHealth(Body):
    """One configured server address as the client saw it (``corral status``)."""

    address: str
    reachable: bool
    health: Health | None = None
    error: str | None = None


class TaskOut(Body):
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
    peak_memory: int | None = None  # bytes: the highest memory use the agent reported
    cpu_seconds: float | None = None  # CPU time used, as the agent reported
    reason: str | None = None  # why it ended, as the agent reported (out of memory...)
    role: str = "worker"  # its role (SPEC section 8; "worker" for a job without roles)
    role_rank: int = 0  # among its role's tasks
    daemon: bool = False  # of a role that serves the others (its outcome is not the job's)


class EventOut(Body):
    at: float
    attempt: int
    from_state: str
    to_state: str
    reason: str


class AttemptOut(Body):
    attempt: int
    nodes: list[str]
    started_at: float | None
    ended_at: float | None
    outcome: str | None  # why it ended


class ArrayOut(Body):
    """A job array seen whole (``core.array``): with each element of it (``JobOut.array``)
    shown one by one, and with the row standing for it in a grouped list."""

    job_id: int  # the array's id: its first element's job id
    spec: str  # as submitted, canonical: "0-99%4"
    tasks: str  # its indices, compact: "0-99"
    count: int  # elements
    max_running: int | None = None  # the throttle (%MAX)
    states: dict[str, int] = Field(default_factory=dict)  # elements by state
    job_ids: list[int] = Field(default_factory=list)  # in index order: in a submission's answer


class JobOut(Body):
    id: int
    name: str | None
    user: str
    queue: str
    state: str
    unix_user: str | None = None  # the Unix account its tasks run as (None: older jobs)
    priority: int
    priority_class: str | None
    preemptible: bool
    attempt: int
    nodes: int  # of the whole job (every role's)
    tasks_per_node: int  # of its largest role, for a job with roles
    kind: str = "pytorch"
    world_size: int = 1  # tasks of the whole job
    roles: list[str] = Field(default_factory=list)  # "name: N x shape", in rank order
    gpus: str  # per node, as asked ("8", "H100:8", "0.5")
    total_gpus: float
    reason: str | None  # why pending, or why it ended
    position: int | None  # place in the queue while pending
    estimated_start: float | None = None  # while pending: when it should start (an estimate)
    submitted_at: float
    started_at: float | None
    ended_at: float | None
    exit_code: int | None
    manifest: dict[str, Any]
    last_checkpoint_at: float | None = None  # the job's last reported checkpoint
    idle_since: float | None = None  # since when its GPUs have stayed near 0% utilization
    idle: bool = False  # idle for longer than its queue's idle policy allows (flagged)
    held: bool = False  # ``corral hold``: not scheduled until released
    dependency: str | None = None  # what it waits for (Slurm syntax), as submitted
    array_job_id: int | None = None  # an element of a job array: the array's id
    array_task_id: int | None = None  # and its index: element ``{array_job_id}_{array_task_id}``
    # the whole array: for one element shown alone (``GET /jobs/ID``, a submission's answer),
    # and for the row standing for a whole array in a grouped list (``group_arrays``)
    array: ArrayOut | None = None
    tasks: list[TaskOut] = Field(default_factory=list)
    attempts: list[AttemptOut] = Field(default_factory=list)
    events: list[EventOut] = Field(default_factory=list)

    @property
    def ref(self) -> str:
        """How users name it: ``12``, or ``12_3`` for element 3 of array 12."""
        if self.array_job_id is None or self.array_task_id is None:
            return str(self.id)
        return f"{self.array_job_id}_{self.array_task_id}"


class CheckpointIn(Strict):
    """A job reports a complete checkpoint (preemption then counts work lost from here)."""

    step: int | None = Field(default=None, ge=0)
    path: str | None = Field(default=None, max_length=4096)


class JobList(Body):
    """A page of jobs, oldest first: the newest ``limit`` matching jobs below the cursor.
    ``has_more``: older matching jobs exist; ``next``: the cursor (``before``) that asks
    for them; ``remaining``: how many there are (only when asked, ``count=true``)."""

    jobs: list[JobOut]
    has_more: bool = False
    next: int | None = None
    remaining: int | None = None


class AdviceOut(Body):
    """What would let a pending job start sooner (empty for jobs not pending)."""

    hints: list[str]


class LogOut(Body):
    job_id: int
    attempt: int
    task: int
    step: int = 0  # the step whose task's log this is (0: the job's own task)
    offset: int  # where to continue reading
    data: str
    complete: bool  # the task has ended and its whole log is here


class DeviceOut(Body):
    index: int
    model: str
    memory: int
    nvlink_domain: int
    uuid: str | None = None
    used_by: list[int] = Field(default_factory=list)  # job ids
    share_used: float = 0.0
    kind: str = "gpu"  # or "tpu": a TPU chip (model: its generation)
    # the latest telemetry reading of the GPU (None: none within the node timeout)
    utilization: float | None = None
    memory_used: int | None = None
    temperature: float | None = None


class NodeOut(Body):
    name: str
    state: str
    address: str
    gpus: int  # GPU devices (TPU chips are counted in tpu_chips)
    gpus_used: float
    models: list[str]
    tpu_chips: int = 0  # a TPU host's chips (it takes TPU slices only)
    tpu_chips_used: int = 0
    cpus: float
    memory: int
    network: list[str]
    labels: dict[str, str]
    attributes: dict[str, float] = Field(default_factory=dict)
    last_heartbeat: float | None
    jobs: list[int]
    devices: list[DeviceOut]
    reason: str | None = None


class NodeList(Body):
    nodes: list[NodeOut]


class NoticeIn(BaseModel):  # a request body: not deferred (see Body)
    """A spot termination notice: the node leaves within ``deadline`` seconds."""

    deadline: float = Field(ge=0, le=86400)


class NoticeOut(Body):
    nodes: list[str]  # the nodes given notice (a pool unit's leave together)
    leave_at: float


class UnitOut(Body):
    name: str
    phase: str
    nodes: list[str]
    since: float
    requested_at: float
    idle_since: float | None = None
    deadline: float | None = None
    reason: str = ""


class PoolOut(Body):
    name: str
    provider: str
    min: int
    max: int
    desired: int  # units provisioning or ready
    ready: int
    provisioning: int
    draining: int
    hosts_per_unit: int
    unit: str  # what one unit is: "a node (8x H100)"
    spot: bool
    cost_per_hour: float  # of one node (a TPU pool: one host)
    cost_now: float  # per hour, of the units that count now
    failures: int = 0  # provisioning failures in a row
    retry_at: float | None = None  # backing off until then
    units: list[UnitOut]


class PoolList(Body):
    pools: list[PoolOut]


class QueueOut(Body):
    name: str
    weight: float
    quota: dict[str, float]
    cohort: str | None
    running: int
    pending: int
    gpus_used: float
    borrowed: dict[str, float] = Field(default_factory=dict)  # usage past the nominal quota
    borrowing_limit: dict[str, float] = Field(default_factory=dict)
    share: float = 0.0  # weighted dominant share (fair share orders by it, lowest first)


class QueueList(Body):
    queues: list[QueueOut]


UNIX_NAME = r"^[A-Za-z0-9_][A-Za-z0-9_.-]*\$?$"  # a POSIX-style account name


class TokenCreate(Strict):
    user: str = Field(min_length=1, max_length=128)
    # join: what agents register nodes with (a second one, to rotate the server's first)
    role: str = Field(default="user", pattern="^(admin|user|join)$")
    # the Unix account the user's jobs run as on the nodes; None: the user name itself
    unix_user: str | None = Field(default=None, min_length=1, max_length=128, pattern=UNIX_NAME)


class TokenOut(Body):
    id: int
    user: str
    role: str
    created_at: float
    revoked_at: float | None
    token: str | None = None  # only when just created
    unix_user: str | None = None  # the account its jobs run as (None: ``user``)


class TokenList(Body):
    tokens: list[TokenOut]


class TelemetrySample(Body):
    """One GPU reading as the server keeps it; ``job_id`` is null when the GPU was idle."""

    at: float
    node: str
    gpu: int
    utilization: float
    memory_used: int
    memory_total: int
    temperature: float | None
    power: float | None
    ecc_errors: int
    xid_errors: int
    job_id: int | None
    job_ids: list[int] = Field(default_factory=list)  # every job sharing the GPU


class TelemetryOut(Body):
    samples: list[TelemetrySample]


class EventItem(Body):
    """One job or node transition from the history, in id order."""

    id: int
    at: float
    entity: str  # job | node
    entity_id: str
    attempt: int
    from_state: str
    to_state: str
    reason: str


class EventList(Body):
    """``has_more``: more matching events lie past this page (after its last one when
    reading on from ``since_id``, before its first when reading the latest)."""

    events: list[EventItem]
    has_more: bool = False


class UsageRow(Body):
    """Accounting of one queue, user or job over a window (``key`` names it)."""

    key: str
    jobs: int  # jobs with a task running in the window, or submitted in it
    gpu_hours_allocated: float
    gpu_hours_used: float  # allocation weighted by reported GPU utilization
    avg_wait: float | None  # seconds from submission to first start (started jobs)
    max_wait: float | None
    preemptions: int
    cpu_seconds: float = 0.0  # CPU time the tasks used (as their agents reported)
    peak_memory: int | None = None  # bytes: the highest any one task reached
    queue: str | None = None  # by=job: the job's queue, user and name
    user: str | None = None
    name: str | None = None


class UsageOut(Body):
    by: str
    since: float
    until: float
    rows: list[UsageRow]


class ErrorOut(Body):
    """Every error answer of the API (``server/errors.py``). `code` names the error: the
    SDK raises the same class (``corral.errors.ERRORS_BY_CODE``)."""

    code: str = Field(
        description="invalid, unschedulable, unauthenticated, forbidden, not_found, conflict, "
        "too_large, limit_exceeded, unavailable, method_not_allowed or http_error",
        examples=["not_found"],
    )
    message: str = Field(description="one line for a person", examples=["no job with id 12"])


class WhoAmI(Body):
    """The caller as the server sees the token."""

    user: str
    role: str  # admin | user | join | node
    token_id: int
    node: str | None = None  # a node credential's node


class AuditOut(Body):
    id: int
    at: float
    user: str | None  # None: the call carried no valid credential
    role: str | None
    token_id: int | None
    method: str
    path: str
    target: str | None  # job id, node name or token id
    status: int  # the HTTP status answered


class AuditList(Body):
    """The newest entries below the cursor, oldest first; ``has_more``: older ones exist,
    ``next``: the cursor (``before``) that asks for them."""

    entries: list[AuditOut]
    has_more: bool = False
    next: int | None = None
