"""The Python SDK: ``Client`` mirrors the REST API and adds ``wait`` and log following.

Usable from a notebook::

    from corral.client import Client
    c = Client()                       # address and token as the CLI finds them
    job = c.submit({"command": "python train.py", "resources": {"gpus": 8}})
    c.wait(job.id)
    print(c.logs(job.id))

Errors come back as the same typed ``corral.errors`` the server raised.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import httpx
from httpx_sse import connect_sse

from corral.client.config import resolve_ca_cert, resolve_servers, resolve_token, ssl_verify
from corral.errors import ERRORS_BY_CODE, ConnectionFailedError, CorralError
from corral.retry import backoff
from corral.schemas.api import (
    AdviceOut,
    AuditList,
    AuditOut,
    EventItem,
    EventList,
    Health,
    JobList,
    JobOut,
    LogOut,
    NodeOut,
    NoticeOut,
    PoolOut,
    QueueOut,
    ReplicaHealth,
    TelemetrySample,
    TokenOut,
    UsageOut,
    WhoAmI,
)
from corral.schemas.common import validate

if TYPE_CHECKING:
    from corral.client.grpc_transport import GrpcTransport
    from corral.schemas.manifest import JobManifest
    from corral.schemas.steps import StepOut

T = TypeVar("T")
TERMINAL = ("succeeded", "failed", "cancelled")
JobRef = int | str  # a job's id, or "ARRAYID_INDEX" for an element of a job array


def names_array(ref: JobRef, job: JobOut) -> bool:
    """Whether ``ref`` (answered with ``job``) names a whole array: a plain id that is an
    array's id, as ``scancel 12`` takes it."""
    return "_" not in str(ref) and job.array is not None and job.array.job_id == job.id


def _ended(job: JobOut, whole: bool) -> bool:
    if not whole or job.array is None:
        return job.state in TERMINAL
    return sum(job.array.states.get(s, 0) for s in TERMINAL) >= job.array.count


IDEMPOTENT_METHODS = ("GET", "HEAD", "PUT", "DELETE", "OPTIONS")
# The request never reached the server: any request may go to the next replica.
NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
RETRY_STATUSES = (502, 503, 504)
# Rounds over the replicas for calls safe to repeat, with jittered pauses between them
# (``corral.retry.backoff``): the REST and gRPC transports alike.
RETRY_ROUNDS = 3
RETRY_BASE = 0.25  # seconds: the first pause is at most this, doubling each round
RETRY_CAP = 5.0  # seconds: no pause longer
PAGE_SIZE = 1000  # rows asked for at a time when a listing pages through everything
AUDIT_PAGE = 10_000  # the most audit entries the server answers at once


