from google.protobuf import empty_pb2 as _empty_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SubmitJobRequest(_message.Message):
    __slots__ = ("manifest", "idempotency_key")
    MANIFEST_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    manifest: str
    idempotency_key: str
    def __init__(self, manifest: _Optional[str] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class JobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class ListJobsRequest(_message.Message):
    __slots__ = ("all", "queue", "state", "limit", "group_arrays", "before", "count")
    ALL_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    GROUP_ARRAYS_FIELD_NUMBER: _ClassVar[int]
    BEFORE_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    all: bool
    queue: str
    state: str
    limit: int
    group_arrays: bool
    before: int
    count: bool
    def __init__(self, all: _Optional[bool] = ..., queue: _Optional[str] = ..., state: _Optional[str] = ..., limit: _Optional[int] = ..., group_arrays: _Optional[bool] = ..., before: _Optional[int] = ..., count: _Optional[bool] = ...) -> None: ...

class LogsRequest(_message.Message):
    __slots__ = ("job_id", "task", "attempt", "offset", "step", "follow")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    FOLLOW_FIELD_NUMBER: _ClassVar[int]
    job_id: int
    task: int
    attempt: int
    offset: int
    step: int
    follow: bool
    def __init__(self, job_id: _Optional[int] = ..., task: _Optional[int] = ..., attempt: _Optional[int] = ..., offset: _Optional[int] = ..., step: _Optional[int] = ..., follow: _Optional[bool] = ...) -> None: ...

class NodeRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class NoticeRequest(_message.Message):
    __slots__ = ("name", "deadline")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    name: str
    deadline: float
    def __init__(self, name: _Optional[str] = ..., deadline: _Optional[float] = ...) -> None: ...

class CreateTokenRequest(_message.Message):
    __slots__ = ("user", "role", "unix_user")
    USER_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    UNIX_USER_FIELD_NUMBER: _ClassVar[int]
    user: str
    role: str
    unix_user: str
    def __init__(self, user: _Optional[str] = ..., role: _Optional[str] = ..., unix_user: _Optional[str] = ...) -> None: ...

class TokenRequest(_message.Message):
    __slots__ = ("token_id",)
    TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    token_id: int
    def __init__(self, token_id: _Optional[int] = ...) -> None: ...

class ListEventsRequest(_message.Message):
    __slots__ = ("since_id", "limit", "entity", "entity_id")
    SINCE_ID_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    ENTITY_FIELD_NUMBER: _ClassVar[int]
    ENTITY_ID_FIELD_NUMBER: _ClassVar[int]
    since_id: int
    limit: int
    entity: str
    entity_id: str
    def __init__(self, since_id: _Optional[int] = ..., limit: _Optional[int] = ..., entity: _Optional[str] = ..., entity_id: _Optional[str] = ...) -> None: ...

class WatchEventsRequest(_message.Message):
    __slots__ = ("since_id", "entity", "entity_id")
    SINCE_ID_FIELD_NUMBER: _ClassVar[int]
    ENTITY_FIELD_NUMBER: _ClassVar[int]
    ENTITY_ID_FIELD_NUMBER: _ClassVar[int]
    since_id: int
    entity: str
    entity_id: str
    def __init__(self, since_id: _Optional[int] = ..., entity: _Optional[str] = ..., entity_id: _Optional[str] = ...) -> None: ...

class Task(_message.Message):
    __slots__ = ("rank", "node", "node_rank", "local_rank", "gpus", "gpu_share", "mig", "state", "pid", "exit_code", "started_at", "ended_at", "peak_memory", "cpu_seconds", "reason", "role", "role_rank", "daemon")
    RANK_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    NODE_RANK_FIELD_NUMBER: _ClassVar[int]
    LOCAL_RANK_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    GPU_SHARE_FIELD_NUMBER: _ClassVar[int]
    MIG_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    ENDED_AT_FIELD_NUMBER: _ClassVar[int]
    PEAK_MEMORY_FIELD_NUMBER: _ClassVar[int]
    CPU_SECONDS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    ROLE_RANK_FIELD_NUMBER: _ClassVar[int]
    DAEMON_FIELD_NUMBER: _ClassVar[int]
    rank: int
    node: str
    node_rank: int
    local_rank: int
    gpus: _containers.RepeatedScalarFieldContainer[int]
    gpu_share: float
    mig: _containers.RepeatedScalarFieldContainer[str]
    state: str
    pid: int
    exit_code: int
    started_at: float
    ended_at: float
    peak_memory: int
    cpu_seconds: float
    reason: str
    role: str
    role_rank: int
    daemon: bool
    def __init__(self, rank: _Optional[int] = ..., node: _Optional[str] = ..., node_rank: _Optional[int] = ..., local_rank: _Optional[int] = ..., gpus: _Optional[_Iterable[int]] = ..., gpu_share: _Optional[float] = ..., mig: _Optional[_Iterable[str]] = ..., state: _Optional[str] = ..., pid: _Optional[int] = ..., exit_code: _Optional[int] = ..., started_at: _Optional[float] = ..., ended_at: _Optional[float] = ..., peak_memory: _Optional[int] = ..., cpu_seconds: _Optional[float] = ..., reason: _Optional[str] = ..., role: _Optional[str] = ..., role_rank: _Optional[int] = ..., daemon: _Optional[bool] = ...) -> None: ...

class JobEvent(_message.Message):
    __slots__ = ("at", "attempt", "from_state", "to_state", "reason")
    AT_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    FROM_STATE_FIELD_NUMBER: _ClassVar[int]
    TO_STATE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    at: float
    attempt: int
    from_state: str
    to_state: str
    reason: str
    def __init__(self, at: _Optional[float] = ..., attempt: _Optional[int] = ..., from_state: _Optional[str] = ..., to_state: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class Attempt(_message.Message):
    __slots__ = ("attempt", "nodes", "started_at", "ended_at", "outcome")
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    ENDED_AT_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    nodes: _containers.RepeatedScalarFieldContainer[str]
    started_at: float
    ended_at: float
    outcome: str
    def __init__(self, attempt: _Optional[int] = ..., nodes: _Optional[_Iterable[str]] = ..., started_at: _Optional[float] = ..., ended_at: _Optional[float] = ..., outcome: _Optional[str] = ...) -> None: ...

class JobArray(_message.Message):
    __slots__ = ("job_id", "spec", "tasks", "count", "max_running", "states", "job_ids")
    class StatesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    MAX_RUNNING_FIELD_NUMBER: _ClassVar[int]
    STATES_FIELD_NUMBER: _ClassVar[int]
    JOB_IDS_FIELD_NUMBER: _ClassVar[int]
    job_id: int
    spec: str
    tasks: str
    count: int
    max_running: int
    states: _containers.ScalarMap[str, int]
    job_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, job_id: _Optional[int] = ..., spec: _Optional[str] = ..., tasks: _Optional[str] = ..., count: _Optional[int] = ..., max_running: _Optional[int] = ..., states: _Optional[_Mapping[str, int]] = ..., job_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class Job(_message.Message):
    __slots__ = ("id", "name", "user", "queue", "state", "unix_user", "priority", "priority_class", "preemptible", "attempt", "nodes", "tasks_per_node", "kind", "world_size", "roles", "gpus", "total_gpus", "reason", "position", "estimated_start", "submitted_at", "started_at", "ended_at", "exit_code", "manifest", "last_checkpoint_at", "idle_since", "idle", "held", "dependency", "array_job_id", "array_task_id", "array", "tasks", "attempts", "events")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    UNIX_USER_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_CLASS_FIELD_NUMBER: _ClassVar[int]
    PREEMPTIBLE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    TASKS_PER_NODE_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    ROLES_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_GPUS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    ESTIMATED_START_FIELD_NUMBER: _ClassVar[int]
    SUBMITTED_AT_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    ENDED_AT_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    MANIFEST_FIELD_NUMBER: _ClassVar[int]
    LAST_CHECKPOINT_AT_FIELD_NUMBER: _ClassVar[int]
    IDLE_SINCE_FIELD_NUMBER: _ClassVar[int]
    IDLE_FIELD_NUMBER: _ClassVar[int]
    HELD_FIELD_NUMBER: _ClassVar[int]
    DEPENDENCY_FIELD_NUMBER: _ClassVar[int]
    ARRAY_JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ARRAY_TASK_ID_FIELD_NUMBER: _ClassVar[int]
    ARRAY_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    id: int
    name: str
    user: str
    queue: str
    state: str
    unix_user: str
    priority: int
    priority_class: str
    preemptible: bool
    attempt: int
    nodes: int
    tasks_per_node: int
    kind: str
    world_size: int
    roles: _containers.RepeatedScalarFieldContainer[str]
    gpus: str
    total_gpus: float
    reason: str
    position: int
    estimated_start: float
    submitted_at: float
    started_at: float
    ended_at: float
    exit_code: int
    manifest: str
    last_checkpoint_at: float
    idle_since: float
    idle: bool
    held: bool
    dependency: str
    array_job_id: int
    array_task_id: int
    array: JobArray
    tasks: _containers.RepeatedCompositeFieldContainer[Task]
    attempts: _containers.RepeatedCompositeFieldContainer[Attempt]
    events: _containers.RepeatedCompositeFieldContainer[JobEvent]
    def __init__(self, id: _Optional[int] = ..., name: _Optional[str] = ..., user: _Optional[str] = ..., queue: _Optional[str] = ..., state: _Optional[str] = ..., unix_user: _Optional[str] = ..., priority: _Optional[int] = ..., priority_class: _Optional[str] = ..., preemptible: _Optional[bool] = ..., attempt: _Optional[int] = ..., nodes: _Optional[int] = ..., tasks_per_node: _Optional[int] = ..., kind: _Optional[str] = ..., world_size: _Optional[int] = ..., roles: _Optional[_Iterable[str]] = ..., gpus: _Optional[str] = ..., total_gpus: _Optional[float] = ..., reason: _Optional[str] = ..., position: _Optional[int] = ..., estimated_start: _Optional[float] = ..., submitted_at: _Optional[float] = ..., started_at: _Optional[float] = ..., ended_at: _Optional[float] = ..., exit_code: _Optional[int] = ..., manifest: _Optional[str] = ..., last_checkpoint_at: _Optional[float] = ..., idle_since: _Optional[float] = ..., idle: _Optional[bool] = ..., held: _Optional[bool] = ..., dependency: _Optional[str] = ..., array_job_id: _Optional[int] = ..., array_task_id: _Optional[int] = ..., array: _Optional[_Union[JobArray, _Mapping]] = ..., tasks: _Optional[_Iterable[_Union[Task, _Mapping]]] = ..., attempts: _Optional[_Iterable[_Union[Attempt, _Mapping]]] = ..., events: _Optional[_Iterable[_Union[JobEvent, _Mapping]]] = ...) -> None: ...

class JobList(_message.Message):
    __slots__ = ("jobs", "has_more", "next", "remaining")
    JOBS_FIELD_NUMBER: _ClassVar[int]
    HAS_MORE_FIELD_NUMBER: _ClassVar[int]
    NEXT_FIELD_NUMBER: _ClassVar[int]
    REMAINING_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[Job]
    has_more: bool
    next: int
    remaining: int
    def __init__(self, jobs: _Optional[_Iterable[_Union[Job, _Mapping]]] = ..., has_more: _Optional[bool] = ..., next: _Optional[int] = ..., remaining: _Optional[int] = ...) -> None: ...

class Advice(_message.Message):
    __slots__ = ("hints",)
    HINTS_FIELD_NUMBER: _ClassVar[int]
    hints: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, hints: _Optional[_Iterable[str]] = ...) -> None: ...

class LogChunk(_message.Message):
    __slots__ = ("job_id", "attempt", "task", "step", "offset", "data", "complete")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    COMPLETE_FIELD_NUMBER: _ClassVar[int]
    job_id: int
    attempt: int
    task: int
    step: int
    offset: int
    data: str
    complete: bool
    def __init__(self, job_id: _Optional[int] = ..., attempt: _Optional[int] = ..., task: _Optional[int] = ..., step: _Optional[int] = ..., offset: _Optional[int] = ..., data: _Optional[str] = ..., complete: _Optional[bool] = ...) -> None: ...

class Device(_message.Message):
    __slots__ = ("index", "model", "memory", "nvlink_domain", "uuid", "used_by", "share_used", "kind", "utilization", "memory_used", "temperature")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    NVLINK_DOMAIN_FIELD_NUMBER: _ClassVar[int]
    UUID_FIELD_NUMBER: _ClassVar[int]
    USED_BY_FIELD_NUMBER: _ClassVar[int]
    SHARE_USED_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    UTILIZATION_FIELD_NUMBER: _ClassVar[int]
    MEMORY_USED_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    index: int
    model: str
    memory: int
    nvlink_domain: int
    uuid: str
    used_by: _containers.RepeatedScalarFieldContainer[int]
    share_used: float
    kind: str
    utilization: float
    memory_used: int
    temperature: float
    def __init__(self, index: _Optional[int] = ..., model: _Optional[str] = ..., memory: _Optional[int] = ..., nvlink_domain: _Optional[int] = ..., uuid: _Optional[str] = ..., used_by: _Optional[_Iterable[int]] = ..., share_used: _Optional[float] = ..., kind: _Optional[str] = ..., utilization: _Optional[float] = ..., memory_used: _Optional[int] = ..., temperature: _Optional[float] = ...) -> None: ...

class Node(_message.Message):
    __slots__ = ("name", "state", "address", "gpus", "gpus_used", "models", "tpu_chips", "tpu_chips_used", "cpus", "memory", "network", "labels", "attributes", "last_heartbeat", "jobs", "devices", "reason")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class AttributesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    GPUS_USED_FIELD_NUMBER: _ClassVar[int]
    MODELS_FIELD_NUMBER: _ClassVar[int]
    TPU_CHIPS_FIELD_NUMBER: _ClassVar[int]
    TPU_CHIPS_USED_FIELD_NUMBER: _ClassVar[int]
    CPUS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    NETWORK_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    LAST_HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    name: str
    state: str
    address: str
    gpus: int
    gpus_used: float
    models: _containers.RepeatedScalarFieldContainer[str]
    tpu_chips: int
    tpu_chips_used: int
    cpus: float
    memory: int
    network: _containers.RepeatedScalarFieldContainer[str]
    labels: _containers.ScalarMap[str, str]
    attributes: _containers.ScalarMap[str, float]
    last_heartbeat: float
    jobs: _containers.RepeatedScalarFieldContainer[int]
    devices: _containers.RepeatedCompositeFieldContainer[Device]
    reason: str
    def __init__(self, name: _Optional[str] = ..., state: _Optional[str] = ..., address: _Optional[str] = ..., gpus: _Optional[int] = ..., gpus_used: _Optional[float] = ..., models: _Optional[_Iterable[str]] = ..., tpu_chips: _Optional[int] = ..., tpu_chips_used: _Optional[int] = ..., cpus: _Optional[float] = ..., memory: _Optional[int] = ..., network: _Optional[_Iterable[str]] = ..., labels: _Optional[_Mapping[str, str]] = ..., attributes: _Optional[_Mapping[str, float]] = ..., last_heartbeat: _Optional[float] = ..., jobs: _Optional[_Iterable[int]] = ..., devices: _Optional[_Iterable[_Union[Device, _Mapping]]] = ..., reason: _Optional[str] = ...) -> None: ...

class NodeList(_message.Message):
    __slots__ = ("nodes",)
    NODES_FIELD_NUMBER: _ClassVar[int]
    nodes: _containers.RepeatedCompositeFieldContainer[Node]
    def __init__(self, nodes: _Optional[_Iterable[_Union[Node, _Mapping]]] = ...) -> None: ...

class Notice(_message.Message):
    __slots__ = ("nodes", "leave_at")
    NODES_FIELD_NUMBER: _ClassVar[int]
    LEAVE_AT_FIELD_NUMBER: _ClassVar[int]
    nodes: _containers.RepeatedScalarFieldContainer[str]
    leave_at: float
    def __init__(self, nodes: _Optional[_Iterable[str]] = ..., leave_at: _Optional[float] = ...) -> None: ...

class Queue(_message.Message):
    __slots__ = ("name", "weight", "quota", "cohort", "running", "pending", "gpus_used", "borrowed", "borrowing_limit", "share")
    class QuotaEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    class BorrowedEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    class BorrowingLimitEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    QUOTA_FIELD_NUMBER: _ClassVar[int]
    COHORT_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    GPUS_USED_FIELD_NUMBER: _ClassVar[int]
    BORROWED_FIELD_NUMBER: _ClassVar[int]
    BORROWING_LIMIT_FIELD_NUMBER: _ClassVar[int]
    SHARE_FIELD_NUMBER: _ClassVar[int]
    name: str
    weight: float
    quota: _containers.ScalarMap[str, float]
    cohort: str
    running: int
    pending: int
    gpus_used: float
    borrowed: _containers.ScalarMap[str, float]
    borrowing_limit: _containers.ScalarMap[str, float]
    share: float
    def __init__(self, name: _Optional[str] = ..., weight: _Optional[float] = ..., quota: _Optional[_Mapping[str, float]] = ..., cohort: _Optional[str] = ..., running: _Optional[int] = ..., pending: _Optional[int] = ..., gpus_used: _Optional[float] = ..., borrowed: _Optional[_Mapping[str, float]] = ..., borrowing_limit: _Optional[_Mapping[str, float]] = ..., share: _Optional[float] = ...) -> None: ...

class QueueList(_message.Message):
    __slots__ = ("queues",)
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    queues: _containers.RepeatedCompositeFieldContainer[Queue]
    def __init__(self, queues: _Optional[_Iterable[_Union[Queue, _Mapping]]] = ...) -> None: ...

class Unit(_message.Message):
    __slots__ = ("name", "phase", "nodes", "since", "requested_at", "idle_since", "deadline", "reason")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    REQUESTED_AT_FIELD_NUMBER: _ClassVar[int]
    IDLE_SINCE_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    name: str
    phase: str
    nodes: _containers.RepeatedScalarFieldContainer[str]
    since: float
    requested_at: float
    idle_since: float
    deadline: float
    reason: str
    def __init__(self, name: _Optional[str] = ..., phase: _Optional[str] = ..., nodes: _Optional[_Iterable[str]] = ..., since: _Optional[float] = ..., requested_at: _Optional[float] = ..., idle_since: _Optional[float] = ..., deadline: _Optional[float] = ..., reason: _Optional[str] = ...) -> None: ...

class Pool(_message.Message):
    __slots__ = ("name", "provider", "min", "max", "desired", "ready", "provisioning", "draining", "hosts_per_unit", "unit", "spot", "cost_per_hour", "cost_now", "failures", "retry_at", "units")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    MIN_FIELD_NUMBER: _ClassVar[int]
    MAX_FIELD_NUMBER: _ClassVar[int]
    DESIRED_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    PROVISIONING_FIELD_NUMBER: _ClassVar[int]
    DRAINING_FIELD_NUMBER: _ClassVar[int]
    HOSTS_PER_UNIT_FIELD_NUMBER: _ClassVar[int]
    UNIT_FIELD_NUMBER: _ClassVar[int]
    SPOT_FIELD_NUMBER: _ClassVar[int]
    COST_PER_HOUR_FIELD_NUMBER: _ClassVar[int]
    COST_NOW_FIELD_NUMBER: _ClassVar[int]
    FAILURES_FIELD_NUMBER: _ClassVar[int]
    RETRY_AT_FIELD_NUMBER: _ClassVar[int]
    UNITS_FIELD_NUMBER: _ClassVar[int]
    name: str
    provider: str
    min: int
    max: int
    desired: int
    ready: int
    provisioning: int
    draining: int
    hosts_per_unit: int
    unit: str
    spot: bool
    cost_per_hour: float
    cost_now: float
    failures: int
    retry_at: float
    units: _containers.RepeatedCompositeFieldContainer[Unit]
    def __init__(self, name: _Optional[str] = ..., provider: _Optional[str] = ..., min: _Optional[int] = ..., max: _Optional[int] = ..., desired: _Optional[int] = ..., ready: _Optional[int] = ..., provisioning: _Optional[int] = ..., draining: _Optional[int] = ..., hosts_per_unit: _Optional[int] = ..., unit: _Optional[str] = ..., spot: _Optional[bool] = ..., cost_per_hour: _Optional[float] = ..., cost_now: _Optional[float] = ..., failures: _Optional[int] = ..., retry_at: _Optional[float] = ..., units: _Optional[_Iterable[_Union[Unit, _Mapping]]] = ...) -> None: ...

class PoolList(_message.Message):
    __slots__ = ("pools",)
    POOLS_FIELD_NUMBER: _ClassVar[int]
    pools: _containers.RepeatedCompositeFieldContainer[Pool]
    def __init__(self, pools: _Optional[_Iterable[_Union[Pool, _Mapping]]] = ...) -> None: ...

class Event(_message.Message):
    __slots__ = ("id", "at", "entity", "entity_id", "attempt", "from_state", "to_state", "reason")
    ID_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    ENTITY_FIELD_NUMBER: _ClassVar[int]
    ENTITY_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    FROM_STATE_FIELD_NUMBER: _ClassVar[int]
    TO_STATE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    id: int
    at: float
    entity: str
    entity_id: str
    attempt: int
    from_state: str
    to_state: str
    reason: str
    def __init__(self, id: _Optional[int] = ..., at: _Optional[float] = ..., entity: _Optional[str] = ..., entity_id: _Optional[str] = ..., attempt: _Optional[int] = ..., from_state: _Optional[str] = ..., to_state: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class EventList(_message.Message):
    __slots__ = ("events", "has_more")
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    HAS_MORE_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[Event]
    has_more: bool
    def __init__(self, events: _Optional[_Iterable[_Union[Event, _Mapping]]] = ..., has_more: _Optional[bool] = ...) -> None: ...

class Token(_message.Message):
    __slots__ = ("id", "user", "role", "created_at", "revoked_at", "token", "unix_user")
    ID_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    REVOKED_AT_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    UNIX_USER_FIELD_NUMBER: _ClassVar[int]
    id: int
    user: str
    role: str
    created_at: float
    revoked_at: float
    token: str
    unix_user: str
    def __init__(self, id: _Optional[int] = ..., user: _Optional[str] = ..., role: _Optional[str] = ..., created_at: _Optional[float] = ..., revoked_at: _Optional[float] = ..., token: _Optional[str] = ..., unix_user: _Optional[str] = ...) -> None: ...

class TokenList(_message.Message):
    __slots__ = ("tokens",)
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    tokens: _containers.RepeatedCompositeFieldContainer[Token]
    def __init__(self, tokens: _Optional[_Iterable[_Union[Token, _Mapping]]] = ...) -> None: ...

class WhoAmIResponse(_message.Message):
    __slots__ = ("user", "role", "token_id", "node")
    USER_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    user: str
    role: str
    token_id: int
    node: str
    def __init__(self, user: _Optional[str] = ..., role: _Optional[str] = ..., token_id: _Optional[int] = ..., node: _Optional[str] = ...) -> None: ...

class HealthResponse(_message.Message):
    __slots__ = ("status", "version", "time", "replica", "leader", "leader_address", "leader_epoch", "leader_since")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    REPLICA_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    LEADER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    LEADER_SINCE_FIELD_NUMBER: _ClassVar[int]
    status: str
    version: str
    time: float
    replica: str
    leader: bool
    leader_address: str
    leader_epoch: int
    leader_since: float
    def __init__(self, status: _Optional[str] = ..., version: _Optional[str] = ..., time: _Optional[float] = ..., replica: _Optional[str] = ..., leader: _Optional[bool] = ..., leader_address: _Optional[str] = ..., leader_epoch: _Optional[int] = ..., leader_since: _Optional[float] = ...) -> None: ...

class NodeTelemetryRequest(_message.Message):
    __slots__ = ("name", "since")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    name: str
    since: float
    def __init__(self, name: _Optional[str] = ..., since: _Optional[float] = ...) -> None: ...

class JobTelemetryRequest(_message.Message):
    __slots__ = ("job_id", "since")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    job_id: int
    since: float
    def __init__(self, job_id: _Optional[int] = ..., since: _Optional[float] = ...) -> None: ...

class TelemetrySample(_message.Message):
    __slots__ = ("at", "node", "gpu", "utilization", "memory_used", "memory_total", "temperature", "power", "ecc_errors", "xid_errors", "job_id", "job_ids")
    AT_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    GPU_FIELD_NUMBER: _ClassVar[int]
    UTILIZATION_FIELD_NUMBER: _ClassVar[int]
    MEMORY_USED_FIELD_NUMBER: _ClassVar[int]
    MEMORY_TOTAL_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    POWER_FIELD_NUMBER: _ClassVar[int]
    ECC_ERRORS_FIELD_NUMBER: _ClassVar[int]
    XID_ERRORS_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_IDS_FIELD_NUMBER: _ClassVar[int]
    at: float
    node: str
    gpu: int
    utilization: float
    memory_used: int
    memory_total: int
    temperature: float
    power: float
    ecc_errors: int
    xid_errors: int
    job_id: int
    job_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, at: _Optional[float] = ..., node: _Optional[str] = ..., gpu: _Optional[int] = ..., utilization: _Optional[float] = ..., memory_used: _Optional[int] = ..., memory_total: _Optional[int] = ..., temperature: _Optional[float] = ..., power: _Optional[float] = ..., ecc_errors: _Optional[int] = ..., xid_errors: _Optional[int] = ..., job_id: _Optional[int] = ..., job_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class Telemetry(_message.Message):
    __slots__ = ("samples",)
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    samples: _containers.RepeatedCompositeFieldContainer[TelemetrySample]
    def __init__(self, samples: _Optional[_Iterable[_Union[TelemetrySample, _Mapping]]] = ...) -> None: ...

class UsageRequest(_message.Message):
    __slots__ = ("by", "since", "until")
    BY_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    UNTIL_FIELD_NUMBER: _ClassVar[int]
    by: str
    since: float
    until: float
    def __init__(self, by: _Optional[str] = ..., since: _Optional[float] = ..., until: _Optional[float] = ...) -> None: ...

class UsageRow(_message.Message):
    __slots__ = ("key", "jobs", "gpu_hours_allocated", "gpu_hours_used", "avg_wait", "max_wait", "preemptions", "cpu_seconds", "peak_memory", "queue", "user", "name")
    KEY_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    GPU_HOURS_ALLOCATED_FIELD_NUMBER: _ClassVar[int]
    GPU_HOURS_USED_FIELD_NUMBER: _ClassVar[int]
    AVG_WAIT_FIELD_NUMBER: _ClassVar[int]
    MAX_WAIT_FIELD_NUMBER: _ClassVar[int]
    PREEMPTIONS_FIELD_NUMBER: _ClassVar[int]
    CPU_SECONDS_FIELD_NUMBER: _ClassVar[int]
    PEAK_MEMORY_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    key: str
    jobs: int
    gpu_hours_allocated: float
    gpu_hours_used: float
    avg_wait: float
    max_wait: float
    preemptions: int
    cpu_seconds: float
    peak_memory: int
    queue: str
    user: str
    name: str
    def __init__(self, key: _Optional[str] = ..., jobs: _Optional[int] = ..., gpu_hours_allocated: _Optional[float] = ..., gpu_hours_used: _Optional[float] = ..., avg_wait: _Optional[float] = ..., max_wait: _Optional[float] = ..., preemptions: _Optional[int] = ..., cpu_seconds: _Optional[float] = ..., peak_memory: _Optional[int] = ..., queue: _Optional[str] = ..., user: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class Usage(_message.Message):
    __slots__ = ("by", "since", "until", "rows")
    BY_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    UNTIL_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    by: str
    since: float
    until: float
    rows: _containers.RepeatedCompositeFieldContainer[UsageRow]
    def __init__(self, by: _Optional[str] = ..., since: _Optional[float] = ..., until: _Optional[float] = ..., rows: _Optional[_Iterable[_Union[UsageRow, _Mapping]]] = ...) -> None: ...

class ListAuditRequest(_message.Message):
    __slots__ = ("user", "since", "limit", "before")
    USER_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    BEFORE_FIELD_NUMBER: _ClassVar[int]
    user: str
    since: float
    limit: int
    before: int
    def __init__(self, user: _Optional[str] = ..., since: _Optional[float] = ..., limit: _Optional[int] = ..., before: _Optional[int] = ...) -> None: ...

class AuditEntry(_message.Message):
    __slots__ = ("id", "at", "user", "role", "token_id", "method", "path", "target", "status")
    ID_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    id: int
    at: float
    user: str
    role: str
    token_id: int
    method: str
    path: str
    target: str
    status: int
    def __init__(self, id: _Optional[int] = ..., at: _Optional[float] = ..., user: _Optional[str] = ..., role: _Optional[str] = ..., token_id: _Optional[int] = ..., method: _Optional[str] = ..., path: _Optional[str] = ..., target: _Optional[str] = ..., status: _Optional[int] = ...) -> None: ...

class AuditList(_message.Message):
    __slots__ = ("entries", "has_more", "next")
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    HAS_MORE_FIELD_NUMBER: _ClassVar[int]
    NEXT_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[AuditEntry]
    has_more: bool
    next: int
    def __init__(self, entries: _Optional[_Iterable[_Union[AuditEntry, _Mapping]]] = ..., has_more: _Optional[bool] = ..., next: _Optional[int] = ...) -> None: ...

class CheckpointRequest(_message.Message):
    __slots__ = ("job_id", "step", "path")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    job_id: int
    step: int
    path: str
    def __init__(self, job_id: _Optional[int] = ..., step: _Optional[int] = ..., path: _Optional[str] = ...) -> None: ...

class StartStepRequest(_message.Message):
    __slots__ = ("job_id", "command", "env", "nodes", "tasks_per_node", "workdir")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    TASKS_PER_NODE_FIELD_NUMBER: _ClassVar[int]
    WORKDIR_FIELD_NUMBER: _ClassVar[int]
    job_id: int
    command: _struct_pb2.Value
    env: _containers.ScalarMap[str, str]
    nodes: _containers.RepeatedScalarFieldContainer[str]
    tasks_per_node: int
    workdir: str
    def __init__(self, job_id: _Optional[int] = ..., command: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., env: _Optional[_Mapping[str, str]] = ..., nodes: _Optional[_Iterable[str]] = ..., tasks_per_node: _Optional[int] = ..., workdir: _Optional[str] = ...) -> None: ...

class ListStepsRequest(_message.Message):
    __slots__ = ("job_id", "attempt", "limit")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    job_id: int
    attempt: int
    limit: int
    def __init__(self, job_id: _Optional[int] = ..., attempt: _Optional[int] = ..., limit: _Optional[int] = ...) -> None: ...

class StepRequest(_message.Message):
    __slots__ = ("job_id", "step", "attempt")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    job_id: int
    step: int
    attempt: int
    def __init__(self, job_id: _Optional[int] = ..., step: _Optional[int] = ..., attempt: _Optional[int] = ...) -> None: ...

class StepTask(_message.Message):
    __slots__ = ("rank", "node", "local_rank", "state", "pid", "exit_code", "started_at", "ended_at", "reason")
    RANK_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    LOCAL_RANK_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    ENDED_AT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    rank: int
    node: str
    local_rank: int
    state: str
    pid: int
    exit_code: int
    started_at: float
    ended_at: float
    reason: str
    def __init__(self, rank: _Optional[int] = ..., node: _Optional[str] = ..., local_rank: _Optional[int] = ..., state: _Optional[str] = ..., pid: _Optional[int] = ..., exit_code: _Optional[int] = ..., started_at: _Optional[float] = ..., ended_at: _Optional[float] = ..., reason: _Optional[str] = ...) -> None: ...

class Step(_message.Message):
    __slots__ = ("job_id", "attempt", "step", "command", "state", "created_at", "created_by", "cancelled", "exit_code", "tasks")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    CREATED_BY_FIELD_NUMBER: _ClassVar[int]
    CANCELLED_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    job_id: int
    attempt: int
    step: int
    command: _struct_pb2.Value
    state: str
    created_at: float
    created_by: str
    cancelled: bool
    exit_code: int
    tasks: _containers.RepeatedCompositeFieldContainer[StepTask]
    def __init__(self, job_id: _Optional[int] = ..., attempt: _Optional[int] = ..., step: _Optional[int] = ..., command: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., state: _Optional[str] = ..., created_at: _Optional[float] = ..., created_by: _Optional[str] = ..., cancelled: _Optional[bool] = ..., exit_code: _Optional[int] = ..., tasks: _Optional[_Iterable[_Union[StepTask, _Mapping]]] = ...) -> None: ...

class StepList(_message.Message):
    __slots__ = ("steps",)
    STEPS_FIELD_NUMBER: _ClassVar[int]
    steps: _containers.RepeatedCompositeFieldContainer[Step]
    def __init__(self, steps: _Optional[_Iterable[_Union[Step, _Mapping]]] = ...) -> None: ...
