"""The node agent: register, then sync forever, reconciling desired against running tasks.

Level-triggered: every sync reports every task the agent knows and the log bytes the
server lacks; the answer lists every task that should run here. Tasks missing locally are
started, each as its job's Unix account in a cgroup of its own (where the host allows);
local tasks no longer wanted get SIGTERM, then SIGKILL after their grace period. The tasks
of job steps (processes a job started on its nodes) are run and reported alike. If the
server is unreachable, tasks keep running and the agent retries. A restarted agent is the
same incarnation (its id is kept under its state directory): it re-adopts the tasks it had
started, reports those that ended meanwhile, and kills what it cannot account for before
it registers. With node hooks (``--prolog``/``--epilog``, ``jobhooks.py``), a job's tasks
start on this node only once its prolog passed here, and its epilog runs once they ended.
"""

from __future__ import annotations

import base64
import logging
import os
import pwd
import ssl
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from corral.agent import logship, nodestate
from corral.agent.cgroups import Limits, probe_cgroups
from corral.agent.container import ContainerRuntime
from corral.agent.hooks import HookSettings
from corral.agent.host import NodeDescription, free_ports, gpu_readings
from corral.agent.identity import Account, AccountError, lookup_account, make_private_dir
from corral.agent.images import DEFAULT_CACHE_SIZE, ImageCache, default_cache_dir
from corral.agent.jobhooks import Attempt, NodeHooks
from corral.agent.logship import LogCursor
from corral.agent.reporting import StepKey, TaskKey, task_key, task_report
from corral.agent.staging import Staging, container_request
from corral.agent.supervisor import ProcessSupervisor, TaskLaunch, TaskState, TaskStatus
from corral.agent.taskenv import foreign_env, task_base_env
from corral.agent.telemetry import (
    FAULTS_FILE,
    SIM_LOAD_ENV,
    LoadFiles,
    NvmlTelemetry,
    SimLoad,
    read_faults,
    simulated_sample,
)
from corral.privatefiles import private_dir
from corral.retry import backoff
from corral.schemas.agent import (
    DesiredStepTask,
    DesiredTask,
    GpuTelemetry,
    LogChunk,
    RegisterRequest,
    StepLogChunk,
    SyncRequest,
    SyncResponse,
    TaskAck,
)

log = logging.getLogger("corral.agent")
MAX_BACKOFF = 5.0
WATCH_TIMEOUT = 30.0  # seconds one long-poll of /agent/watch may wait
DEFAULT_LOG_CAP = 100 * 1000 * 1000  # bytes per task, until the server says otherwise


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
    contain: bool = True  # one cgroup per task with limits, where the host allows it
    max_pids: int | None = 4096  # processes and threads per task (with cgroups)
    image_cache: Path | None = None  # unpacked images (default: images.default_cache_dir)
    image_cache_size: int = DEFAULT_CACHE_SIZE  # bytes, past which unused images go
    hooks: HookSettings = HookSettings()  # prolog and epilog (none by default)
    # on stop (SIGTERM): leave the tasks running for the next start of this agent to
    # re-adopt (a service restart), instead of stopping them and handing the work back
    keep_tasks_on_stop: bool = False


@dataclass
class _Tracked:
    launch: TaskLaunch
    gpus: tuple[int, ...] = ()
    load_file: Path | None = None  # CORRAL_SIM_LOAD_FILE on simulated nodes
    server_final: bool = False  # the server recorded the exit
    wanted: bool = True
    log: LogCursor = field(init=False)

    def __post_init__(self) -> None:
        self.log = LogCursor(self.launch.log_path)


