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
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx

from corral.client.config import resolve_ca_cert, resolve_servers, resolve_token, ssl_verify
from corral.errors import ERRORS_BY_CODE, ConnectionFailedError, CorralError
from corral.schemas.api import (
    AdviceOut,
    AuditOut,
    Health,
    JobOut,
    LogOut,
    NodeOut,
    QueueOut,
    TokenOut,
    WhoAmI,
)
from corral.schemas.manifest import JobManifest, load_manifest, parse_manifest

TERMINAL = ("succeeded", "failed", "cancelled")
RETRY_STATUSES = (502, 503, 504)


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
        verify = ssl_verify(resolve_ca_cert(ca_cert))
        self._http = httpx.Client(
            transport=transport, timeout=timeout, headers=headers, verify=verify
        )
        self._current = 0

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    @property
    def server(self) -> str:
        return self.servers[self._current]

    # -- low level -----------------------------------------------------------------

    def request(self, method: str, path: str, rounds: int = 1, **kwargs: Any) -> Any:
        """One API call, failing over between replicas; raises typed ``CorralError``s.

        With ``rounds`` > 1 (only for calls safe to repeat), it goes round the replicas
        again after a short pause while none answers (or all answer 502/503/504)."""
        errors: list[str] = []
        for round_ in range(rounds):
            if round_:
                time.sleep(0.25 * 2 ** (round_ - 1))
            errors = []
            for i in range(len(self.servers)):
                index = (self._current + i) % len(self.servers)
                url = f"{self.servers[index]}/api/v1{path}"
                try:
                    response = self._http.request(method, url, **kwargs)
                except httpx.TransportError as exc:
                    errors.append(f"{self.servers[index]} ({type(exc).__name__})")
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
        retries: int = 3,
    ) -> JobOut:
        """Submit a manifest (model, mapping, YAML text or a path to a YAML file).

        Sends an ``Idempotency-Key`` (a fresh one unless given) and reuses it when it
        retries an unanswered submission, so that a retry never creates a second job."""
        body = _as_manifest(manifest).model_dump(mode="json", exclude_none=True)
        headers = {"Idempotency-Key": idempotency_key or uuid.uuid4().hex}
        answer = self.request("POST", "/jobs", rounds=retries, json=body, headers=headers)
        return JobOut.model_validate(answer)

    def get(self, job_id: int) -> JobOut:
        return JobOut.model_validate(self.request("GET", f"/jobs/{job_id}"))

    def list(
        self, all: bool = False, queue: str | None = None, state: str | None = None
    ) -> list[JobOut]:
        params: dict[str, Any] = {"all": all}
        if queue:
            params["queue"] = queue
        if state:
            params["state"] = state
        data = self.request("GET", "/jobs", params=params)
        return [JobOut.model_validate(j) for j in data["jobs"]]

    def advice(self, job_id: int) -> list[str]:
        """What would let a pending job start sooner (empty when it is not pending)."""
        return AdviceOut.model_validate(self.request("GET", f"/jobs/{job_id}/advice")).hints

    def cancel(self, job_id: int) -> JobOut:
        return JobOut.model_validate(self.request("POST", f"/jobs/{job_id}/cancel"))

    def preempt(self, job_id: int) -> JobOut:
        return JobOut.model_validate(self.request("POST", f"/jobs/{job_id}/preempt"))

    def checkpoint(self, job_id: int, step: int | None = None, path: str | None = None) -> JobOut:
        """Report that the running job saved a complete checkpoint."""
        body = {"step": step, "path": path}
        return JobOut.model_validate(self.request("POST", f"/jobs/{job_id}/checkpoint", json=body))

    def log_chunk(
        self, job_id: int, task: int = 0, offset: int = 0, attempt: int | None = None
    ) -> LogOut:
        params: dict[str, Any] = {"task": task, "offset": offset}
        if attempt is not None:
            params["attempt"] = attempt
        return LogOut.model_validate(self.request("GET", f"/jobs/{job_id}/logs", params=params))

    def logs(self, job_id: int, task: int = 0, attempt: int | None = None) -> str:
        """Everything the task has logged so far."""
        return "".join(self.follow_logs(job_id, task, attempt, follow=False))

    def follow_logs(
        self,
        job_id: int,
        task: int = 0,
        attempt: int | None = None,
        follow: bool = True,
        poll: float = 0.5,
    ) -> Iterator[str]:
        """Yield pieces of the log; with ``follow``, until the task ends and all is read."""
        offset = 0
        while True:
            chunk = self.log_chunk(job_id, task, offset, attempt)
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
        self, job_ids: int | Sequence[int], timeout: float | None = None, poll: float = 0.5
    ) -> list[JobOut]:
        """Block until every job has ended; ``TimeoutError`` after ``timeout`` seconds."""
        ids = [job_ids] if isinstance(job_ids, int) else list(job_ids)
        deadline = None if timeout is None else time.monotonic() + timeout
        done: dict[int, JobOut] = {}
        while True:
            for job_id in ids:
                if job_id not in done:
                    job = self.get(job_id)
                    if job.state in TERMINAL:
                        done[job_id] = job
            if len(done) == len(ids):
                return [done[i] for i in ids]
            if deadline is not None and time.monotonic() >= deadline:
                left = ", ".join(str(i) for i in ids if i not in done)
                raise TimeoutError(f"jobs still running after {timeout:g}s: {left}")
            time.sleep(poll)

    # -- cluster -------------------------------------------------------------------

    def health(self) -> Health:
        return Health.model_validate(self.request("GET", "/health"))

    def nodes(self) -> list[NodeOut]:
        return [NodeOut.model_validate(n) for n in self.request("GET", "/nodes")["nodes"]]

    def drain(self, name: str) -> NodeOut:
        return NodeOut.model_validate(self.request("POST", f"/nodes/{name}/drain"))

    def undrain(self, name: str) -> NodeOut:
        return NodeOut.model_validate(self.request("POST", f"/nodes/{name}/undrain"))

    def queues(self) -> list[QueueOut]:
        return [QueueOut.model_validate(q) for q in self.request("GET", "/queues")["queues"]]

    def create_token(self, user: str, role: str = "user") -> TokenOut:
        body = {"user": user, "role": role}
        return TokenOut.model_validate(self.request("POST", "/tokens", json=body))

    def tokens(self) -> list[TokenOut]:
        return [TokenOut.model_validate(t) for t in self.request("GET", "/tokens")["tokens"]]

    def revoke_token(self, token_id: int) -> TokenOut:
        return TokenOut.model_validate(self.request("DELETE", f"/tokens/{token_id}"))

    def whoami(self) -> WhoAmI:
        return WhoAmI.model_validate(self.request("GET", "/whoami"))

    def audit(
        self, user: str | None = None, since: float | None = None, limit: int = 100
    ) -> list[AuditOut]:
        """State-changing API calls, oldest first (admins)."""
        params: dict[str, Any] = {"limit": limit}
        if user is not None:
            params["user"] = user
        if since is not None:
            params["since"] = since
        entries = self.request("GET", "/audit", params=params)["entries"]
        return [AuditOut.model_validate(e) for e in entries]


def _as_manifest(manifest: JobManifest | dict | str | Path) -> JobManifest:
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
