"""Properties of the placement engine, on random clusters and workloads (hypothesis).

Each example is a small cluster (1-8 GPUs of one or two models per node, NVLink domains,
network paths, MIG layouts, CPUs and memory) and a few waves of jobs (whole GPUs, shares
with or without ``gpu_memory``, MIG instances, CPU-only; gangs of 1-6 nodes with several
tasks per node; topologies, selectors, models, priorities). Each wave is one scheduling
cycle: nodes may drain, get lost or come back and some running jobs complete first, new
jobs arrive, the placements are applied. After every cycle the checks recompute the
cluster's use from the allocations alone (never from the scheduler's snapshot) and assert:

- no device is oversubscribed (shares, whole GPUs, MIG instances, ``gpu_memory``), nor
  any node's CPUs or memory;
- every job is placed whole (all its tasks, on distinct fitting nodes) or not at all;
- a required topology is never violated;
- every job left pending says why, and none is both placed and pending.

Cycles run with the default policy, backfill and fragmentation-aware sharing, each with a
fresh snapshot per cycle (as the control plane does) or with one snapshot kept in step
across cycles (as the simulator does).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from corral.core.allocation import Allocation
from corral.core.job import Job, PlacementPolicy, TopologyLevel, TopologyMode
from corral.core.node import Device, Node, NodeState
from corral.core.resources import GpuKind
from corral.scheduling.config import SchedulerConfig
from corral.scheduling.cycle import ClusterState, Decisions, schedule
from corral.scheduling.framework import Profile
from corral.scheduling.registry import build_profile
from corral.scheduling.snapshot import Snapshot
from corral.schemas.config import load_config
from tests.builders import GB, job, node

MILLI = 1000
CONFIGS: dict[str, SchedulerConfig] = {
    "default": load_config(None),
    "backfill": load_config("policy: {backfill: true}"),
    "fgd": load_config("policy: {sharing: fgd}"),
    "backfill-fgd-spread": load_config("policy: {backfill: true, sharing: fgd, placement: spread}"),
    # victims are not removed by the harness: nothing may land on what they still hold
    "preempt-quota-corral": load_config(
        "queues: [{name: default, quota: {gpus: 12}}]\n"
        "policy: {backfill: true, preemption: true, sharing: corral}"
    ),
}
_PROFILES: dict[str, Profile] = {}

MODELS = ("H100", "A100")
DEVICE_MEMORY = {"H100": 80 * GB, "A100": 40 * GB}
MIG_LAYOUTS = (
    ("3g.40gb", "3g.40gb"),
    ("2g.20gb", "2g.20gb", "3g.40gb"),
    ("1g.10gb",) * 7,
    ("7g.80gb",),
)
NETWORK_DEPTH = {TopologyLevel.LEAF: 3, TopologyLevel.SPINE: 2, TopologyLevel.ZONE: 1}

GPU_MEMORY_ADDS_UP = True
"""Whether the shares on a device may promise at most its memory in ``gpu_memory``, summed
(the snapshot counts what each device has promised; see the test at the end)."""

EXAMPLES = settings(
    max_examples=150,
    deadline=None,
    database=None,  # nothing written to the working tree; failures print their example
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def profile_for(name: str) -> Profile:
    if name not in _PROFILES:
        _PROFILES[name] = build_profile(CONFIGS[name])
    return _PROFILES[name]


# --- strategies ------------------------------------------------------------------------------


def often(value: object, *others: object) -> st.SearchStrategy:
    """``value`` half of the time (and what examples shrink to), else one of ``others``."""
    return st.sampled_from([value] * max(1, len(others)) + list(others))


@st.composite
def nodes(draw: st.DrawFn, name: str) -> Node:
    """One ready node."""
    count = draw(st.integers(1, 8))
    models = draw(st.sampled_from([("H100",), ("A100",), MODELS]))
    domain_size = draw(st.sampled_from([8, 4, 2, 1]))  # NVLink domains of this many GPUs
    with_mig = draw(st.integers(0, 2)) == 2
    devices = []
    for i in range(count):
        model = draw(st.sampled_from(models))
        mig = draw(st.sampled_from(((), *MIG_LAYOUTS))) if with_mig else ()
        devices.append(Device(i, model, DEVICE_MEMORY[model], i // domain_size, mig=mig))
    zone, spine, leaf = (draw(st.sampled_from([0, 0, 0, 1])) for _ in range(3))
    path = (f"z{zone}", f"z{zone}s{spine}", f"z{zone}s{spine}l{leaf}")
    return Node(
        name=name,
        devices=tuple(devices),
        cpus=float(draw(often(96, 16, 8))),
        memory=draw(often(1000, 256, 64)) * GB,
        network=path[: draw(st.sampled_from([3, 3, 2, 0]))],
        labels=draw(st.sampled_from([(("pool", "a"),), (), (("pool", "b"),)])),
    )


@st.composite
def jobs(draw: st.DrawFn, job_id: int, cluster: tuple[Node, ...]) -> Job:
    """A pending job whose spec the manifest would accept, sized for ``cluster``."""
    builder = job(job_id).priority(draw(st.integers(0, 3)))
    kinds = [GpuKind.FRACTION, GpuKind.WHOLE, GpuKind.NONE]
    profiles = sorted({p for n in cluster for d in n.devices for p in d.mig})
    if profiles:
        kinds.append(GpuKind.MIG)
    kind = draw(st.sampled_from(kinds))
    model = draw(often(None, "H100", "A100", "a100"))
    in_prefix = model is not None and draw(st.booleans())  # "H100:2" rather than gpu_model
    prefix = f"{model}:" if in_prefix else ""
    if model is not None and not in_prefix:
        builder.model(model)
    if kind is GpuKind.WHOLE:
        count = draw(st.integers(1, 8))
        builder.gpus(f"{prefix}{count}")
        builder.tasks(draw(st.sampled_from([t for t in (1, 2, 4, 8) if count % t == 0])))
    elif kind is GpuKind.FRACTION:
        builder.gpus(f"{prefix}{draw(st.sampled_from([0.5, 0.25, 0.75]))}")
        memory = draw(st.sampled_from([None, 20, 30, 10, 50]))
        if memory is not None:
            builder.gpu_memory(memory * GB)
    elif kind is GpuKind.MIG:  # a declared profile, or one no node has ("4g.40gb")
        builder.gpus(f"{prefix}{draw(st.sampled_from([*profiles, '4g.40gb']))}")
    elif model is not None:
        builder.tasks(draw(st.integers(1, 4)))  # CPU-only; the model pattern is moot
    count = draw(often(1, *range(2, len(cluster) + 1)))
    builder.nodes(count)
    levels = [*NETWORK_DEPTH, TopologyLevel.ANY]
    if count == 1:
        levels += [TopologyLevel.NVLINK, TopologyLevel.NVLINK, TopologyLevel.NODE]  # one node
    level = draw(often(None, *levels))
    if level is not None:
        builder.topology(level.value, draw(st.sampled_from(["required", "preferred"])))
    cpus = draw(often(None, 4, 10, 32))
    if cpus is not None:
        builder.cpus(cpus)
    memory = draw(often(None, 8, 100, 500))
    if memory is not None:
        builder.memory(memory * GB)
    selector = draw(often(None, "a", "b"))
    if selector is not None:
        builder.selector(pool=selector)
    placement = draw(st.sampled_from([None, *PlacementPolicy]))
    if placement is not None:
        builder.placement(placement)
    estimate = draw(st.sampled_from([None, 150.0, 50.0, 1000.0]))
    if estimate is not None:
        builder.runtime_estimate(estimate)
    return builder.build()


@dataclass(frozen=True)
class Wave:
    """One cycle: these nodes change state and these running jobs complete first, then
    these jobs arrive."""

    states: tuple[tuple[str, NodeState], ...]
    done: frozenset[int]
    arrivals: tuple[Job, ...]


@dataclass(frozen=True)
class Scenario:
    config: str
    keep_snapshot: bool  # one snapshot kept in step across cycles (the simulator's way)
    nodes: tuple[Node, ...]  # all ready at first
    waves: tuple[Wave, ...]


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    config = draw(st.sampled_from(list(CONFIGS)))
    keep = draw(st.booleans())
    count = draw(st.integers(1, 6))
    cluster = tuple(draw(nodes(f"n{i}")) for i in range(count))
    waves: list[Wave] = []
    next_id = 1
    states = st.sampled_from([NodeState.DRAINING, NodeState.LOST, NodeState.READY])
    for cycle in range(draw(st.integers(1, 4))):
        changes: dict[str, NodeState] = {}
        done: frozenset[int] = frozenset()
        if cycle:
            changes = draw(st.dictionaries(st.sampled_from([n.name for n in cluster]), states))
            done = frozenset(draw(st.sets(st.integers(1, next_id - 1))))
        size = draw(st.integers(1 if cycle == 0 else 0, 8))
        arrivals = tuple(draw(jobs(next_id + i, cluster)) for i in range(size))
        next_id += size
        waves.append(Wave(tuple(sorted(changes.items())), done, arrivals))
    return Scenario(config, keep, cluster, tuple(waves))


# --- one run: cycles in a row, every placement applied ---------------------------------------


@dataclass(frozen=True)
class Cycle:
    """What one cycle was given and what it decided."""

    number: int
    nodes: Mapping[str, Node]
    running: Mapping[int, Allocation]  # before the cycle
    pending: Mapping[int, Job]  # the jobs it was asked to place
    jobs: Mapping[int, Job]  # every job so far
    decisions: Decisions

    @property
    def held(self) -> list[Allocation]:
        """Everything holding resources after the placements are applied."""
        return [*self.running.values(), *self.decisions.placements]


def run(scenario: Scenario, check: Callable[[Cycle], None]) -> None:
    config, profile = CONFIGS[scenario.config], profile_for(scenario.config)
    cluster = {n.name: n for n in scenario.nodes}
    snapshot = Snapshot.build(scenario.nodes, ()) if scenario.keep_snapshot else None
    running: dict[int, Allocation] = {}
    pending: dict[int, Job] = {}
    every: dict[int, Job] = {}
    for number, wave in enumerate(scenario.waves):
        for name, node_state in wave.states:
            cluster[name] = replace(cluster[name], state=node_state)
            if snapshot is not None:
                snapshot.set_node(cluster[name])
        for job_id in sorted(wave.done & running.keys()):
            finished = running.pop(job_id)
            if snapshot is not None:
                snapshot.release(finished)
        for arrival in wave.arrivals:
            pending[arrival.id] = every[arrival.id] = arrival
        state = ClusterState(tuple(cluster.values()), tuple(running.values()), snapshot=snapshot)
        decisions = schedule(state, list(pending.values()), config, 100.0 * number, profile)
        cycle = Cycle(number, dict(cluster), dict(running), dict(pending), every, decisions)
        check(cycle)
        for placed in decisions.placements:
            running[placed.job_id] = placed
            pending.pop(placed.job_id, None)


# --- the checks: recomputed from the allocations alone ---------------------------------------


def same_model(model: str, pattern: str | None) -> bool:
    """Model matching for this test's plain model names (no globs, no prefixes)."""
    return pattern is None or model.lower() == pattern.lower()


