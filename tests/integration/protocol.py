"""Speak the agent protocol directly, as a node whose processes the test plays by hand.

Only the hardware and the processes are played: every request goes through the real
server, its real authentication and its real database.
"""

from __future__ import annotations

import base64
import uuid
from typing import Any

import httpx

from tests.integration.conftest import Server


class FakeHardwareAgent:
    def __init__(
        self,
        server: Server,
        name: str,
        gpus: int = 8,
        devices: list[dict[str, Any]] | None = None,
        attributes: dict[str, float] | None = None,
    ) -> None:
        """``gpus`` plain H100s, unless ``devices`` gives the registered devices as they are
        (the agent protocol's ``DeviceIn``: index, model, memory, mig, ...)."""
        self.server = server
        self.name = name
        self.agent_id = uuid.uuid4().hex
        self.gpus = gpus
        self.devices = devices
        self.attributes = attributes or {}
        self.credential: str | None = None  # the node credential the first registration gave
        self.register()

    def register(self, agent_id: str | None = None) -> None:
        """Register (again), presenting the node credential once it has one."""
        self.agent_id = agent_id or self.agent_id
        body = {
            "name": self.name,
            "agent_id": self.agent_id,
            "address": "127.0.0.1",
            "devices": self.devices
            if self.devices is not None
            else [{"index": i, "model": "H100", "memory": 80 * 10**9} for i in range(self.gpus)],
            "cpus": 64,
            "memory": 512 * 10**9,
            "attributes": self.attributes,
            "credential": self.credential,
        }
        with self.server.http(self.server.join_token) as http:
            answer = http.post("/agent/register", json=body)
        answer.raise_for_status()
        self.credential = answer.json()["credential"] or self.credential
        self.http = self.server.http(answer.json()["node_token"])

    def sync(
        self,
        tasks: list[dict[str, Any]] | None = None,
        logs: list[dict[str, Any]] | None = None,
        gpus: list[dict[str, Any]] | None = None,
        steps: list[dict[str, Any]] | None = None,
        step_logs: list[dict[str, Any]] | None = None,
        hook_failures: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """One sync; ``gpus``: telemetry readings (``GpuTelemetry``), if any; ``steps`` and
        ``step_logs``: reports on the step tasks it runs and their logs; ``hook_failures``:
        its prologs and epilogs that failed (``HookFailure``)."""
        body: dict[str, Any] = {
            "node": self.name,
            "agent_id": self.agent_id,
            "tasks": tasks or [],
            "logs": logs or [],
            "free_ports": [40001],
            "steps": steps or [],
            "step_logs": step_logs or [],
            "hook_failures": hook_failures or [],
        }
        if gpus is not None:
            body["gpus"] = gpus
        answer = self.http.post("/agent/sync", json=body)
        if answer.status_code != 200:
            raise httpx.HTTPStatusError(answer.text, request=answer.request, response=answer)
        return answer.json()


def report(job_id: int, rank: int, state: str, attempt: int = 0, **extra: Any) -> dict[str, Any]:
    return {"job_id": job_id, "attempt": attempt, "rank": rank, "state": state, **extra}


def reading(index: int, utilization: float, **extra: Any) -> dict[str, Any]:
    """A GPU telemetry reading of an 80 GB GPU."""
    return {
        "index": index,
        "utilization": utilization,
        "memory_used": 10 * 10**9,
        "memory_total": 80 * 10**9,
        "temperature": 50.0,
        "power": 300.0,
        **extra,
    }


def chunk(job_id: int, rank: int, offset: int, data: bytes, attempt: int = 0) -> dict[str, Any]:
    return {
        "job_id": job_id,
        "attempt": attempt,
        "rank": rank,
        "offset": offset,
        "data": base64.b64encode(data).decode(),
    }


def step_report(
    job_id: int, step: int, rank: int, state: str, attempt: int = 0, **extra: Any
) -> dict[str, Any]:
    """A report on the task of rank ``rank`` of a job step."""
    return {**report(job_id, rank, state, attempt, **extra), "step": step}


def step_chunk(
    job_id: int, step: int, rank: int, offset: int, data: bytes, attempt: int = 0
) -> dict[str, Any]:
    return {**chunk(job_id, rank, offset, data, attempt), "step": step}
