"""The provider interface: create and delete a pool's units, list what exists.

A provider is the only part of autoscaling that touches the world. The control plane's
leader calls it from its autoscaling pass (``server.services.autoscaling``), never inside
a database transaction, and learns that a unit is ready when its nodes' agents register
(their names and labels are the ones ``Pool.unit_nodes`` gives). Calls must return
quickly: ``create`` starts the work (a cloud API request, a process) and returns;
progress and failures show in ``units``.

A cloud provider is a plugin (entry-point group ``corral.providers``): a subclass of
:class:`Provider` whose ``create`` asks the cloud for the unit's machines with a boot
script that runs ``corral agent --name NODE --labels ...`` (docs/autoscaling.md).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from corral.core.node import Node
from corral.core.pools import Pool


class UnitState(StrEnum):
    CREATING = "creating"  # asked for; its machines or agents are coming up
    RUNNING = "running"  # the provider's part is done (its agents may still register)
    FAILED = "failed"  # it will not come up; ``message`` says why
    DELETING = "deleting"


@dataclass(frozen=True)
class ProviderUnit:
    """A unit as the provider sees it. ``notice``: when the provider was told the unit
    goes away (a spot termination notice's deadline, Unix time), else None."""

    name: str
    state: UnitState
    message: str = ""
    notice: float | None = None


@dataclass(frozen=True)
class ProviderContext:
    """What a provider may need: where the control plane is, the agents' join token,
    a private directory for its own state, and the agents' checkpoint root."""

    server_url: str
    join_token: str | None
    state_dir: Path
    checkpoint_root: Path | None = None
    extra: Mapping[str, str] = field(default_factory=dict)


class ProviderError(Exception):
    """A call the provider could not make; the message says why (it shows in events)."""


class Provider(ABC):
    """Creates and deletes units of the pools that name it. One instance per control
    plane replica, used by its leader only; thread-safe is not required."""

    name: str = ""

    def __init__(self, context: ProviderContext) -> None:
        self.context = context

    @classmethod
    def check(cls, pool: Pool) -> None:
        """Refuse a pool this provider cannot serve (``ValueError`` naming the field)."""
        return None

    @abstractmethod
    def create(self, pool: Pool, unit: str, nodes: tuple[Node, ...]) -> None:
        """Start creating ``unit`` of ``pool`` with ``nodes`` (named and labelled); return
        at once. Raises ProviderError if it cannot even start."""

    @abstractmethod
    def delete(self, pool: Pool, unit: str) -> None:
        """Start deleting ``unit`` (its nodes hold no work by now); idempotent."""

    @abstractmethod
    def units(self, pool: Pool) -> dict[str, ProviderUnit]:
        """The units of ``pool`` that exist or are coming up, by name."""

    def close(self) -> None:
        """Release what the provider holds (not its units: they outlive a restart)."""
        return None