def device(node: Node, index: int) -> Device:
    found = [d for d in node.devices if d.index == index]
    assert len(found) == 1, f"node {node.name} has no device {index}"
    return found[0]


def check_capacity(cycle: Cycle) -> None:
    """No device holds more than it has; no node gives more CPUs or memory than it has."""
    where = f"after cycle {cycle.number}"
    shares: dict[tuple[str, int], list[int]] = defaultdict(list)  # milli per share holder
    wholes: dict[tuple[str, int], list[int]] = defaultdict(list)  # job ids
    gpu_memory: Counter[tuple[str, int]] = Counter()
    instances: dict[tuple[str, int, int], list[int]] = defaultdict(list)
    cpus: Counter[str] = Counter()
    memory: Counter[str] = Counter()
    for alloc in cycle.held:
        spec = cycle.jobs[alloc.job_id].spec
        for task in alloc.tasks:
            node = cycle.nodes[task.node]
            cpus[task.node] += task.cpus
            memory[task.node] += task.memory
            for pos, index in enumerate(task.gpus):
                held = device(node, index)
                key = (task.node, index)
                if task.mig_slots:
                    slot = task.mig_slots[pos]
                    assert held.mig, f"{where}: job {alloc.job_id} holds MIG slot of non-MIG {key}"
                    assert 0 <= slot < len(held.mig), f"{where}: no slot {slot} on {key}"
                    instances[(*key, slot)].append(alloc.job_id)
                    continue
                assert not held.mig, f"{where}: job {alloc.job_id} holds MIG-mode device {key}"
                if task.gpu_milli >= MILLI:
                    wholes[key].append(alloc.job_id)
                else:
                    shares[key].append(task.gpu_milli)
                    gpu_memory[key] += spec.gpu_memory or 0
    for key, holders in wholes.items():
        assert len(holders) == 1 and not shares.get(key), (
            f"{where}: whole device {key} shared: jobs {holders}, shares {shares.get(key)}"
        )
    for key, milli in shares.items():
        assert sum(milli) <= MILLI, f"{where}: device {key} holds {milli} milli-GPU"
        capacity = device(cycle.nodes[key[0]], key[1]).memory
        assert gpu_memory[key] <= capacity or not GPU_MEMORY_ADDS_UP, (
            f"{where}: device {key} promises {gpu_memory[key] / GB:g}GB of "
            f"{capacity / GB:g}GB to its shares"
        )
    for key, holders in instances.items():
        assert len(holders) == 1, f"{where}: MIG instance {key} held by jobs {holders}"
    for name, node in cycle.nodes.items():
        assert cpus[name] <= node.cpus + 1e-6, f"{where}: {name} gives {cpus[name]} CPUs"
        assert memory[name] <= node.memory, f"{where}: {name} gives {memory[name]} bytes"


