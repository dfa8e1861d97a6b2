"""Run times learned from history: what a job without a ``runtime_estimate`` is expected to
run, predicted from the jobs like it that finished before (QSSF, Helios SC'21).

A finished job is remembered under several keys, from the most specific to the least:
its user with its command and GPU count, its user with its name and GPU count, its user
and command, its user and name, its user and GPU count, its user, its command (any user),
its GPU count, and everyone. A prediction comes from the most specific key that has
history: the median of that key's last ``window`` run times (the median, as run times
are heavy-tailed: one week-long outlier must not make a user's next hour-long job look
long). Names and commands that say nothing (``job-17``, ``trace:job-17``: numbered
names) are not keys.

Pure and deterministic: the caller decides what was observed (the control plane feeds
the jobs that succeeded, the simulator its completions) and when.
"""

from __future__ import annotations

import re
import statistics
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field

from corral.core.job import JobSpec

DEFAULT_WINDOW = 32
_NUMBERED = re.compile(r"^(trace:)?([A-Za-z_.]*[-_.])?\d+$")  # job-17, trace:job-17, 4711


@dataclass(frozen=True)
class JobFeatures:
    """What a prediction looks at. ``name``/``command`` are None when they say nothing."""

    user: str | None
    name: str | None
    command: str | None
    gpus: float

    @classmethod
    def of(cls, spec: JobSpec, user: str | None = None) -> JobFeatures:
        command = spec.command if isinstance(spec.command, str) else " ".join(spec.command)
        return cls(user, _meaningful(spec.name), _meaningful(command), spec.total_gpus)

    def history_keys(self) -> Iterator[tuple]:
        """Its history keys, most specific first."""
        user, name, command, gpus = self.user, self.name, self.command, self.gpus
        if user is not None:
            if command is not None:
                yield ("user-command-gpus", user, command, gpus)
            if name is not None:
                yield ("user-name-gpus", user, name, gpus)
            if command is not None:
                yield ("user-command", user, command)
            if name is not None:
                yield ("user-name", user, name)
            yield ("user-gpus", user, gpus)
            yield ("user", user)
        if command is not None:
            yield ("command", command)
        if name is not None:
            yield ("name", name)
        yield ("gpus", gpus)
        yield ("all",)


def _meaningful(text: str | None) -> str | None:
    if not text or _NUMBERED.match(text.strip()):
        return None
    return text.strip()


@dataclass(frozen=True)
class Prediction:
    seconds: float
    basis: str  # which key answered: "user-command-gpus", ..., "all"
    samples: int  # how many finished jobs it rests on

    def describe(self) -> str:
        basis = self.basis.replace("-", ", ").replace("gpus", "GPU count")
        if basis == "all":
            basis = "every job"
        return f"median of {self.samples} finished job{'s' * (self.samples != 1)} ({basis})"


@dataclass
class _History:
    runs: deque[float]
    median: float | None = None  # cached until the next observation


@dataclass
class RuntimePredictor:
    """Online run-time predictions (module docstring). ``window``: run times kept per key."""

    window: int = DEFAULT_WINDOW
    _keys: dict[tuple, _History] = field(default_factory=dict)
    observed: int = 0

    def observe(self, features: JobFeatures, runtime: float) -> None:
        """Remember that a job with ``features`` ran ``runtime`` seconds to completion."""
        if not runtime > 0:
            return
        self.observed += 1
        for key in features.history_keys():
            history = self._keys.get(key)
            if history is None:
                history = self._keys[key] = _History(deque(maxlen=self.window))
            history.runs.append(runtime)
            history.median = None

    def predict(self, features: JobFeatures) -> Prediction | None:
        """The expected run time of a job with ``features``; None before any history."""
        for key in features.history_keys():
            history = self._keys.get(key)
            if history is None:
                continue
            if history.median is None:
                history.median = statistics.median(history.runs)
            return Prediction(history.median, key[0], len(history.runs))
        return None
