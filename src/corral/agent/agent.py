"""The node agent: register, then sync forever, reconciling desired against running tasks.

Level-triggered: every sync reports every task the agent knows and the log bytes the
server lacks; the answer lists every task that should run here. Tasks missing locally are
started; local tasks no longer wanted get SIGTERM, then SIGKILL after their grace period.
If the server is unreachable, tasks keep running and the agent retries.
"""

from __future__ import annotations

import base64
import logging
import os
import ssl
import threading
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from corral.agent.host import NodeDescription, free_ports, gpu_readings
from corral.agent.supervisor import ProcessSupervisor, TaskLaunch, TaskState, TaskStatus
from corral.agent.telemetry import (
    FAULTS_FILE,
    SIM_LOAD_ENV,
    LoadFiles,
    NvmlTelemetry,
    SimLoad,
    read_faults,
    simulated_sample,
)
from corral.schemas.agent import (
    DesiredTask,
    GpuTelemetry,
    LogChunk,
    RegisterRequest,
    SyncRequest,
    SyncResponse,
    TaskReport,
)

log = logging.getLogger("corral.agent")
LOG_CHUNK = 512 * 1024  # bytes per task per sync
MAX_BACKOFF = 5.0
WATCH_TIMEOUT = 30.0  # seconds one long-poll of /agent/watch may wait
TaskKey = tuple[int, int, int]  # job id, attempt, rank
SECRET_VARIABLES = ("CORRAL_TOKEN", "CORRAL_JOIN_TOKEN")


def task_base_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The agent's environment without its credentials: tasks must not inherit them."""
    return {k: v for k, v in environ.items() if k not in SECRET_VARIABLES}


@dataclass
class AgentSettings:
    servers: list[str]
    join_token: str
    name: str
    address: str
    node: NodeDescription
    home: Path  # logs live under home/logs
    checkpoint_root: Path
    sync_interval: float = 2.0
    read_gpu_health: bool = False  # report NVML readings (real GPUs) with each sync
    simulated: bool = False  # simulated GPUs: generated telemetry, CORRAL_SIM_LOAD_FILE
    ca_cert: Path | None = None  # verify an HTTPS server with this CA (else system CAs)


@dataclass
class _Tracked:
    launch: TaskLaunch
    gpus: tuple[int, ...] = ()
    load_file: Path | None = None  # CORRAL_SIM_LOAD_FILE on simulated nodes
    server_offset: int = 0  # log bytes the server holds
    server_final: bool = False  # the server recorded the exit
    wanted: bool = True