def check_gangs(cycle: Cycle) -> None:
    """Every placement has all of its job's tasks, on distinct fitting nodes and devices."""
    seen: set[int] = set()
    for alloc in cycle.decisions.placements:
        where = f"cycle {cycle.number}, job {alloc.job_id}"
        assert alloc.job_id in cycle.pending, f"{where}: placed but not pending"
        assert alloc.job_id not in seen, f"{where}: placed twice"
        seen.add(alloc.job_id)
        job_ = cycle.pending[alloc.job_id]
        spec = job_.spec
        assert alloc.attempt == job_.attempt
        assert sorted(t.rank for t in alloc.tasks) == list(range(spec.world_size)), where
        per_node = Counter(t.node for t in alloc.tasks)
        assert len(per_node) == spec.nodes, f"{where}: on {sorted(per_node)}"
        assert set(per_node.values()) == {spec.tasks_per_node}, f"{where}: {per_node}"
        for task in alloc.tasks:
            node = cycle.nodes[task.node]
            at = f"{where}, rank {task.rank} on {task.node}"
            assert node.state is NodeState.READY, f"{at}: node is {node.state.value}"
            labels = dict(node.labels)
            assert all(labels.get(k) == v for k, v in spec.node_selector), f"{at}: {labels}"
            held = [device(node, i) for i in task.gpus]
            assert len(set(task.gpus)) == len(task.gpus), f"{at}: {task.gpus}"
            assert all(same_model(d.model, spec.model_pattern) for d in held), f"{at}: {held}"
            kind = spec.gpus.kind
            if kind is GpuKind.WHOLE:
                assert len(held) == spec.gpus_per_task and task.gpu_milli == MILLI, at
                assert not task.mig_slots and not any(d.mig for d in held), at
            elif kind is GpuKind.FRACTION:
                assert len(held) == 1 and task.gpu_milli == spec.gpus.milli, at
                assert not task.mig_slots and not held[0].mig, at
                assert held[0].memory >= (spec.gpu_memory or 0), at
            elif kind is GpuKind.MIG:
                assert len(held) == 1 and len(task.mig_slots) == 1, at
                profile = held[0].mig[task.mig_slots[0]]
                assert profile.lower() == spec.gpus.mig_profile, f"{at}: got {profile}"
            else:
                assert task.gpus == () and not task.mig_slots, at
        for name in per_node:
            gpus = [i for t in alloc.tasks if t.node == name for i in t.gpus]
            assert len(set(gpus)) == len(gpus), f"{where}: tasks on {name} share {gpus}"
        assert math.isclose(sum(t.cpus for t in alloc.tasks), (spec.cpus or 0) * spec.nodes)
        assert sum(t.memory for t in alloc.tasks) <= (spec.memory or 0) * spec.nodes


