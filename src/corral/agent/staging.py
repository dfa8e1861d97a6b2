"""The agent's supervisor, with tasks in a container image prepared before they start.

Preparing a task's image (unpacking it into the node's cache on its first use) may take
minutes, so it runs in a thread of its own while the agent keeps syncing. Meanwhile the
task is STARTING: no process yet, not reported to the server (which holds it as assigned,
as it does a task waiting for its job's prolog). Once its image is ready it is started
like any other; if it cannot be, it ends at once (exit code 127) with the reason, which
names the image and the problem. A task stopped while STARTING ends then (143) and never
starts. The image's lease (``images.py``) is held until the task is forgotten.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corral.agent import shim
from corral.agent.container import ContainerError, ContainerRequest, ContainerRuntime
from corral.agent.identity import Account
from corral.agent.images import Image
from corral.agent.supervisor import (
    START_FAILED_EXIT_CODE,
    ProcessSupervisor,
    TaskLaunch,
    TaskState,
    TaskStatus,
)
from corral.core.container import Mount
from corral.schemas.agent import DesiredTask

log = logging.getLogger(__name__)
STOPPED_EXIT_CODE = 143  # stopped (SIGTERM) before it started


@dataclass
class _Staged:
    launch: TaskLaunch
    started_at: float
    state: TaskState = TaskState.STARTING
    exit_code: int | None = None
    ended_at: float | None = None
    reason: str | None = None
    stop_requested: bool = False

    def status(self) -> TaskStatus:
        return TaskStatus(
            key=self.launch.key,
            pid=None,
            state=self.state,
            exit_code=self.exit_code,
            started_at=self.started_at,
            ended_at=self.ended_at,
            stop_requested=self.stop_requested,
            reason=self.reason,
        )


def container_request(task: DesiredTask, checkpoint_dir: Path) -> ContainerRequest | None:
    """What ``task``'s container holds; None for a task without an image."""
    if not task.image:
        return None
    return ContainerRequest(
        image=task.image,
        mounts=tuple(Mount(m.source, m.target, m.read_only) for m in task.mounts),
        shm_size=task.shm_size,
        gpus=tuple(task.gpus),
        node_gpus=tuple(task.node_gpus),
        checkpoint_dir=str(checkpoint_dir),
        workdir=task.workdir,
        job_env=dict(task.env),
    )