@dataclass
class Agent:
    settings: AgentSettings
    transport: httpx.BaseTransport | None = None
    agent_id: str = field(default_factory=lambda: uuid.uuid4().hex)

    def __post_init__(self) -> None:
        self._wake = threading.Event()
        self._stop = threading.Event()
        self.supervisor = ProcessSupervisor(
            on_exit=lambda _key: self._wake.set(), base_env=task_base_env(os.environ)
        )
        self.tasks: dict[TaskKey, _Tracked] = {}
        self._token: str | None = None
        self._server_index = 0
        self.interval = self.settings.sync_interval
        self._loads = LoadFiles()
        self._nvml = NvmlTelemetry() if self.settings.read_gpu_health else None
        if self._nvml is not None and not self._nvml.open():
            self._nvml = None

    # -- lifecycle -----------------------------------------------------------------

    def run(self) -> None:
        """Register and sync until :meth:`stop`; then stop every task (grace periods apply)."""
        threading.Thread(target=self._watch, name="corral-agent-watch", daemon=True).start()
        backoff = 0.2
        with httpx.Client(transport=self.transport, timeout=10.0, verify=self._verify) as http:
            self.http = http
            while not self._stop.is_set():
                try:
                    if self._token is None:
                        self._register()
                    self._sync_once()
                    backoff = 0.2
                    self._wake.wait(self.interval)
                    self._wake.clear()
                except httpx.HTTPStatusError as exc:
                    if exc.response.status_code in (401, 403, 404, 409):
                        log.warning("server refused this agent (%s); registering again", _msg(exc))
                        self._token = None
                    else:
                        log.warning("sync failed: %s", _msg(exc))
                        if exc.response.status_code >= 500:  # e.g. its database is gone
                            self._server_index += 1  # (a sync is safe to repeat anywhere)
                    self._stop.wait(backoff)
                    backoff = min(MAX_BACKOFF, backoff * 2)
                except httpx.TransportError as exc:
                    log.warning("server %s unreachable (%s); tasks keep running", self._url, exc)
                    self._server_index += 1
                    self._stop.wait(backoff)
                    backoff = min(MAX_BACKOFF, backoff * 2)
            self.supervisor.stop_all(wait=True)
            if self._nvml is not None:
                self._nvml.close()
            try:  # best effort: hand the work back so that it is requeued at once
                if self._token:
                    self._sync_once(shutdown=True)
            except httpx.HTTPError as exc:
                log.warning("could not tell the server this agent stopped: %s", exc)

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def _watch(self) -> None:
        """Long-poll the node's change version; wake the sync loop when it moves, so that
        placements, cancels and preemptions reach this node at once."""
        since = -1
        with httpx.Client(
            transport=self.transport, timeout=WATCH_TIMEOUT + 10, verify=self._verify
        ) as http:
            while not self._stop.is_set():
                token = self._token
                if token is None:
                    self._stop.wait(0.2)
                    continue
                try:
                    answer = http.get(
                        f"{self._url}/api/v1/agent/watch",
                        params={
                            "node": self.settings.name,
                            "since": since,
                            "timeout": WATCH_TIMEOUT,
                        },
                        headers={"Authorization": f"Bearer {token}"},
                    )
                    answer.raise_for_status()
                    version = int(answer.json()["version"])
                except (httpx.HTTPError, ValueError, KeyError):
                    self._stop.wait(1.0)  # the sync loop reports problems; retry quietly
                    continue
                if version != since:  # (the first answer too: a change may predate it)
                    self._wake.set()
                    since = version

    # -- protocol ------------------------------------------------------------------

    @property
    def _verify(self) -> ssl.SSLContext | bool:
        ca = self.settings.ca_cert
        return ssl.create_default_context(cafile=str(ca)) if ca else True

    @property
    def _url(self) -> str:
        servers = self.settings.servers
        return servers[self._server_index % len(servers)].rstrip("/")

    def _post(self, path: str, body: dict, token: str) -> dict:
        response = self.http.post(
            f"{self._url}/api/v1/agent/{path}",
            json=body,
            headers={"Authorization": f"Bearer {token}"},
        )
        response.raise_for_status()
        return response.json()

    def _register(self) -> None:
        s = self.settings
        body = RegisterRequest(
            name=s.name,
            agent_id=self.agent_id,
            address=s.address,
            devices=s.node.devices,
            cpus=s.node.cpus,
            memory=s.node.memory,
            network=s.node.network,
            labels=s.node.labels,
            attributes=self._attributes(),
        )
        answer = self._post("register", body.model_dump(mode="json"), s.join_token)
        self._token = answer["node_token"]
        self.interval = float(answer.get("sync_interval", self.interval))
        chips = sum(1 for d in s.node.devices if d.kind == "tpu")
        devices = f"{chips} TPU chips" if chips else f"{len(s.node.devices)} GPUs"
        log.info("registered node %s with %s at %s", s.name, devices, self._url)

    def _sync_once(self, shutdown: bool = False) -> None:
        request = self._build_request()
        request.shutdown = shutdown
        answer = SyncResponse.model_validate(
            self._post("sync", request.model_dump(mode="json"), self._token or "")
        )
        self.interval = answer.sync_interval
        self._apply(answer)

    def _build_request(self) -> SyncRequest:
        statuses = {s.key: s for s in self.supervisor.poll()}
        reports, chunks = [], []
        for key, tracked in self.tasks.items():
            status = statuses.get(tracked.launch.key)
            if status is None:
                continue
            chunk, at_end = self._log_chunk(key, tracked)
            if chunk is not None:
                chunks.append(chunk)
            reports.append(_report(key, status, hold_exit=not at_end))
        return SyncRequest(
            node=self.settings.name,
            agent_id=self.agent_id,
            tasks=reports,
            logs=chunks,
            free_ports=free_ports(),
            attributes=self._attributes(),
            gpus=self._telemetry(statuses),
        )

    def _telemetry(self, statuses: Mapping[str, TaskStatus]) -> list[GpuTelemetry] | None:
        """This sync's GPU readings: NVML's, or generated from the running tasks' loads."""
        if self._nvml is not None:
            return self._nvml.sample()
        if not self.settings.simulated:
            return None
        holders: dict[int, list[SimLoad]] = {}
        for tracked in self.tasks.values():
            status = statuses.get(tracked.launch.key)
            if status is None or status.state is not TaskState.RUNNING or not tracked.wanted:
                continue
            load = self._loads.read(tracked.load_file) if tracked.load_file else SimLoad()
            for gpu in tracked.gpus:
                holders.setdefault(gpu, []).append(load)
        faults = read_faults(self.settings.home / FAULTS_FILE)
        return simulated_sample(self.settings.node.devices, holders, faults)

    def _attributes(self) -> dict[str, float]:
        """Static attributes (node file, --attributes) plus live GPU health readings."""
        readings = gpu_readings() if self.settings.read_gpu_health else {}
        return {**self.settings.node.attributes, **readings}

    def _log_chunk(self, key: TaskKey, tracked: _Tracked) -> tuple[LogChunk | None, bool]:
        """The next piece of the task's log the server lacks, and whether it reaches the end."""
        path = tracked.launch.log_path
        if tracked.server_offset < 0:
            return None, True
        try:
            with path.open("rb") as handle:
                handle.seek(tracked.server_offset)
                data = handle.read(LOG_CHUNK)
                at_end = not handle.read(1)
        except FileNotFoundError:
            return None, True
        if not data:
            return None, at_end
        chunk = LogChunk(
            job_id=key[0],
            attempt=key[1],
            rank=key[2],
            offset=tracked.server_offset,
            data=base64.b64encode(data).decode(),
        )
        return chunk, at_end

    def _apply(self, answer: SyncResponse) -> None:
        for ack in answer.acks:
            tracked = self.tasks.get((ack.job_id, ack.attempt, ack.rank))
            if tracked is not None:
                tracked.server_offset = ack.log_offset
                tracked.server_final = ack.final
        desired = {(t.job_id, t.attempt, t.rank): t for t in answer.tasks}
        for key, task in desired.items():
            if key not in self.tasks:
                self._start(key, task)
                self._wake.set()  # report the start at once, not at the next interval
        for key, tracked in list(self.tasks.items()):
            if key in desired:
                continue
            status = self.supervisor.status(tracked.launch.key)
            if status is not None and status.state is not TaskState.EXITED:
                if tracked.wanted:
                    log.info("stopping task %s (no longer wanted)", tracked.launch.key)
                tracked.wanted = False
                self.supervisor.stop(tracked.launch.key)
            elif status is None or (tracked.server_final and self._drained(tracked)):
                self.supervisor.forget(tracked.launch.key)
                del self.tasks[key]
                if tracked.load_file is not None:
                    self._loads.forget(tracked.load_file)
                    tracked.load_file.unlink(missing_ok=True)

    @staticmethod
    def _drained(tracked: _Tracked) -> bool:
        if tracked.server_offset < 0:
            return True
        try:
            return tracked.server_offset >= tracked.launch.log_path.stat().st_size
        except FileNotFoundError:
            return True

    def _start(self, key: TaskKey, task: DesiredTask) -> None:
        job_id, attempt, rank = key
        checkpoint_dir = self.settings.checkpoint_root / f"job-{job_id}"
        checkpoint_dir.mkdir(parents=True, exist_ok=True)
        env = dict(task.env)
        env["CORRAL_CHECKPOINT_DIR"] = str(checkpoint_dir)
        load_file = None
        if self.settings.simulated:
            load_file = self.settings.home / "load" / f"job-{job_id}-{attempt}-{rank}.json"
            load_file.parent.mkdir(parents=True, exist_ok=True)
            load_file.unlink(missing_ok=True)
            env[SIM_LOAD_ENV] = str(load_file)
        env["CORRAL_SERVER"] = self._url  # with CORRAL_JOB_TOKEN: report checkpoints
        if self.settings.ca_cert:
            env["CORRAL_CA_CERT"] = str(self.settings.ca_cert)
        launch = TaskLaunch(
            key=f"{job_id}/{attempt}/{rank}",
            command=task.command,
            env=env,
            workdir=task.workdir,
            log_path=self.settings.home / "logs" / f"job-{job_id}" / str(attempt) / f"{rank}.log",
            grace_period=task.grace_period,
        )
        if launch.log_path.exists():  # a fresh attempt of this agent: start a fresh log
            launch.log_path.unlink()
        self.tasks[key] = _Tracked(launch, gpus=tuple(task.gpus), load_file=load_file)
        self.supervisor.start(launch)
        log.info("started task %s (pid in its own process group)", launch.key)


def _report(key: TaskKey, status: TaskStatus, hold_exit: bool) -> TaskReport:
    """The task as the server should see it; an exit is held back (``terminating``) until
    the server has the whole log, so that a finished job's logs are complete."""
    exited = status.state is TaskState.EXITED and not hold_exit
    if status.state is TaskState.RUNNING:
        state = "running"
    else:
        state = "exited" if exited else "terminating"
    return TaskReport(
        job_id=key[0],
        attempt=key[1],
        rank=key[2],
        state=state,
        pid=status.pid,
        exit_code=status.exit_code if exited else None,
        started_at=status.started_at,
        ended_at=status.ended_at if exited else None,
    )


def _msg(exc: httpx.HTTPStatusError) -> str:
    try:
        return exc.response.json().get("message", exc.response.text)
    except ValueError:
        return exc.response.text