def check_topology(cycle: Cycle) -> None:
    """A required topology holds: one network domain, or one NVLink domain per node."""
    for alloc in cycle.decisions.placements:
        topology = cycle.pending[alloc.job_id].spec.topology
        if topology is None or topology.mode is not TopologyMode.REQUIRED:
            continue
        where = f"cycle {cycle.number}, job {alloc.job_id} ({topology.level.value} required)"
        placed_on = [cycle.nodes[name] for name in alloc.nodes]
        if topology.level in NETWORK_DEPTH and len(placed_on) > 1:
            depth = NETWORK_DEPTH[topology.level]
            domains = {n.network[:depth] if len(n.network) >= depth else None for n in placed_on}
            assert len(domains) == 1 and None not in domains, f"{where}: {domains}"
        if topology.level is TopologyLevel.NVLINK:
            for node in placed_on:
                gpus = {i for t in alloc.tasks if t.node == node.name for i in t.gpus}
                domains = {device(node, i).nvlink_domain for i in gpus}
                assert len(domains) <= 1, f"{where}: GPUs {sorted(gpus)} in domains {domains}"


def check_pending(cycle: Cycle) -> None:
    """Each job asked about is placed or pending with a reason, never both."""
    placed = {a.job_id for a in cycle.decisions.placements}
    waiting = set(cycle.decisions.pending)
    assert not placed & waiting, f"cycle {cycle.number}: placed and pending: {placed & waiting}"
    assert placed | waiting == set(cycle.pending), f"cycle {cycle.number}: lost track of jobs"
    for job_id, why in cycle.decisions.pending.items():
        assert why.reason.strip(), f"cycle {cycle.number}: job {job_id} pending without a reason"