class Staging:
    """``supervisor`` (every method of it), where ``start`` also takes a container.
    ``on_change(key)`` is called (from another thread) when a task prepared in a thread
    starts, or ends without starting: the agent reports it at once."""

    def __init__(
        self,
        supervisor: ProcessSupervisor,
        runtime: ContainerRuntime,
        on_change: Callable[[str], None] | None = None,
    ) -> None:
        self.supervisor = supervisor
        self.runtime = runtime
        self._on_change = on_change
        self._lock = threading.Lock()
        self._staged: dict[str, _Staged] = {}
        self._images: dict[str, Image | int] = {}  # key -> its image, or a lease (re-adopted)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.supervisor, name)

    def start(self, launch: TaskLaunch, container: ContainerRequest | None = None) -> TaskStatus:
        """Start ``launch``; in ``container``'s image if given (prepared in a thread: the
        status is STARTING meanwhile)."""
        if container is None or launch.failure is not None:
            return self.supervisor.start(launch)
        with self._lock:
            known = self._staged.get(launch.key) or self.supervisor.status(launch.key)
            if isinstance(known, _Staged):
                return known.status()
            if known is not None:
                return known
            staged = _Staged(launch, time.time())
            self._staged[launch.key] = staged
        log.info("task %s: preparing image %s", launch.key, container.image)
        threading.Thread(
            target=self._prepare,
            args=(staged, container),
            name=f"corral-image-{launch.key}",
            daemon=True,
        ).start()
        return staged.status()

    def _prepare(self, staged: _Staged, container: ContainerRequest) -> None:
        launch = staged.launch
        account = launch.account if isinstance(launch.account, Account) else None
        image: Image | None = None
        failure = None
        try:
            final, image = self.runtime.prepare(launch, container, account)
        except ContainerError as exc:
            failure = str(exc)
        except Exception as exc:  # a bug or an I/O error: the task fails, saying so
            log.exception("task %s: preparing its container failed", launch.key)
            failure = f"image {container.image}: cannot prepare the container: {exc}"
        with self._lock:
            if staged.state is TaskState.EXITED:  # stopped meanwhile
                if image is not None:
                    self.runtime.cache.release(image)
                return
            if failure is None:
                self._images[launch.key] = image  # type: ignore[assignment]
                status = self.supervisor.start(final)
                del self._staged[launch.key]
            else:
                _log_failure(launch.log_path, failure)
                staged.state, staged.exit_code = TaskState.EXITED, START_FAILED_EXIT_CODE
                staged.ended_at, staged.reason = time.time(), failure
        if failure is None:
            if status.state is not TaskState.EXITED:
                log.info("task %s: started in image %s", launch.key, container.image)
        else:
            log.warning("task %s: cannot start: %s", launch.key, failure)
        self._notify(launch.key)

    def poll(self) -> list[TaskStatus]:
        with self._lock:
            staged = [s.status() for s in self._staged.values()]
            return staged + self.supervisor.poll()

    def status(self, key: str) -> TaskStatus | None:
        with self._lock:
            staged = self._staged.get(key)
            return staged.status() if staged is not None else self.supervisor.status(key)

    def stop(self, key: str, grace_period: float | None = None) -> None:
        with self._lock:
            staged = self._staged.get(key)
            if staged is not None:
                if staged.state is not TaskState.EXITED:
                    staged.stop_requested = True
                    staged.state, staged.exit_code = TaskState.EXITED, STOPPED_EXIT_CODE
                    staged.ended_at = time.time()
                    staged.reason = "stopped before it started (its image was being prepared)"
                    threading.Thread(target=self._notify, args=(key,), daemon=True).start()
                return
        self.supervisor.stop(key, grace_period)

    def stop_all(self, grace_period: float | None = None, wait: bool = True) -> None:
        with self._lock:
            keys = list(self._staged)
        for key in keys:
            self.stop(key)
        self.supervisor.stop_all(grace_period, wait)

    def forget(self, key: str) -> None:
        with self._lock:
            staged = self._staged.get(key)
            if staged is not None:
                if staged.state is TaskState.EXITED:
                    del self._staged[key]
                return
            self.supervisor.forget(key)
            if self.supervisor.status(key) is None:
                self._release(key)

    def recover(self) -> list[tuple[TaskLaunch, TaskStatus]]:
        """The supervisor's ``recover``; each re-adopted task in an image takes a lease on
        it again, so that it is not evicted under the task."""
        recovered = self.supervisor.recover()
        with self._lock:
            for launch, status in recovered:
                key = launch.meta.get("image_key")
                if isinstance(key, str) and status.state is not TaskState.EXITED:
                    lease = self.runtime.cache.lease(key)
                    if lease is not None:
                        self._images[launch.key] = lease
        return recovered

    def detach(self) -> None:
        with self._lock:
            for staged in self._staged.values():
                staged.state = TaskState.EXITED  # never started; the next agent starts it
            self._staged.clear()
        self.supervisor.detach()

    def _release(self, key: str) -> None:
        held = self._images.pop(key, None)
        if isinstance(held, int):
            with contextlib.suppress(OSError):
                os.close(held)
        elif held is not None:
            self.runtime.cache.release(held)

    def _notify(self, key: str) -> None:
        if self._on_change is not None:
            try:
                self._on_change(key)
            except Exception:
                log.exception("on_change callback failed for task %s", key)


def _log_failure(path: Path, message: str) -> None:
    with contextlib.suppress(OSError):
        fd = shim.open_log(path)
        with os.fdopen(fd, "a", encoding="utf-8") as handle:
            handle.write(f"corral: cannot start task: {message}\n")