class Client:
    def __init__(
        self,
        server: str | Sequence[str] | None = None,
        token: str | None = None,
        transport: httpx.BaseTransport | None = None,
        timeout: float = 30.0,
        ca_cert: str | Path | None = None,
    ) -> None:
        if isinstance(server, str) or server is None:
            self.servers = resolve_servers(server)
        else:
            self.servers = resolve_servers(",".join(server))
        self.token = resolve_token(token)
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        verify = ssl_verify(resolve_ca_cert(ca_cert), self.servers)
        self._http = httpx.Client(
            transport=transport, timeout=timeout, headers=headers, verify=verify
        )
        self._current = 0
        self._grpc: GrpcTransport | None = None  # grpc:// addresses: corral.v1 over gRPC
        if any(s.startswith(("grpc://", "grpcs://")) for s in self.servers):
            from corral.client.grpc_transport import GrpcTransport  # grpc: only when used

            self._grpc = GrpcTransport(self.servers, self.token, timeout, resolve_ca_cert(ca_cert))

    def close(self) -> None:
        self._http.close()
        if self._grpc is not None:
            self._grpc.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    @property
    def server(self) -> str:
        return self.servers[self._current]

    # -- low level -----------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        idempotent: bool | None = None,
        rounds: int | None = None,
        **kwargs: Any,
    ) -> Any:
        """One API call, failing over between replicas; raises typed ``CorralError``s.

        A request that could not be sent goes to the next replica. One that failed after
        it was sent (the replica died mid-request) is retried elsewhere only if it is
        ``idempotent`` (by default: every method but POST), since the first replica may
        have applied it; otherwise ``ConnectionFailedError`` says the outcome is unknown.
        With ``rounds`` > 1 (only for calls safe to repeat), it goes round the replicas
        again after a short pause while none answers (or all answer 502/503/504).
        Over gRPC, an idempotent call goes round ``RETRY_ROUNDS`` times by default while
        every replica answers UNAVAILABLE (``GrpcTransport.request``).
        """
        if self._grpc is not None:
            return self._grpc.request(method, path, idempotent=idempotent, rounds=rounds, **kwargs)
        if idempotent is None:
            idempotent = method.upper() in IDEMPOTENT_METHODS
        rounds = 1 if rounds is None else rounds
        errors: list[str] = []
        for round_ in range(rounds):
            if round_:
                time.sleep(backoff(round_, RETRY_BASE, RETRY_CAP))  # jittered: spread out
            errors = []
            for i in range(len(self.servers)):
                index = (self._current + i) % len(self.servers)
                url = f"{self.servers[index]}/api/v1{path}"
                try:
                    response = self._http.request(method, url, **kwargs)
                except httpx.TransportError as exc:
                    errors.append(f"{self.servers[index]} ({type(exc).__name__})")
                    if not idempotent and not isinstance(exc, NOT_SENT):
                        raise ConnectionFailedError(
                            f"{method} {path}: the connection to {self.servers[index]} broke "
                            f"mid-request ({type(exc).__name__}); it may or may not have been "
                            "applied"
                        ) from exc
                    continue
                if response.status_code in RETRY_STATUSES and round_ + 1 < rounds:
                    errors.append(f"{self.servers[index]} (HTTP {response.status_code})")
                    continue
                self._current = index
                return _decode(response)
        raise ConnectionFailedError(
            f"cannot reach the Corral server at {', '.join(errors)}; is it running? "
            "(start one with `corral up`, or pass --server / set CORRAL_SERVER)"
        )

    # -- jobs ----------------------------------------------------------------------

    def submit(
        self,
        manifest: JobManifest | dict | str | Path,
        idempotency_key: str | None = None,
        retries: int = RETRY_ROUNDS,
    ) -> JobOut:
        """Submit a manifest (model, mapping, YAML text or a path to a YAML file).

        Sends an ``Idempotency-Key`` (a fresh one unless given) and reuses it when it
        retries an unanswered submission, so that a retry never creates a second job."""
        body = _as_manifest(manifest).model_dump(mode="json", exclude_none=True)
        # One key for every try: a replica that stored the job before dying mid-request
        # makes the retry (on it or another replica) return that job, not a second one.
        headers = {"Idempotency-Key": idempotency_key or uuid.uuid4().hex}
        answer = self.request(
            "POST", "/jobs", idempotent=True, rounds=retries, json=body, headers=headers
        )
        return JobOut.model_validate(answer)

    # A job is named by its id, or ``"12_3"`` for element 3 of job array 12 (``JobRef``).

    def get(self, job: JobRef) -> JobOut:
        """One job; an element of an array also with the array's summary (``array``)."""
        return JobOut.model_validate(self.request("GET", f"/jobs/{job}"))

    def list(
        self,
        all: bool = False,
        queue: str | None = None,
        state: str | None = None,
        group_arrays: bool = False,
        limit: int | None = None,
        page_size: int = PAGE_SIZE,
    ) -> list[JobOut]:
        """The caller's jobs, oldest first: every one (asked ``page_size`` at a time), or
        with ``limit`` the newest that many. With ``group_arrays``, one row per job array
        (its elements counted by state in ``array.states``) instead of one per element."""

        def fetch(size: int, before: int | None) -> tuple[list[JobOut], int | None]:
            page = self.job_page(all, queue, state, group_arrays, size, before)
            return page.jobs, page.next if page.has_more else None

        return _newest(fetch, limit, page_size)

    def job_page(
        self,
        all: bool = False,
        queue: str | None = None,
        state: str | None = None,
        group_arrays: bool = False,
        limit: int = PAGE_SIZE,
        before: int | None = None,
        count: bool = False,
    ) -> JobList:
        """One page of ``GET /jobs``: the newest ``limit`` jobs below the cursor
        ``before``, oldest first; ``has_more`` and ``next`` (the cursor for older ones),
        and with ``count`` how many older ones match (``remaining``)."""
        params: dict[str, Any] = {"all": all, "limit": limit}
        if queue:
            params["queue"] = queue
        if state:
            params["state"] = state
        if group_arrays:
            params["group_arrays"] = True
        if before is not None:
            params["before"] = before
        if count:
            params["count"] = True
        return JobList.model_validate(self.request("GET", "/jobs", params=params))

    def resolve(self, job: JobRef) -> int:
        """The job id a name stands for (``"12_3"``: element 3 of array 12)."""
        return job if isinstance(job, int) else self.get(job).id

    def advice(self, job: JobRef) -> list[str]:
        """What would let a pending job start sooner (empty when it is not pending)."""
        return AdviceOut.model_validate(self.request("GET", f"/jobs/{job}/advice")).hints

    def cancel(self, job: JobRef) -> JobOut:
        """Cancel a job; an array's id cancels every element not ended yet."""
        return JobOut.model_validate(self.request("POST", f"/jobs/{job}/cancel", idempotent=True))

    def hold(self, job: JobRef) -> JobOut:
        """Keep a pending job (an array's id: every pending element) from being
        scheduled until :meth:`release`."""
        return JobOut.model_validate(self.request("POST", f"/jobs/{job}/hold"))

    def release(self, job: JobRef) -> JobOut:
        """Let a held job (an array's id: every held element) be scheduled again."""
        return JobOut.model_validate(self.request("POST", f"/jobs/{job}/release"))

    def preempt(self, job: JobRef) -> JobOut:
        return JobOut.model_validate(self.request("POST", f"/jobs/{job}/preempt", idempotent=True))

    def checkpoint(self, job_id: int, step: int | None = None, path: str | None = None) -> JobOut:
        """Report that the running job saved a complete checkpoint."""
        body = {"step": step, "path": path}
        return JobOut.model_validate(self.request("POST", f"/jobs/{job_id}/checkpoint", json=body))

    def log_chunk(
        self,
        job_id: int,
        task: int = 0,
        offset: int = 0,
        attempt: int | None = None,
        step: int = 0,
    ) -> LogOut:
        """A piece of a task's log (with ``step``: of that step's task of rank ``task``)."""
        params: dict[str, Any] = {"task": task, "offset": offset}
        if attempt is not None:
            params["attempt"] = attempt
        if step:
            params["step"] = step
        return LogOut.model_validate(self.request("GET", f"/jobs/{job_id}/logs", params=params))

    def logs(self, job_id: int, task: int = 0, attempt: int | None = None, step: int = 0) -> str:
        """Everything the task (with ``step``: that step's task) has logged so far."""
        return "".join(self.follow_logs(job_id, task, attempt, follow=False, step=step))

    def follow_logs(
        self,
        job_id: int,
        task: int = 0,
        attempt: int | None = None,
        follow: bool = True,
        poll: float = 0.5,
        step: int = 0,
    ) -> Iterator[str]:
        """Yield pieces of the log; with ``follow``, until the task ends and all is read."""
        if self._grpc is not None:
            yield from self._grpc.follow_logs(job_id, task, attempt, follow, step)
            return
        offset = 0
        while True:
            chunk = self.log_chunk(job_id, task, offset, attempt, step)
            attempt = chunk.attempt
            if chunk.data:
                yield chunk.data
            moved = chunk.offset > offset
            offset = chunk.offset
            if chunk.complete and not moved:
                return
            if not moved:
                if not follow:
                    return
                time.sleep(poll)

    def wait(
        self, job_ids: JobRef | Sequence[JobRef], timeout: float | None = None, poll: float = 0.5
    ) -> list[JobOut]:
        """Block until every job has ended; ``TimeoutError`` after ``timeout`` seconds.
        An array's id waits for every element (see :func:`names_array`)."""
        ids = [job_ids] if isinstance(job_ids, int | str) else list(job_ids)
        deadline = None if timeout is None else time.monotonic() + timeout
        done: dict[JobRef, JobOut] = {}
        while True:
            for job_id in ids:
                if job_id not in done:
                    job = self.get(job_id)
                    if _ended(job, names_array(job_id, job)):
                        done[job_id] = job
            if len(done) == len(ids):
                return [done[i] for i in ids]
            if deadline is not None and time.monotonic() >= deadline:
                left = ", ".join(str(i) for i in ids if i not in done)
                raise TimeoutError(f"jobs still running after {timeout:g}s: {left}")
            time.sleep(poll)

    # -- steps (see docs/job-steps.md) ------------------------------------------------

    def start_step(
        self,
        job_id: int,
        command: Sequence[str] | str,
        nodes: Sequence[str] | None = None,
        tasks_per_node: int = 1,
        env: dict[str, str] | None = None,
        workdir: str | None = None,
    ) -> StepOut:
        """Start a step of a running job: ``tasks_per_node`` processes on each of ``nodes``
        (default: every node where the job still runs a task)."""
        from corral.schemas.steps import StepIn, StepOut  # here: they import the manifest

        fields = {
            "command": command if isinstance(command, str) else list(command),
            "nodes": None if nodes is None else list(nodes),
            "tasks_per_node": tasks_per_node,
            "env": dict(env or {}),
            "workdir": workdir,
        }
        body: StepIn = validate(StepIn, fields, "step")
        answer = self.request(
            "POST", f"/jobs/{job_id}/steps", json=body.model_dump(mode="json", exclude_none=True)
        )
        return StepOut.model_validate(answer)

    def step(self, job_id: int, step: int, attempt: int | None = None) -> StepOut:
        from corral.schemas.steps import StepOut

        params = {} if attempt is None else {"attempt": attempt}
        return StepOut.model_validate(
            self.request("GET", f"/jobs/{job_id}/steps/{step}", params=params)
        )

    def steps(self, job_id: int, attempt: int | None = None) -> list[StepOut]:
        """The steps of an attempt (default: the job's current one), oldest first."""
        from corral.schemas.steps import MAX_STEPS, StepList

        params: dict[str, Any] = {"limit": MAX_STEPS}  # as many as an attempt may have
        if attempt is not None:
            params["attempt"] = attempt
        data = self.request("GET", f"/jobs/{job_id}/steps", params=params)
        return StepList.model_validate(data).steps

    def cancel_step(self, job_id: int, step: int) -> StepOut:
        """Stop a step's tasks (SIGTERM, then SIGKILL after the job's grace period)."""
        from corral.schemas.steps import StepOut

        return StepOut.model_validate(
            self.request("POST", f"/jobs/{job_id}/steps/{step}/cancel", idempotent=True)
        )

    def wait_step(
        self, job_id: int, step: int, timeout: float | None = None, poll: float = 1.0
    ) -> StepOut:
        """Block until every task of the step has ended (``StepOut.exit_code`` then says
        how it went); ``TimeoutError`` after ``timeout`` seconds. Polls quickly at first,
        then every ``poll`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        pause = min(0.05, poll)
        while True:
            found = self.step(job_id, step)
            if found.state == "ended":
                return found
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"step {step} of job {job_id} still running after {timeout:g}s")
            time.sleep(pause)
            pause = min(poll, pause * 2)

    # -- cluster -------------------------------------------------------------------

    def health(self) -> Health:
        return Health.model_validate(self.request("GET", "/health"))

    def replicas(self) -> list[ReplicaHealth]:
        """The health of every configured server address (replica), asked one by one."""
        if self._grpc is not None:
            return self._grpc.replicas()
        found = []
        for address in self.servers:
            try:
                response = self._http.get(f"{address}/api/v1/health")
                health = Health.model_validate(_decode(response))
            except (httpx.TransportError, CorralError, ValueError) as exc:
                found.append(ReplicaHealth(address=address, reachable=False, error=str(exc)))
                continue
            found.append(ReplicaHealth(address=address, reachable=True, health=health))
        return found

    def nodes(self) -> list[NodeOut]:
        return [NodeOut.model_validate(n) for n in self.request("GET", "/nodes")["nodes"]]

    def drain(self, name: str) -> NodeOut:
        return NodeOut.model_validate(self.request("POST", f"/nodes/{name}/drain", idempotent=True))

    def undrain(self, name: str) -> NodeOut:
        return NodeOut.model_validate(
            self.request("POST", f"/nodes/{name}/undrain", idempotent=True)
        )

    def notice(self, name: str, deadline: float) -> NoticeOut:
        """A spot termination notice: ``name`` leaves within ``deadline`` seconds."""
        body = {"deadline": deadline}
        return NoticeOut.model_validate(self.request("POST", f"/nodes/{name}/notice", json=body))

    def pools(self) -> list[PoolOut]:
        return [PoolOut.model_validate(p) for p in self.request("GET", "/pools")["pools"]]

    def reset_node(self, name: str) -> NodeOut:
        """Free a node's name for a new agent (admins): see ``POST /nodes/{name}/reset``."""
        return NodeOut.model_validate(self.request("POST", f"/nodes/{name}/reset", idempotent=True))

    def queues(self) -> list[QueueOut]:
        return [QueueOut.model_validate(q) for q in self.request("GET", "/queues")["queues"]]

    # -- monitoring ----------------------------------------------------------------

    def node_telemetry(self, name: str, since: float = 0.0) -> list[TelemetrySample]:
        """Recent per-GPU samples of a node taken after ``since`` (epoch seconds)."""
        data = self.request("GET", f"/nodes/{name}/telemetry", params={"since": since})
        return [TelemetrySample.model_validate(s) for s in data["samples"]]

    def job_telemetry(self, job_id: int, since: float = 0.0) -> list[TelemetrySample]:
        """Recent samples of the GPUs while the job held them."""
        data = self.request("GET", f"/jobs/{job_id}/telemetry", params={"since": since})
        return [TelemetrySample.model_validate(s) for s in data["samples"]]

    def usage(
        self, by: str = "queue", since: float | None = None, until: float | None = None
    ) -> UsageOut:
        params: dict[str, Any] = {"by": by}
        if since is not None:
            params["since"] = since
        if until is not None:
            params["until"] = until
        return UsageOut.model_validate(self.request("GET", "/usage", params=params))

    def events(
        self,
        since_id: int | None = None,
        limit: int = 100,
        entity: str | None = None,
        entity_id: str | None = None,
    ) -> list[EventItem]:
        """Events after ``since_id`` (oldest first); without it, the latest ``limit``."""
        return self.event_page(since_id, limit, entity, entity_id).events

    def event_page(
        self,
        since_id: int | None = None,
        limit: int = 100,
        entity: str | None = None,
        entity_id: str | None = None,
    ) -> EventList:
        """:meth:`events`, with ``has_more``: whether more match past them (after the
        last, or without ``since_id`` before the first)."""
        params: dict[str, Any] = {"limit": limit}
        for key, value in (("since_id", since_id), ("entity", entity), ("entity_id", entity_id)):
            if value is not None:
                params[key] = value
        return EventList.model_validate(self.request("GET", "/events", params=params))

    def stream_events(
        self, since_id: int | None = None, reconnect: float = 1.0
    ) -> Iterator[EventItem]:
        """Events as they happen (server-sent events), after ``since_id`` if given, else
        from now. Reconnects with ``Last-Event-ID`` when the connection drops, so none is
        lost or repeated; ends only when the caller stops iterating."""
        if since_id is None:
            latest = self.events(limit=1)
            since_id = latest[-1].id if latest else 0
        if self._grpc is not None:
            yield from self._grpc.watch_events(since_id)
            return
        last = since_id
        while True:
            headers = {"Last-Event-ID": str(last)}
            url = f"{self.server}/api/v1/events/stream"
            try:
                with connect_sse(self._http, "GET", url, headers=headers, timeout=None) as source:
                    if not source.response.is_success:
                        source.response.read()
                        _decode(source.response)
                    for sse in source.iter_sse():
                        if sse.data:
                            event = EventItem.model_validate_json(sse.data)
                            last = event.id
                            yield event
            except httpx.TransportError:
                self._current = (self._current + 1) % len(self.servers)
            time.sleep(reconnect)

    def metrics(self) -> str:
        """The Prometheus text of ``/metrics``."""
        if self._grpc is not None:
            self._grpc.request("GET", "/metrics")  # not over gRPC: says so
        response = self._http.get(f"{self.server}/metrics")
        if not response.is_success:
            _decode(response)
        return response.text

    def create_token(self, user: str, role: str = "user", unix_user: str | None = None) -> TokenOut:
        """A new token for ``user`` (admins); its jobs run as ``unix_user`` (default: the
        user's name) on the nodes."""
        body: dict[str, Any] = {"user": user, "role": role}
        if unix_user is not None:
            body["unix_user"] = unix_user
        return TokenOut.model_validate(self.request("POST", "/tokens", json=body))

    def tokens(self) -> list[TokenOut]:
        return [TokenOut.model_validate(t) for t in self.request("GET", "/tokens")["tokens"]]

    def revoke_token(self, token_id: int) -> TokenOut:
        return TokenOut.model_validate(self.request("DELETE", f"/tokens/{token_id}"))

    def whoami(self) -> WhoAmI:
        return WhoAmI.model_validate(self.request("GET", "/whoami"))

    def audit(
        self, user: str | None = None, since: float | None = None, limit: int | None = 100
    ) -> list[AuditOut]:
        """State-changing API calls, oldest first (admins): the newest ``limit``, or with
        ``limit=None`` every one (asked for a page at a time)."""

        def fetch(size: int, before: int | None) -> tuple[list[AuditOut], int | None]:
            page = self.audit_page(user, since, size, before)
            return page.entries, page.next if page.has_more else None

        return _newest(fetch, limit, AUDIT_PAGE)

    def audit_page(
        self,
        user: str | None = None,
        since: float | None = None,
        limit: int = 100,
        before: int | None = None,
    ) -> AuditList:
        """One page of ``GET /audit``: the newest ``limit`` entries below the cursor
        ``before``, oldest first; ``has_more`` and ``next`` (the cursor for older ones)."""
        params: dict[str, Any] = {"limit": limit}
        if user is not None:
            params["user"] = user
        if since is not None:
            params["since"] = since
        if before is not None:
            params["before"] = before
        return AuditList.model_validate(self.request("GET", "/audit", params=params))