# --- the properties --------------------------------------------------------------------------


@EXAMPLES
@given(scenarios())
def test_no_device_or_node_is_ever_oversubscribed(scenario: Scenario) -> None:
    run(scenario, check_capacity)


@EXAMPLES
@given(scenarios())
def test_a_gang_is_placed_whole_or_not_at_all(scenario: Scenario) -> None:
    run(scenario, check_gangs)


@EXAMPLES
@given(scenarios())
def test_a_required_topology_is_never_violated(scenario: Scenario) -> None:
    run(scenario, check_topology)


@EXAMPLES
@given(scenarios())
def test_every_pending_job_says_why(scenario: Scenario) -> None:
    run(scenario, check_pending)


# --- found by the properties -----------------------------------------------------------------


def test_shares_on_a_device_promise_at_most_its_memory() -> None:
    # Hypothesis' minimal example of a bug it found (gpu_memory was checked per share, not
    # summed): two half shares asking 20GB and 30GB both landed on the one 40GB A100.
    a100 = node("n0").gpus(1, model="A100", memory=40 * GB).build()
    halves = [
        job(1).gpus(0.5).gpu_memory(20 * GB).build(),
        job(2).gpus(0.5).gpu_memory(30 * GB).build(),
    ]
    decisions = schedule(ClusterState((a100,), ()), halves, CONFIGS["default"], 0.0)
    assert [a.job_id for a in decisions.placements] == [1]
    assert decisions.pending[2].reason