@dataclass
class Agent:
    settings: AgentSettings
    transport: httpx.BaseTransport | None = None
    agent_id: str = ""  # default: the one kept under the state directory

    def __post_init__(self) -> None:
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._hurry = threading.Event()
        private_dir(self.settings.home)  # logs and task records: the agent's alone
        state_dir = self.settings.home / "state"
        self.agent_id = self.agent_id or nodestate.agent_id(state_dir)
        self._state_dir = state_dir
        self.run_as_owner = os.geteuid() == 0
        # the node root is the agent incarnation's: two agents of one name on one host (two
        # local clusters) never share, nor kill, each other's task cgroups; a restarted
        # agent keeps its id, so it finds its tasks' cgroups again
        scope = f"{self.settings.name}-{self.agent_id[:8]}"
        self._probe = probe_cgroups(scope) if self.settings.contain else None
        self.cgroups = self._probe.manager if self._probe else None
        s = self.settings
        images = ImageCache(s.image_cache or default_cache_dir(s.home), s.image_cache_size, s.name)
        self.supervisor = Staging(  # a task in an image starts once its image is ready
            ProcessSupervisor(
                on_exit=lambda _key: self._wake.set(),
                base_env={},  # each launch carries its whole environment (see _start)
                state_dir=state_dir / "tasks",
                cgroups=self.cgroups,
            ),
            ContainerRuntime(images, s.name, s.node.memory),
            on_change=lambda _key: self._wake.set(),  # report it at once
        )
        self.tasks: dict[TaskKey, _Tracked] = {}
        self.steps: dict[StepKey, _Tracked] = {}  # the tasks of job steps
        self.hooks = NodeHooks(
            self.settings.hooks,
            state_dir / "hooks",
            self.settings.name,
            task_base_env(os.environ),
            on_done=self._wake.set,
        )
        self.log_cap: int | None = DEFAULT_LOG_CAP
        self._token: str | None = None
        self._server_index = 0
        self.interval = self.heartbeat = self.settings.sync_interval
        self._loads = LoadFiles()
        self._nvml = NvmlTelemetry() if self.settings.read_gpu_health else None
        if self._nvml is not None and not self._nvml.open():
            self._nvml = None

    # -- lifecycle -----------------------------------------------------------------

    def run(self) -> None:
        """Register and sync until :meth:`stop`; then stop every task (grace periods apply)."""
        self._announce()
        self.recover()
        threading.Thread(target=self._watch, name="corral-agent-watch", daemon=True).start()
        failures = 0  # in a row: the pauses between retries grow (with jitter)
        with httpx.Client(transport=self.transport, timeout=10.0, verify=self._verify) as http:
            self.http = http
            while not self._stop.is_set():
                try:
                    if self._token is None:
                        self._register()
                    self._sync_once()
                    failures = 0
                    self._pause()
                    continue
                except httpx.HTTPStatusError as exc:
                    if exc.response.status_code in (401, 403, 404, 409):
                        log.warning("server refused this agent (%s); registering again", _msg(exc))
                        self._token = None
                    else:
                        log.warning("sync failed: %s", _msg(exc))
                        if exc.response.status_code >= 500:  # e.g. its database is gone
                            self._server_index += 1  # (a sync is safe to repeat anywhere)
                except httpx.TransportError as exc:
                    log.warning("server %s unreachable (%s); tasks keep running", self._url, exc)
                    self._server_index += 1
                failures += 1  # after a server restart, agents come back spread out
                self._stop.wait(backoff(failures, 0.2, MAX_BACKOFF))
            self.hooks.close()  # running hooks are killed; epilogs due run at the next start
            if self.settings.keep_tasks_on_stop:
                self._leave_tasks()
            else:
                self._stop_tasks()
            if self.cgroups is not None:
                self.cgroups.remove_root()  # (left in place while anything is still in it)
            if self._nvml is not None:
                self._nvml.close()
            try:  # best effort: hand the work back so that it is requeued at once
                if self._token and not self.settings.keep_tasks_on_stop:
                    self._sync_once(shutdown=True)
            except httpx.HTTPError as exc:
                log.warning("could not tell the server this agent stopped: %s", exc)

    def _pause(self) -> None:
        """Wait until the next sync is due: at once when woken (new work for this node, a
        task started or ended, a hook failed), after ``interval`` while a task has log bytes
        the server lacks, else after the heartbeat interval. A node whose tasks run quietly
        therefore costs the server a sync per heartbeat, not per interval."""
        heartbeat_at = time.monotonic() + self.heartbeat
        while not self._stop.is_set():
            left = heartbeat_at - time.monotonic()
            if left <= 0:
                return
            if self._wake.wait(min(self.interval, left)):
                break
            if any(not logship.drained(t.log) for _, t in self._tracked()):
                return
        self._wake.clear()

    def stop(self) -> None:
        """Stop: every task gets SIGTERM and its grace period. A second call (a second
        SIGTERM or Ctrl-C) kills what is left at once. With ``keep_tasks_on_stop`` the
        tasks are left running instead (see ``_leave_tasks``)."""
        if self._stop.is_set():
            self._hurry.set()
        self._stop.set()
        self._wake.set()

    def _leave_tasks(self) -> None:
        """Exit without stopping anything (``keep_tasks_on_stop``): the tasks keep running
        and their records stay, for the next start of this agent to re-adopt them. The
        server keeps the node's jobs as long as that start comes within its node timeout."""
        running = [s for s in self.supervisor.poll() if s.state is not TaskState.EXITED]
        self.supervisor.detach()
        if running:
            log.info(
                "stopping; %d task(s) keep running, to be re-adopted when this agent starts "
                "again (within the server's node timeout, or the node is lost and they are "
                "requeued)",
                len(running),
            )

    def _stop_tasks(self) -> None:
        self.supervisor.stop_all(wait=False)
        hurried = False
        while any(s.state is not TaskState.EXITED for s in self.supervisor.poll()):
            if self._hurry.is_set() and not hurried:
                log.warning("stopping now: killing every task without waiting for its grace")
                self.supervisor.stop_all(grace_period=0, wait=False)
                hurried = True
            self._hurry.wait(0.05)

    def _announce(self) -> None:
        """Say at start how tasks run here: as whom, and how contained."""
        if self.run_as_owner:
            log.info("tasks run as their jobs' Unix accounts")
        else:
            user = pwd.getpwuid(os.geteuid()).pw_name
            log.warning("not running as root: every task runs as %s, whoever submitted it", user)
        log.info("%s", self.supervisor.runtime.describe())
        if self._probe is None:
            log.warning(
                "cgroups turned off (--no-cgroups): tasks are process groups, no memory, CPU "
                "or process limits, and a task that leaves its process group survives its job"
            )
            return
        for warning in self._probe.warnings:
            log.warning("%s", warning)
        if self.cgroups is None:
            log.warning(
                "%s; a task that leaves its process group survives its job", self._probe.line
            )
        else:
            log.info("%s", self._probe.line)

    def recover(self) -> None:
        """Take back the tasks an earlier run of this agent started (before registering):
        running ones are supervised again, ended ones reported with their exit codes, and
        anything unaccounted for is killed by the supervisor."""
        for launch, status in self.supervisor.recover():
            meta = launch.meta
            try:
                key: TaskKey | StepKey = (
                    int(meta["job_id"]),
                    int(meta["attempt"]),
                    int(meta["rank"]),
                )
                if meta.get("step"):
                    key = (key[0], key[1], int(meta["step"]), key[2])
            except (KeyError, TypeError, ValueError):
                log.warning("task %s: no job in its record; stopping it", launch.key)
                self.supervisor.stop(launch.key, 0)
                continue
            load_file = meta.get("load_file")
            self._table(key)[key] = _Tracked(
                launch,
                gpus=tuple(meta.get("gpus", ())),
                load_file=Path(load_file) if load_file else None,
            )
            what = "still running" if status.state is not TaskState.EXITED else "ended"
            log.info("re-adopted task %s (%s)", launch.key, what)

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
                    self._stop.wait(backoff(1, 2.0, 2.0))  # quietly (the sync loop reports)
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
            credential=nodestate.credential(self._state_dir),
        )
        answer = self._post("register", body.model_dump(mode="json"), s.join_token)
        if answer.get("credential"):  # this name is now bound to this agent's state
            nodestate.save_credential(self._state_dir, answer["credential"])
        self._token = answer["node_token"]
        self.interval = float(answer.get("sync_interval", self.interval))
        self.log_cap = answer.get("log_cap", self.log_cap) or None
        chips = sum(1 for d in s.node.devices if d.kind == "tpu")
        devices = f"{chips} TPU chips" if chips else f"{len(s.node.devices)} GPUs"
        log.info(
            "registered node %s (address %s) with %s at %s", s.name, s.address, devices, self._url
        )

    def _sync_once(self, shutdown: bool = False) -> None:
        request = self._build_request()
        request.shutdown = shutdown
        answer = SyncResponse.model_validate(
            self._post("sync", request.model_dump(mode="json"), self._token or "")
        )
        self.interval = answer.sync_interval
        self.heartbeat = answer.heartbeat_interval or answer.sync_interval
        self.hooks.reported(request.hook_failures)  # the server has them
        self._apply(answer)

    def _build_request(self) -> SyncRequest:
        statuses = {s.key: s for s in self.supervisor.poll()}
        reports, chunks, step_reports, step_chunks = [], [], [], []
        budget = logship.SYNC_LOG_BUDGET
        for key, tracked in self._tracked():
            status = statuses.get(tracked.launch.key)
            if status is None or status.state is TaskState.STARTING:
                continue  # (its image is being prepared: the server holds it as assigned)
            exited = status.state is TaskState.EXITED
            limit = min(budget, logship.FINAL_CHUNK if exited else logship.LOG_CHUNK)
            chunk = self._log_chunk(key, tracked, limit) if limit > 0 else None
            if chunk is not None:
                (step_chunks if len(key) == 4 else chunks).append(chunk)
                budget -= len(chunk.data) * 3 // 4
            report = task_report(key, status, self.settings.name)
            (step_reports if len(key) == 4 else reports).append(report)
        return SyncRequest(
            node=self.settings.name,
            agent_id=self.agent_id,
            tasks=reports,
            logs=chunks,
            free_ports=free_ports(),
            attributes=self._attributes(),
            gpus=self._telemetry(statuses),
            steps=step_reports,
            step_logs=step_chunks,
            hook_failures=self.hooks.failures(),
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

    def _log_chunk(self, key: TaskKey | StepKey, tracked: _Tracked, limit: int) -> LogChunk | None:
        """The next piece of the task's log the server lacks (None: nothing to send). Its
        offset is past the server's when the oldest part was dropped (log cap)."""
        piece = logship.next_piece(tracked.log, limit, self.log_cap)
        if piece is None or (not piece.data and piece.offset == tracked.log.server_offset):
            return None
        data = base64.b64encode(piece.data).decode()
        if len(key) == 4:
            return StepLogChunk(
                job_id=key[0],
                attempt=key[1],
                step=key[2],
                rank=key[3],
                offset=piece.offset,
                data=data,
            )
        return LogChunk(job_id=key[0], attempt=key[1], rank=key[2], offset=piece.offset, data=data)

    def _tracked(self) -> list[tuple[TaskKey | StepKey, _Tracked]]:
        """Every task this agent tracks: the jobs' own, then the steps'."""
        return [*self.tasks.items(), *self.steps.items()]

    def _table(self, key: TaskKey | StepKey) -> dict:
        """Where ``key`` is tracked: ``steps`` for a step's task, else ``tasks``."""
        return self.steps if len(key) == 4 else self.tasks

    def _apply(self, answer: SyncResponse) -> None:
        self.log_cap = answer.log_cap or None
        acks: list[TaskAck] = [*answer.acks, *answer.step_acks]
        for ack in acks:
            tracked = self._table(task_key(ack)).get(task_key(ack))
            if tracked is not None:
                tracked.log.server_offset = ack.log_offset
                tracked.server_final = ack.final
                logship.release(tracked.log, ack.log_offset)  # the server has these bytes
        desired = {task_key(t): t for t in [*answer.tasks, *answer.steps]}
        # a job's tasks start on this node once its prolog passed here (see jobhooks)
        admitted = self.hooks.admit(desired.values(), self._attempts())
        for key, task in desired.items():
            if key not in self._table(key) and key[:2] in admitted:
                self._start(key, task)
                self._wake.set()  # report the start at once, not at the next interval
        for key, tracked in self._tracked():
            if key in desired:
                continue
            status = self.supervisor.status(tracked.launch.key)
            if status is not None and status.state is not TaskState.EXITED:
                if tracked.wanted:
                    log.info("stopping task %s (no longer wanted)", tracked.launch.key)
                tracked.wanted = False
                self.supervisor.stop(tracked.launch.key, _grace(tracked.launch, answer))
            elif status is None or (tracked.server_final and logship.drained(tracked.log)):
                self.supervisor.forget(tracked.launch.key)
                del self._table(key)[key]
                tracked.launch.log_path.unlink(missing_ok=True)  # the server holds it all
                if tracked.load_file is not None:
                    self._loads.forget(tracked.load_file)
                    tracked.load_file.unlink(missing_ok=True)
        self.hooks.reconcile(self._attempts(live=True), {key[:2] for key in desired})

    def _attempts(self, live: bool = False) -> set[Attempt]:
        """The job attempts this agent started tasks of (``live``: that still run here)."""
        attempts = set()
        for key, tracked in self._tracked():
            status = self.supervisor.status(tracked.launch.key) if live else None
            if not live or (status is not None and status.state is not TaskState.EXITED):
                attempts.add((key[0], key[1]))
        return attempts

    def _account(self, user: str | None) -> Account | None:
        """The account a task runs as; None: as this agent (not root, or the same account).
        Raises ``AccountError`` when the node has no such account."""
        if not self.run_as_owner or not user:
            return None
        account = lookup_account(user)
        if account.uid == 0 and user != "root":  # the server refuses root jobs by name
            raise AccountError(
                f"Unix account {user!r} has uid 0 on this node: refused (a job runs as "
                "root only as the account root, where the server allows it)"
            )
        return None if account.uid == os.geteuid() else account

    def _start(self, key: TaskKey | StepKey, task: DesiredTask) -> None:
        job_id, attempt, rank = task.job_id, task.attempt, task.rank
        step = task.step if isinstance(task, DesiredStepTask) else 0
        job_logs = self.settings.home / "logs" / f"job-{job_id}"
        log_dirs = [job_logs, job_logs / str(attempt)]
        if step:  # a step's tasks log apart from the job's
            log_dirs.append(log_dirs[-1] / f"step-{step}")
        log_path = log_dirs[-1] / f"{rank}.log"
        if log_path.exists():  # a fresh attempt of this agent: start a fresh log
            log_path.unlink()
        try:
            account = self._account(task.user)
        except AccountError as exc:
            account, failure = None, str(exc)  # the task fails, saying so
        else:
            failure = None
        checkpoint_dir = self.settings.checkpoint_root / f"job-{job_id}"
        if failure is None:
            try:
                self._job_dirs(checkpoint_dir, log_dirs, account)
            except OSError as exc:
                failure = f"cannot prepare the job's directories on this node: {exc}"
        env = dict(task.env)
        env["CORRAL_CHECKPOINT_DIR"] = str(checkpoint_dir)
        load_file = None
        if self.settings.simulated and not step:
            load_file = self.settings.home / "load" / f"job-{job_id}-{attempt}-{rank}.json"
            load_file.parent.mkdir(parents=True, exist_ok=True)
            load_file.unlink(missing_ok=True)
            env[SIM_LOAD_ENV] = str(load_file)
        env["CORRAL_SERVER"] = self._url  # with CORRAL_JOB_TOKEN: report checkpoints
        env["CORRAL_PYTHON"] = sys.executable  # an interpreter with Corral (kinds' runtimes)
        if self.settings.ca_cert:
            env["CORRAL_CA_CERT"] = str(self.settings.ca_cert)
        # another account keeps only what is portable of the agent's own environment
        inherited = foreign_env(os.environ) if account else task_base_env(os.environ)
        env = {**inherited, **env}
        launch = TaskLaunch(
            key=f"{job_id}/{attempt}/step-{step}/{rank}" if step else f"{job_id}/{attempt}/{rank}",
            command=task.command,
            env=env,
            workdir=task.workdir,
            log_path=log_path,
            grace_period=task.grace_period,
            account=account,
            limits=Limits(
                memory=task.memory or None, cpus=task.cpus or None, pids=self.settings.max_pids
            ),
            meta={
                "job_id": job_id,
                "attempt": attempt,
                "rank": rank,
                "step": step,
                "gpus": list(task.gpus),
                "load_file": str(load_file) if load_file else None,
            },
            failure=failure,
        )
        self._table(key)[key] = _Tracked(launch, gpus=tuple(task.gpus), load_file=load_file)
        status = self.supervisor.start(launch, container_request(task, checkpoint_dir))
        if status.state is TaskState.EXITED:
            log.warning("task %s could not start: %s", launch.key, status.reason)
        else:
            who = account.name if account else "this agent's account"
            log.info("started task %s as %s", launch.key, who)

    def _job_dirs(
        self, checkpoint_dir: Path, log_dirs: list[Path], account: Account | None
    ) -> None:
        """The job's checkpoint and log directories, its account's alone (0700). The
        checkpoint root stays traversable (0711) so that each owner reaches their own."""
        root = self.settings.checkpoint_root
        root.mkdir(parents=True, exist_ok=True)
        if account is not None and root.stat().st_uid == os.geteuid():
            os.chmod(root, 0o711)
        for path in (checkpoint_dir, *log_dirs):
            make_private_dir(path, account)


def _msg(exc: httpx.HTTPStatusError) -> str:
    try:
        return exc.response.json().get("message", exc.response.text)
    except ValueError:
        return exc.response.text


def _grace(launch: TaskLaunch, answer: SyncResponse) -> float | None:
    """The grace of a task stopped now: its job's, shortened to a spot notice's."""
    if answer.stop_grace is None:
        return None
    return min(launch.grace_period, answer.stop_grace)