def _newest(
    fetch: Callable[[int, int | None], tuple[list[T], int | None]], limit: int | None, size: int
) -> list[T]:
    """The newest ``limit`` rows (``None``: all) of a listing, oldest first, asked for
    ``size`` at a time: ``fetch(size, before)`` answers a page (oldest first) and the
    cursor below it (``None``: no older rows)."""
    pages: list[list[T]] = []
    left, before = limit, None
    while left is None or left > 0:
        rows, before = fetch(size if left is None else min(size, left), before)
        pages.append(rows)
        left = None if left is None else left - len(rows)
        if before is None:
            break
    return [row for rows in reversed(pages) for row in rows]


def _as_manifest(manifest: JobManifest | dict | str | Path) -> JobManifest:
    # Imported here: a client that submits nothing (`corral jobs`) needs no YAML (issue 21).
    from corral.schemas.manifest import JobManifest, load_manifest, parse_manifest

    if isinstance(manifest, JobManifest):
        return manifest
    if isinstance(manifest, dict):
        return parse_manifest(manifest)
    if isinstance(manifest, Path) or (
        isinstance(manifest, str)
        and "\n" not in manifest
        and manifest.endswith((".yaml", ".yml", ".json"))
    ):
        path = Path(manifest)
        return load_manifest(path.read_text(), str(path))
    return load_manifest(manifest)


def _decode(response: httpx.Response) -> Any:
    if response.is_success:
        return response.json()
    try:
        body = response.json()
        code, message = body.get("code", "internal"), body.get("message", response.text)
    except ValueError:
        code, message = "internal", response.text or response.reason_phrase
    cls = ERRORS_BY_CODE.get(code, CorralError)
    error = cls(message)
    error.status_code = response.status_code
    raise error
