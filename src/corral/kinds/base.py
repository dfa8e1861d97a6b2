"""What a job kind plugin is, and the values it exchanges with the control plane.

A kind (``kind: mpi`` in a manifest) is a small class with a ``name`` that

1. validates its own block of the manifest (``mpi: {...}``: :meth:`JobKind.options`),
2. checks a job of its kind and expands it into roles (:meth:`JobKind.expand`: a Ray
   job becomes a head and workers), and
3. says what each task runs (:meth:`JobKind.launch`: command and environment).

Kinds are pure: no I/O, no clock. The control plane calls ``expand`` at submission (and
whenever it reads a stored manifest), and ``launch`` when it tells an agent what to run.
Built-in kinds are listed in ``corral.kinds.registry``; others are found through the
``corral.kinds`` entry-point group.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from corral.core.job import JobSpec, TaskRole


@dataclass(frozen=True)
class JobNode:
    """One node of a job's allocation, in node-rank order."""

    name: str
    address: str
    tasks: int  # the job's tasks there (MPI slots)
    role: str  # the role of its tasks


@dataclass(frozen=True)
class TaskContext:
    """One task to launch: where it stands and what it already sees.

    ``env`` is the environment of SPEC section 4 with the role variables
    (``CORRAL_ROLE``...), which the kind may extend; ``nodes`` lists every node slot of
    the job (a machine holding two roles' tasks appears once per role)."""

    spec: JobSpec
    job_id: int
    attempt: int
    rank: int
    local_rank: int
    node_rank: int
    node: str
    role: TaskRole
    nodes: tuple[JobNode, ...]
    master_addr: str
    master_port: int
    gpus: tuple[int, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)

    def options(self) -> dict[str, Any]:
        """The kind's manifest block (validated at submission)."""
        return kind_options(self.spec)


@dataclass(frozen=True)
class Launch:
    """What a task runs: ``command`` (argv, or a string for ``/bin/sh -c``) and the
    variables the kind adds to its environment."""

    command: tuple[str, ...] | str
    env: Mapping[str, str] = field(default_factory=dict)


@runtime_checkable
class JobKind(Protocol):
    name: str
    summary: str  # one line, for ``corral kinds`` and errors

    def options(self, block: Mapping[str, Any]) -> dict[str, Any]:
        """The kind's manifest block, validated and with defaults filled in; a
        ``ValueError`` names the bad key."""
        ...

    def expand(self, spec: JobSpec) -> JobSpec:
        """``spec`` checked for this kind (``ValueError``: why it cannot run) and
        expanded into its roles; unchanged when there is nothing to add."""
        ...

    def launch(self, task: TaskContext) -> Launch:
        """What ``task`` runs."""
        ...


def kind_options(spec: JobSpec) -> dict[str, Any]:
    """``spec.kind_options`` decoded: key -> value."""
    return {key: json.loads(value) for key, value in spec.kind_options}


def encode_options(options: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """The frozen, hashable form kept in ``JobSpec.kind_options``."""
    return tuple(sorted((key, json.dumps(value, sort_keys=True)) for key, value in options.items()))


def no_options(kind: str, block: Mapping[str, Any]) -> dict[str, Any]:
    """For a kind that takes no options: refuse any."""
    if block:
        raise ValueError(f"{kind}: kind {kind} takes no options (got {', '.join(sorted(block))})")
    return {}


def check_keys(kind: str, block: Mapping[str, Any], known: Mapping[str, type | tuple]) -> None:
    """Refuse keys of ``block`` not in ``known`` and values of the wrong type."""
    for key, value in block.items():
        if key not in known:
            raise ValueError(
                f"{kind}.{key}: not an option of kind {kind} (options: {', '.join(sorted(known))})"
            )
        if (
            not isinstance(value, known[key])
            or isinstance(value, bool)
            and bool not in _types(known[key])
        ):
            raise ValueError(f"{kind}.{key}: {value!r} is not a valid value")


def _types(given: type | tuple) -> tuple:
    return given if isinstance(given, tuple) else (given,)


def corral_python(python: str | None, module: str, *args: str) -> tuple[str, ...]:
    """The command that runs ``python -m module args...`` inside a task: with ``python``
    when the job names one, else with the interpreter the node's agent runs on (which has
    Corral; the agent passes it as ``CORRAL_PYTHON``), else ``python3``."""
    if python:
        return (python, "-m", module, *args)
    trampoline = 'exec "${CORRAL_PYTHON:-python3}" -m "$0" "$@"'
    return ("/bin/sh", "-c", trampoline, module, *args)
