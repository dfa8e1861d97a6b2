"""When a node's hooks run for a job attempt: the prolog before the attempt's first task
starts on this node, the epilog once its last task there (and its steps' tasks) ended;
each once per attempt and node, not per task.

The sync loop asks :meth:`NodeHooks.admit` which attempts' tasks may start: those whose
prolog passed (or that have none). A new attempt's prolog starts in a thread of its own
and the loop goes on (``on_done`` wakes it when a hook ends); a new attempt also waits
while an epilog runs on the node, as Slurm's next job waits for the last one's. A failed
prolog keeps the attempt's tasks from starting here, and is reported with the next sync
(:meth:`failures`, then :meth:`reported`): the server drains the node and requeues the job.
:meth:`reconcile` starts the epilog of every admitted attempt that has no live task here
and none the server still wants here (also after a cancel, a requeue or a failed peer);
a failed epilog is reported alike (the node is drained; the job's outcome stands).

The state directory keeps one record per attempt (JSON, 0600): what a hook needs to know
of the job, the outcomes and the failures not yet reported. So a restarted agent neither
runs a prolog again for tasks it already started nor an epilog twice, runs an epilog that
the stop interrupted, and still reports a failure. A prolog interrupted by the stop runs
again. An agent that stops kills its running hooks and reports nothing of them.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from corral.agent.hooks import (
    EPILOG,
    JOB_VARIABLES,
    PROLOG,
    HookResult,
    HookSettings,
    hook_env,
    run_hook,
)
from corral.privatefiles import private_dir, write_private
from corral.schemas.agent import DesiredTask, HookFailure

log = logging.getLogger(__name__)

Attempt = tuple[int, int]  # job id, attempt
RUNNING, PASSED, FAILED, NONE = "running", "ok", "failed", "none"  # NONE: no prolog to run


@dataclass
class _Record:
    job_id: int
    attempt: int
    user: str | None
    gpus: list[int]
    variables: dict[str, str]  # the job's JOB_VARIABLES, as the server set them
    prolog: str = NONE
    epilog: str | None = None  # None: not run yet
    unreported: list[HookFailure] = field(default_factory=list)

    @property
    def admitted(self) -> bool:
        return self.prolog in (PASSED, NONE)

    def to_json(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "attempt": self.attempt,
            "user": self.user,
            "gpus": self.gpus,
            "variables": self.variables,
            "prolog": self.prolog,
            "epilog": None if self.epilog == RUNNING else self.epilog,  # runs again
            "unreported": [f.model_dump(mode="json") for f in self.unreported],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> _Record:
        record = cls(
            job_id=int(data["job_id"]),
            attempt=int(data["attempt"]),
            user=data.get("user"),
            gpus=[int(i) for i in data.get("gpus", [])],
            variables={str(k): str(v) for k, v in dict(data.get("variables", {})).items()},
            prolog=str(data["prolog"]),
            epilog=data.get("epilog"),
            unreported=[HookFailure.model_validate(f) for f in data.get("unreported", [])],
        )
        if record.prolog not in (PASSED, FAILED, NONE) or record.epilog not in (
            None,
            PASSED,
            FAILED,
        ):
            raise ValueError(f"unknown hook outcome in {data}")
        return record


class NodeHooks:
    """The hooks of one agent's job attempts (see the module's docstring). Thread-safe."""

    def __init__(
        self,
        settings: HookSettings,
        state_dir: Path,
        node: str,
        base_env: Mapping[str, str],
        on_done: Callable[[], None],
    ) -> None:
        """``base_env``: the agent's environment for hooks (:func:`hooks.hook_env` drops
        its ``CORRAL_*``); ``on_done``: called from a hook's thread when it ended."""
        self.settings = settings
        self._dir = state_dir
        self._node = node
        self._base = dict(base_env)
        self._on_done = on_done
        self._lock = threading.Lock()
        self._cancel = threading.Event()
        self._records: dict[Attempt, _Record] = {}
        self._threads: list[threading.Thread] = []
        if settings.enabled:
            self._load()

    def admit(self, tasks: Iterable[DesiredTask], started: set[Attempt]) -> set[Attempt]:
        """The attempts among ``tasks`` (every task the server wants here) whose tasks may
        start now; starts the prologs of new ones. ``started``: attempts with a task this
        agent already started (re-adopted ones included): they never wait for a prolog."""
        tasks = list(tasks)
        if not self.settings.enabled:
            return {(t.job_id, t.attempt) for t in tasks}
        if self._cancel.is_set():
            return set()  # stopping: nothing new starts
        groups: dict[Attempt, list[DesiredTask]] = {}
        for task in tasks:
            groups.setdefault((task.job_id, task.attempt), []).append(task)
        admitted = set()
        with self._lock:
            epilog_running = any(r.epilog == RUNNING for r in self._records.values())
            for key, group in groups.items():
                record = self._records.get(key)
                if record is None:
                    if epilog_running and key not in started:
                        continue  # after the epilog that runs now
                    record = self._records[key] = _new_record(key, group)
                    if key in started or self.settings.prolog is None:
                        self._save(record)
                    else:
                        record.prolog = RUNNING
                        self._start(record, PROLOG)
                if record.admitted:
                    admitted.add(key)
        return admitted

    def reconcile(self, live: set[Attempt], wanted: set[Attempt]) -> None:
        """Start the epilog of each admitted attempt that has no ``live`` task here and is
        not ``wanted`` here; forget attempts that are done with."""
        if not self.settings.enabled or self._cancel.is_set():
            return
        with self._lock:
            for key, record in list(self._records.items()):
                if key in live or key in wanted or RUNNING in (record.prolog, record.epilog):
                    continue
                if record.admitted and record.epilog is None and self.settings.epilog:
                    record.epilog = RUNNING
                    self._start(record, EPILOG)
                elif not record.unreported:
                    del self._records[key]
                    self._path(key).unlink(missing_ok=True)

    def failures(self) -> list[HookFailure]:
        """The failures the server has not been told of (send them with the next sync)."""
        with self._lock:
            return [f for r in self._records.values() for f in r.unreported]

    def reported(self, sent: Iterable[HookFailure]) -> None:
        """The server took ``sent`` (a sync carrying them succeeded)."""
        with self._lock:
            for failure in sent:
                record = self._records.get((failure.job_id, failure.attempt))
                if record is not None and failure in record.unreported:
                    record.unreported.remove(failure)
                    self._save(record)

    def close(self, timeout: float = 5.0) -> None:
        """The agent stops: kill running hooks (waiting up to ``timeout`` seconds for them
        to be gone); their outcomes are neither kept nor sent."""
        self._cancel.set()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    # -- internals ----------------------------------------------------------------------

    def _start(self, record: _Record, hook: str) -> None:
        path = self.settings.path(hook)
        assert path is not None
        env = hook_env(
            self._base,
            hook,
            record.job_id,
            record.attempt,
            self._node,
            record.user,
            record.gpus,
            record.variables,
        )
        log.info("running the %s of job %d (attempt %d)", hook, record.job_id, record.attempt)
        thread = threading.Thread(
            target=self._run,
            args=(record, hook, path, env),
            name=f"corral-{hook}-{record.job_id}",
            daemon=True,
        )
        self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()

    def _run(self, record: _Record, hook: str, path: Path, env: dict[str, str]) -> None:
        try:
            result = run_hook(hook, path, env, self.settings.timeout, self._cancel)
        except Exception as exc:  # a bug: the run fails (drains), the agent goes on
            log.exception("the %s of job %d could not be run", hook, record.job_id)
            result = HookResult(hook, None, f"{hook} could not be run: {exc}", "", 0.0)
        if self._cancel.is_set():
            return
        what = f"the {hook} of job {record.job_id} (attempt {record.attempt})"
        output = result.output[-2000:].rstrip()
        if result.ok:
            log.info("%s passed in %.1fs", what, result.seconds)
        elif output:
            log.warning("%s: %s; its output:\n%s", what, result.reason, output)
        else:
            log.warning("%s: %s", what, result.reason)
        with self._lock:
            setattr(record, hook, PASSED if result.ok else FAILED)
            if result.reason is not None:
                record.unreported.append(
                    HookFailure(
                        job_id=record.job_id,
                        attempt=record.attempt,
                        hook=hook,  # type: ignore[arg-type]
                        exit_code=result.exit_code,
                        reason=result.reason[:1024],
                    )
                )
            self._save(record)
        self._on_done()

    def _path(self, key: Attempt) -> Path:
        return self._dir / f"job-{key[0]}-{key[1]}.json"

    def _save(self, record: _Record) -> None:
        try:
            write_private(self._path((record.job_id, record.attempt)), json.dumps(record.to_json()))
        except OSError as exc:
            log.warning("cannot record the hooks of job %d: %s", record.job_id, exc)

    def _load(self) -> None:
        private_dir(self._dir)
        for path in sorted(self._dir.glob("job-*.json")):
            try:
                record = _Record.from_json(json.loads(path.read_text()))
            except (OSError, ValueError, KeyError, TypeError) as exc:
                log.warning("ignoring unreadable hook record %s: %s", path, exc)
                path.unlink(missing_ok=True)
                continue
            self._records[(record.job_id, record.attempt)] = record


def _new_record(key: Attempt, tasks: list[DesiredTask]) -> _Record:
    """What the hooks of an attempt need to know of its job, from its tasks here."""
    env = tasks[0].env
    return _Record(
        job_id=key[0],
        attempt=key[1],
        user=next((t.user for t in tasks if t.user), None),
        gpus=sorted({i for t in tasks for i in t.gpus}),
        variables={k: env[k] for k in JOB_VARIABLES if k in env},
    )
