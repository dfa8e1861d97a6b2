"""SQLAlchemy ORM: the control plane's persistent state.

Every schema change comes with an Alembic migration in ``migrations/versions``.
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
    false,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    pass


class JobRow(Base):
    __tablename__ = "jobs"
    __table_args__ = (UniqueConstraint("array_job_id", "array_task_id", name="uq_jobs_array_task"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str | None] = mapped_column(String(253))
    user: Mapped[str] = mapped_column(String(128))
    queue: Mapped[str] = mapped_column(String(253), index=True)
    state: Mapped[str] = mapped_column(String(16), index=True)
    priority: Mapped[int] = mapped_column(Integer)
    priority_class: Mapped[str | None] = mapped_column(String(64))
    preemptible: Mapped[bool] = mapped_column(Boolean)
    manifest: Mapped[dict] = mapped_column(JSON)
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    submitted_at: Mapped[float] = mapped_column(Float)
    started_at: Mapped[float | None] = mapped_column(Float)
    ended_at: Mapped[float | None] = mapped_column(Float)
    reason: Mapped[str | None] = mapped_column(Text)
    position: Mapped[int | None] = mapped_column(Integer)
    estimated_start: Mapped[float | None] = mapped_column(Float)  # from the plan, while pending
    exit_code: Mapped[int | None] = mapped_column(Integer)
    master_port: Mapped[int | None] = mapped_column(Integer)
    time_limit: Mapped[float | None] = mapped_column(Float)  # seconds, from the manifest
    last_checkpoint_at: Mapped[float | None] = mapped_column(Float)  # reported by the job
    idle_since: Mapped[float | None] = mapped_column(Float)  # GPUs near 0% since then
    idle: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    updated_at: Mapped[float] = mapped_column(Float)
    # the Unix account its tasks run as, fixed at submission (None: jobs from before)
    unix_user: Mapped[str | None] = mapped_column(String(128))
    # held (``corral hold``): not scheduled until released
    held: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    # what it waits for, canonical (``core.dependency``); None: nothing
    dependency: Mapped[str | None] = mapped_column(Text)
    # an element of a job array (``core.array``): the array's id (its first element's job
    # id) and the element's index; None for other jobs
    array_job_id: Mapped[int | None] = mapped_column(Integer)
    array_task_id: Mapped[int | None] = mapped_column(Integer)
    # the array's throttle (``%MAX``: at most MAX elements running at once), on each element
    array_max: Mapped[int | None] = mapped_column(Integer)


class TaskRow(Base):
    """One task of one attempt. While ``released`` is false it holds its devices."""

    __tablename__ = "tasks"
    __table_args__ = (
        Index("ix_tasks_job_attempt", "job_id", "attempt"),
        Index("ix_tasks_node_released", "node", "released"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id"))
    attempt: Mapped[int] = mapped_column(Integer)
    rank: Mapped[int] = mapped_column(Integer)
    node: Mapped[str] = mapped_column(String(253))
    node_rank: Mapped[int] = mapped_column(Integer)
    local_rank: Mapped[int] = mapped_column(Integer)
    gpus: Mapped[list] = mapped_column(JSON)
    gpu_milli: Mapped[int] = mapped_column(Integer, default=1000)
    gpu_memory: Mapped[int] = mapped_column(BigInteger, default=0)  # promised to a share
    mig_slots: Mapped[list] = mapped_column(JSON, default=list)  # aligned with gpus; [] if none
    cpus: Mapped[float] = mapped_column(Float, default=0.0)
    memory: Mapped[int] = mapped_column(BigInteger, default=0)
    state: Mapped[str] = mapped_column(String(16))  # assigned|running|terminating|exited|lost
    pid: Mapped[int | None] = mapped_column(Integer)
    exit_code: Mapped[int | None] = mapped_column(Integer)
    started_at: Mapped[float | None] = mapped_column(Float)
    ended_at: Mapped[float | None] = mapped_column(Float)
    released: Mapped[bool] = mapped_column(Boolean, default=False)
    log_size: Mapped[int] = mapped_column(BigInteger, default=0)  # bytes, dropped ones too
    # bytes of the log not stored: the oldest, deleted past the log cap, and any the agent
    # skipped (past its own cap)
    log_dropped: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    peak_memory: Mapped[int | None] = mapped_column(BigInteger)  # bytes, as the agent reported
    cpu_seconds: Mapped[float | None] = mapped_column(Float)
    reason: Mapped[str | None] = mapped_column(Text)  # why it ended, as the agent reported
    # GPU-seconds actually used: allocated GPU time weighted by reported utilization
    gpu_seconds_used: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")


class StepRow(Base):
    """A job step: a command a running job started on its own nodes through the agents
    (``POST /jobs/{id}/steps``), numbered from 1 within the job's attempt."""

    __tablename__ = "steps"
    __table_args__ = (UniqueConstraint("job_id", "attempt", "step", name="uq_steps_number"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id"))
    attempt: Mapped[int] = mapped_column(Integer)
    step: Mapped[int] = mapped_column(Integer)
    command: Mapped[list | str] = mapped_column(JSON)
    env: Mapped[dict] = mapped_column(JSON)
    workdir: Mapped[str | None] = mapped_column(String(4096))
    tasks_per_node: Mapped[int] = mapped_column(Integer)
    size: Mapped[int] = mapped_column(Integer)  # its number of tasks (CORRAL_STEP_WORLD_SIZE)
    created_by: Mapped[str] = mapped_column(String(128))  # a user, or job:<id> (its token)
    created_at: Mapped[float] = mapped_column(Float)
    cancelled_at: Mapped[float | None] = mapped_column(Float)


class StepTaskRow(Base):
    """One process of a step on one node. Never counts towards the job's outcome."""

    __tablename__ = "step_tasks"
    __table_args__ = (
        UniqueConstraint("job_id", "attempt", "step", "rank", name="uq_step_tasks_rank"),
        Index("ix_step_tasks_node_state", "node", "state"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id"))
    attempt: Mapped[int] = mapped_column(Integer)
    step: Mapped[int] = mapped_column(Integer)
    rank: Mapped[int] = mapped_column(Integer)  # 0..n-1 over the step's tasks
    node: Mapped[str] = mapped_column(String(253))
    local_rank: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(16))  # pending|running|exited|lost|cancelled
    pid: Mapped[int | None] = mapped_column(Integer)
    exit_code: Mapped[int | None] = mapped_column(Integer)
    started_at: Mapped[float | None] = mapped_column(Float)
    ended_at: Mapped[float | None] = mapped_column(Float)
    reason: Mapped[str | None] = mapped_column(Text)
    log_size: Mapped[int] = mapped_column(BigInteger, default=0)  # as TaskRow's
    log_dropped: Mapped[int] = mapped_column(BigInteger, default=0)


class LogChunkRow(Base):
    __tablename__ = "log_chunks"
    __table_args__ = (Index("ix_log_chunks_task", "job_id", "attempt", "step", "rank", "offset"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id"))
    attempt: Mapped[int] = mapped_column(Integer)
    # 0: a task of the job; else the step whose task (of rank ``rank``) logged it
    step: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    rank: Mapped[int] = mapped_column(Integer)
    offset: Mapped[int] = mapped_column(BigInteger)
    data: Mapped[bytes] = mapped_column(LargeBinary)


class EventRow(Base):
    """A state transition of a job or a node, with its reason."""

    __tablename__ = "events"
    __table_args__ = (Index("ix_events_entity", "entity", "entity_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    entity: Mapped[str] = mapped_column(String(8))  # job | node
    entity_id: Mapped[str] = mapped_column(String(253))
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    at: Mapped[float] = mapped_column(Float)
    from_state: Mapped[str] = mapped_column(String(16))
    to_state: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str] = mapped_column(Text)


class NodeRow(Base):
    __tablename__ = "nodes"

    name: Mapped[str] = mapped_column(String(253), primary_key=True)
    state: Mapped[str] = mapped_column(String(16))
    agent_id: Mapped[str] = mapped_column(String(64))
    address: Mapped[str] = mapped_column(String(253))
    devices: Mapped[list] = mapped_column(JSON)
    cpus: Mapped[float] = mapped_column(Float)
    memory: Mapped[int] = mapped_column(BigInteger)
    network: Mapped[list] = mapped_column(JSON)
    labels: Mapped[dict] = mapped_column(JSON)
    attributes: Mapped[dict] = mapped_column(JSON, default=dict)
    free_ports: Mapped[list] = mapped_column(JSON, default=list)
    registered_at: Mapped[float] = mapped_column(Float)
    last_heartbeat: Mapped[float] = mapped_column(Float)
    reason: Mapped[str | None] = mapped_column(Text)
    # GPU error counters already acted on, by GPU index: {"3": [ecc, xid]}
    gpu_errors: Mapped[dict | None] = mapped_column(JSON)
    # the hash of the node credential its first agent received; a later registration of
    # the name must present it (None: the next registration takes the name)
    credential_hash: Mapped[str | None] = mapped_column(String(64))
    # a spot notice's deadline: the node's work is stopped to end by then, and it leaves
    leave_at: Mapped[float | None] = mapped_column(Float)


class PoolUnitRow(Base):
    """A unit of a node pool (``core.pools.Unit``): one node, or a TPU slice's hosts."""

    __tablename__ = "pool_units"

    name: Mapped[str] = mapped_column(String(253), primary_key=True)
    pool: Mapped[str] = mapped_column(String(63), index=True)
    phase: Mapped[str] = mapped_column(String(16))
    since: Mapped[float] = mapped_column(Float)
    requested_at: Mapped[float] = mapped_column(Float)
    nodes: Mapped[list] = mapped_column(JSON)
    idle_since: Mapped[float | None] = mapped_column(Float)
    deadline: Mapped[float | None] = mapped_column(Float)
    reason: Mapped[str] = mapped_column(Text, default="")


class PoolFailureRow(Base):
    """A pool's provisioning failures in a row, for its backoff."""

    __tablename__ = "pool_failures"

    pool: Mapped[str] = mapped_column(String(63), primary_key=True)
    count: Mapped[int] = mapped_column(Integer)
    last: Mapped[float] = mapped_column(Float)


class QueueUsageRow(Base):
    """A queue's decayed past usage for fair share (``scheduling.fairshare.UsageLedger``),
    as of ``at``: GPU-, CPU- and memory-byte-seconds."""

    __tablename__ = "queue_usage"

    queue: Mapped[str] = mapped_column(String(253), primary_key=True)
    gpu: Mapped[float] = mapped_column(Float)
    cpu: Mapped[float] = mapped_column(Float)
    memory: Mapped[float] = mapped_column(Float)
    at: Mapped[float] = mapped_column(Float)


class TokenRow(Base):
    __tablename__ = "tokens"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    user: Mapped[str] = mapped_column(String(128))
    role: Mapped[str] = mapped_column(String(16))  # admin | user | join | node
    node: Mapped[str | None] = mapped_column(String(253))
    secret_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[float] = mapped_column(Float)
    revoked_at: Mapped[float | None] = mapped_column(Float)
    unix_user: Mapped[str | None] = mapped_column(String(128))  # None: the user's own name


class LeaseRow(Base):
    """The scheduler leader's lease (one row, ``name = "scheduler"``; ``server.leader``).

    Taken and renewed with compare-and-swap updates; ``epoch`` grows by one with every new
    holder, and every background write the leader makes first re-checks holder and epoch
    in its own transaction (fencing). ``wakes`` counts requests from other replicas for a
    scheduling cycle soon; ``changes`` counts the leader's writes that changed what agents
    should run (on ``changed_nodes``), so that replicas nudge the agents watching them.
    """

    __tablename__ = "leases"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    holder: Mapped[str | None] = mapped_column(String(128))
    address: Mapped[str | None] = mapped_column(String(253))
    epoch: Mapped[int] = mapped_column(BigInteger, default=0)
    acquired_at: Mapped[float] = mapped_column(Float, default=0.0)
    expires_at: Mapped[float] = mapped_column(Float, default=0.0)
    wakes: Mapped[int] = mapped_column(BigInteger, default=0)
    changes: Mapped[int] = mapped_column(BigInteger, default=0)
    changed_nodes: Mapped[list | None] = mapped_column(JSON)  # of the last change; None: any


class ServerSecretRow(Base):
    """A secret shared by every replica (e.g. the key that signs job tokens), created once."""

    __tablename__ = "server_secrets"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[float] = mapped_column(Float)


class IdempotencyKeyRow(Base):
    """A submission's ``Idempotency-Key``: one job per (user, key), enforced by the primary key."""

    __tablename__ = "idempotency_keys"

    user: Mapped[str] = mapped_column(String(128), primary_key=True)
    key: Mapped[str] = mapped_column(String(255), primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id"))
    manifest_hash: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[float] = mapped_column(Float)


class AuditRow(Base):
    """One state-changing API call: who, what, when and how it ended."""

    __tablename__ = "audit"
    __table_args__ = (Index("ix_audit_user_at", "user", "at"), Index("ix_audit_at", "at"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[float] = mapped_column(Float)
    user: Mapped[str | None] = mapped_column(String(128))  # None: no valid credential
    role: Mapped[str | None] = mapped_column(String(16))
    token_id: Mapped[int | None] = mapped_column(Integer)
    method: Mapped[str] = mapped_column(String(8))
    path: Mapped[str] = mapped_column(String(1024))
    target: Mapped[str | None] = mapped_column(String(253))  # job id, node name, token id
    status: Mapped[int] = mapped_column(Integer)
