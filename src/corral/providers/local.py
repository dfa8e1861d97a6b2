"""The ``local`` provider: a unit is one ``corral agent`` process per node on this host,
its devices simulated as the pool's template declares them (as ``corral up --cluster``
starts declared nodes). For trying autoscaling on one machine, and for tests.

The agents' process ids are recorded in ``<state_dir>/local-agents.json`` so that a
restarted server re-adopts them and ``corral down`` stops them.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path

from corral.core.node import Node
from corral.core.pools import Pool
from corral.providers.base import Provider, ProviderError, ProviderUnit, UnitState

log = logging.getLogger(__name__)

RECORD = "local-agents.json"


@dataclass
class _Agents:
    pool: str
    pids: dict[str, int]  # node -> pid
    deleting: bool = False
    failed: str = ""
    exits: dict[str, int] = field(default_factory=dict)


class LocalProvider(Provider):
    name = "local"

    def __init__(self, context) -> None:  # noqa: ANN001 -- ProviderContext
        super().__init__(context)
        self.dir = context.state_dir
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._children: dict[int, subprocess.Popen] = {}
        self._units: dict[str, _Agents] = {}
        with contextlib.suppress(OSError, ValueError, TypeError):
            for unit, entry in json.loads((self.dir / RECORD).read_text()).items():
                self._units[unit] = _Agents(**entry)

    def create(self, pool: Pool, unit: str, nodes: tuple[Node, ...]) -> None:
        from corral.embedded.cluster import agent_command, node_file_of, spawn

        if unit in self._units and not self._units[unit].deleting:
            return
        (self.dir / "nodes").mkdir(exist_ok=True)
        (self.dir / "logs").mkdir(exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
        env["CORRAL_HOME"] = str(self.context.extra.get("home", self.dir))
        if self.context.join_token:
            env["CORRAL_JOIN_TOKEN"] = self.context.join_token
        pids: dict[str, int] = {}
        server = self.context.server_url
        try:
            for node in nodes:
                path = self.dir / "nodes" / f"{node.name}.json"
                path.write_text(json.dumps(node_file_of(node)))
                cmd = agent_command(server, node.name, self.context.checkpoint_root)
                cmd += ["--node-file", str(path)]
                child = spawn(cmd, self.dir / "logs" / f"agent-{node.name}.log", env)
                self._children[child.pid] = child
                pids[node.name] = child.pid
        except OSError as exc:
            for pid in pids.values():
                _signal(pid, signal.SIGKILL)
            raise ProviderError(f"cannot start an agent for {unit}: {exc}") from None
        self._units[unit] = _Agents(pool.name, pids)
        self._save()
        log.info("local provider: started %s (%s)", unit, ", ".join(pids))

    def delete(self, pool: Pool, unit: str) -> None:
        agents = self._units.get(unit)
        if agents is None:
            return
        agents.deleting = True
        for pid in agents.pids.values():
            if self._alive(pid):
                _signal(pid, signal.SIGTERM)
        self._save()

    def units(self, pool: Pool) -> dict[str, ProviderUnit]:
        found: dict[str, ProviderUnit] = {}
        changed = False
        for unit, agents in list(self._units.items()):
            if agents.pool != pool.name:
                continue
            alive = {node: self._alive(pid) for node, pid in agents.pids.items()}
            if agents.deleting:
                if any(alive.values()):
                    found[unit] = ProviderUnit(unit, UnitState.DELETING)
                else:
                    del self._units[unit]
                    changed = True
                continue
            dead = sorted(node for node, up in alive.items() if not up)
            if dead and not agents.failed:
                agents.failed = f"agent {dead[0]} exited: {self._last_line(dead[0])}"
                changed = True
            if agents.failed:
                found[unit] = ProviderUnit(unit, UnitState.FAILED, agents.failed)
            else:
                found[unit] = ProviderUnit(unit, UnitState.RUNNING)
        if changed:
            self._save()
        return found

    def close(self) -> None:
        for child in self._children.values():
            with contextlib.suppress(OSError):
                child.poll()

    # -- internals ---------------------------------------------------------------------

    def _alive(self, pid: int) -> bool:
        child = self._children.get(pid)
        if child is not None:
            return child.poll() is None
        from corral.embedded.cluster import process_alive

        return process_alive(pid)

    def _last_line(self, node: str) -> str:
        path = self.dir / "logs" / f"agent-{node}.log"
        try:
            lines = path.read_text(errors="replace").strip().splitlines()
        except OSError:
            lines = []
        return (lines[-1][:300] if lines else "no output") + f" (log: {path})"

    def _save(self) -> None:
        record = {unit: asdict(agents) for unit, agents in self._units.items()}
        temporary = self.dir / f"{RECORD}.tmp"
        temporary.write_text(json.dumps(record, indent=1))
        os.replace(temporary, self.dir / RECORD)


def recorded_pids(state_dir: Path) -> list[int]:
    """The agent processes the local provider recorded under ``state_dir`` (for
    ``corral down``)."""
    try:
        record = json.loads((state_dir / RECORD).read_text())
        return [int(pid) for entry in record.values() for pid in entry["pids"].values()]
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return []


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)
