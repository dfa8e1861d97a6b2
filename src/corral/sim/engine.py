"""The discrete-event simulator: a virtual clock and an event queue around the unmodified
production scheduler (``corral.scheduling.cycle.schedule``).

Events are job arrivals, completions, time limits, and node failures and recoveries. After
every batch of simultaneous events the simulator runs one scheduling cycle, exactly as the
control loop does when it is woken, and applies the decisions: placements start jobs,
preemptions signal them, and at the end of their grace period they let go (losing the work
since their last checkpoint) and are requeued. The
scheduler cannot tell it is simulated: it gets the same snapshot and returns the same
decisions as in the server. Deterministic: the same inputs give the same result.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from enum import IntEnum

from corral.core.allocation import Allocation
from corral.core.array import Element, throttle
from corral.core.dependency import ArrayObserved, Observed, Seen, Verdict, evaluate
from corral.core.job import Job, JobSpec, JobState
from corral.core.node import Node, NodeState
from corral.core.pools import Pool
from corral.errors import ValidationError
from corral.scheduling.config import SchedulerConfig
from corral.scheduling.cycle import ClusterState, Decisions, schedule
from corral.scheduling.estimates import JobFeatures, RuntimePredictor
from corral.scheduling.fairshare import Usage, UsageLedger, held
from corral.scheduling.feasibility import never_fits, node_shapes, with_tpu_hosts
from corral.scheduling.framework import Profile
from corral.scheduling.memo import SchedulingMemo
from corral.scheduling.mix import MixLearner, gpu_supply, learns_mix
from corral.scheduling.plugins.jct import restore_cost
from corral.scheduling.registry import build_profile, default_registry
from corral.scheduling.scaling import Drain
from corral.scheduling.snapshot import Snapshot
from corral.sim.fragmentation import fragmented_gpus
from corral.sim.pools import PoolChanges, PoolKeeper, gpu_count, pool_supply
from corral.sim.result import JobRecord, Outcome, Sample, SimResult, TaskPlace
from corral.sim.workload import NodeEventKind, SimJob, Workload, with_workload_queues

FRAGMENTATION_SAMPLES = 2000  # at most this many fragmentation measurements per run
SAVES_WHEN_SIGNALLED = math.inf  # Allocation.last_checkpoint of a job that saves on SIGTERM
AUTOSCALE_ROUNDS = 4  # the autoscaler is asked again at once after it drained units


class _Kind(IntEnum):  # order of simultaneous events: ends free resources first
    FINISH = 0
    PREEMPTED = 1  # a preempted job's grace period is over: it has let go
    TIME_LIMIT = 2
    NODE_FAIL = 3
    NODE_RECOVER = 4
    ARRIVAL = 5
    POOL = 6  # a pool's timer (``corral.sim.pools``): after jobs let go at the same time


@dataclass
class _Run:
    """A job's mutable simulation state."""

    job: SimJob
    core: Job
    gpus: float
    done: float = 0.0  # seconds of work kept (checkpointed) from earlier attempts
    started: float | None = None  # start of the current attempt
    first_start: float | None = None
    end: float | None = None
    outcome: Outcome | None = None
    reason: str | None = None
    preemptions: int = 0
    lost_gpu_seconds: float = 0.0
    allocation: Allocation | None = None
    placement: tuple[TaskPlace, ...] = ()
    preempted_by: str | None = None  # while it is being preempted: why
    promised: float | None = None  # the first estimated start (backfill reservation)
    restore: float = 0.0  # seconds the current attempt spends restoring a checkpoint
    queued: float = 0.0  # when it last became pending (submission or requeue)
    provisioning_wait: float = 0.0  # of its waits, on pool units being provisioned

    @property
    def remaining(self) -> float:
        return max(0.0, self.job.duration - self.done)


@dataclass
class Simulator:
    nodes: Sequence[Node]
    workload: Workload
    config: SchedulerConfig = field(default_factory=SchedulerConfig)
    profile: Profile | None = None
    config_name: str = "default"
    seed: int = 0
    progress: Callable[[int, int], None] | None = None  # (jobs ended, jobs total)
    pools: Sequence[Pool] = ()  # node pools, autoscaled: the simulator is their provider

    def __post_init__(self) -> None:
        if not self.nodes and not self.pools:
            raise ValidationError("the simulated cluster has no nodes and no pools")
        names = [n.name for n in self.nodes]
        if len(set(names)) != len(names):
            raise ValidationError("the simulated cluster declares a node twice")
        self.config = with_workload_queues(self.config, self.workload)
        # corral's request mix, learned from the jobs seen (unless given a profile)
        self._mixes = MixLearner() if self.profile is None and learns_mix(self.config) else None
        self._supply = pool_supply(self.nodes, self.pools) if self.pools else gpu_supply(self.nodes)
        self._keeper = PoolKeeper(self.pools, self.config, self.seed) if self.pools else None
        self._order: tuple[int, ...] = ()  # the last cycle's pending jobs, in its order
        self._registry = default_registry()
        self.profile = self.profile or build_profile(self.config, self._registry)
        self._nodes = {n.name: replace(n, state=NodeState.READY) for n in self.nodes}
        # The scheduler's working copy, kept in step between cycles (see ClusterState).
        self._snapshot = Snapshot(self._nodes.values())
        self._memo = SchedulingMemo()  # the scheduler's caches, kept with the snapshot
        self._held: tuple[Allocation, ...] | None = None  # what running jobs hold (None: to do)
        self._holding: dict[int, Allocation] = {}  # what each running job holds, by job id
        self._preempting: set[int] = set()  # running jobs signalled to stop
        self._checkpoints = any(j.checkpoint_interval for j in self.workload.jobs)
        # GPU metrics count GPUs: TPU chips (TPU hosts) are neither capacity nor fragments
        self._fixed = float(sum(gpu_count(n) for n in self.nodes))
        self._capacity = self._fixed + (self._keeper.most_gpus() if self._keeper else 0.0)
        self._events: list[tuple[float, int, int, object]] = []
        self._seq = 0
        self._runs: list[_Run] = []
        self._pending: dict[int, _Run] = {}  # job id -> run, in arrival order
        self._waiting: dict[int, _Run] = {}  # arrived, its dependency not yet satisfied
        self._by_name: dict[str, _Run] = {}  # every job that arrived
        # job arrays (``SimJob.array``): each one's number and elements, by name
        self._arrays: dict[str, tuple[int, int]] = {}
        for job in self.workload.jobs:
            if job.array is not None:
                number, count = self._arrays.get(job.array.name, (len(self._arrays), 0))
                self._arrays[job.array.name] = (number, count + 1)
        self._elements: dict[str, list[_Run]] = {}  # the elements arrived, by array
        self._running: dict[int, _Run] = {}
        self._allocated = 0.0
        self._samples: list[Sample] = []
        self._ended = 0
        self._shapes = node_shapes(self.nodes) + (self._keeper.shapes() if self._keeper else [])
        span = max((j.submit_time for j in self.workload.jobs), default=0.0)
        self._frag_period = span / FRAGMENTATION_SAMPLES if span > 0 else 0.0
        self._last_frag_at = -math.inf
        self._last_frag = 0.0
        self._rates: dict[str, Usage] = {}  # what each queue holds now (fair-share ledger)
        start = min((j.submit_time for j in self.workload.jobs), default=0.0)
        self._ledger = UsageLedger.start(start, self.config.policy.fair_share_half_life)
        self._predictor = RuntimePredictor()  # run times learned from completions
        # spec -> (why it can never run, else None; its priority; preemptible)
        self._admissions: dict[JobSpec, tuple[str | None, int, bool]] = {}

    # -- driving -------------------------------------------------------------------

    def run(self) -> SimResult:
        for index, job in enumerate(self.workload.jobs, start=1):
            self._push(job.submit_time, _Kind.ARRIVAL, index)
        for event in self.workload.node_events:
            if event.node not in self._nodes:
                raise ValidationError(f"node event for unknown node {event.node!r}")
            kind = _Kind.NODE_FAIL if event.kind is NodeEventKind.FAIL else _Kind.NODE_RECOVER
            self._push(event.time, kind, event.node)
        if self._keeper is not None:  # the pools' min units, there from the start
            start = min((j.submit_time for j in self.workload.jobs), default=0.0)
            self._pool_changes(self._keeper.start(start), start)
        total = len(self.workload.jobs)
        while self._events:
            now = self._events[0][0]
            if len(self.config.queues) > 1:  # fair share has something to weigh
                self._ledger = self._ledger.advance_rates(now, self._rates)
            changed = False
            while self._events and self._events[0][0] == now:
                _, kind, _, payload = heapq.heappop(self._events)
                changed |= self._handle(_Kind(kind), payload, now)
            if changed:
                self._cycle(now)
                if self.progress:
                    self.progress(self._ended, total)
        for run in [*self._waiting.values(), *self._pending.values(), *self._running.values()]:
            run.outcome, run.reason = Outcome.UNFINISHED, run.reason or "never started"
        return SimResult(
            jobs=tuple(self._record(r) for r in self._runs),
            samples=tuple(self._samples),
            capacity_gpus=self._capacity,
            config_name=self.config_name,
            seed=self.seed,
            **(self._keeper.result(self._runs, self._fixed) if self._keeper else {}),
        )

    def _push(self, time: float, kind: _Kind, payload: object) -> None:
        self._seq += 1
        heapq.heappush(self._events, (time, int(kind), self._seq, payload))

    # -- events --------------------------------------------------------------------

    def _handle(self, kind: _Kind, payload: object, now: float) -> bool:
        if kind is _Kind.ARRIVAL:
            return self._arrive(self.workload.jobs[int(payload) - 1], int(payload), now)
        if kind is _Kind.POOL:
            assert self._keeper is not None
            active = bool(self._running) or len(self._runs) < len(self.workload.jobs)
            changes = self._keeper.event(payload, now, active)  # type: ignore[arg-type]
            self._pool_changes(changes or PoolChanges(), now)
            return changes is not None
        if kind in (_Kind.FINISH, _Kind.PREEMPTED, _Kind.TIME_LIMIT):
            job_id, attempt = payload  # type: ignore[misc]
            run = self._running.get(job_id)
            if run is None or run.core.attempt != attempt:
                return False  # stale: the attempt was stopped earlier
            if kind is _Kind.PREEMPTED:
                saved = run.job.saves_on_preemption
                self._interrupt(run, now, run.preempted_by or "preempted", saved)
            elif kind is _Kind.FINISH:
                self._stop(run, now, Outcome.COMPLETED, None, lose=False)
                self._predictor.observe(self._features(run.job), run.job.duration)
            else:
                limit = run.job.spec.time_limit or 0.0
                self._stop(run, now, Outcome.FAILED, f"time limit {limit:g}s exceeded", lose=True)
            return True
        name = str(payload)
        state = NodeState.LOST if kind is _Kind.NODE_FAIL else NodeState.READY
        self._nodes[name] = replace(self._nodes[name], state=state)
        self._snapshot.set_node(self._nodes[name])
        if kind is _Kind.NODE_FAIL:
            for run in list(self._running.values()):
                if run.allocation and name in run.allocation.nodes:
                    self._interrupt(run, now, f"node {name} failed")
        return True

    def _arrive(self, job: SimJob, job_id: int, now: float) -> bool:
        spec = with_tpu_hosts(job.spec, self._shapes)  # a TPU slice: its host count
        admitted = self._admissions.get(spec)  # (jobs often share a spec: asked once each)
        if admitted is None:
            try:
                priority, preemptible = self.config.resolve_priority(
                    spec.priority, spec.preemptible
                )
                refused = never_fits(spec, self._shapes, self.config)
            except ValidationError as exc:
                refused, priority, preemptible = exc.message, 0, True
            if len(self._admissions) >= 4096:
                self._admissions.clear()
            admitted = self._admissions[spec] = (refused, priority, preemptible)
        refused, priority, preemptible = admitted
        core = Job(
            job_id,
            spec,
            JobState.PENDING,
            priority,
            preemptible,
            job.submit_time,
            predicted_runtime=self._predict(job),
        )
        run = _Run(job, core, job.spec.total_gpus, queued=now)
        self._runs.append(run)
        self._by_name[job.name] = run
        if job.array is not None:
            self._elements.setdefault(job.array.name, []).append(run)
        if refused:
            run.outcome, run.reason, run.end = Outcome.REFUSED, refused, now
            self._ended += 1
            return False
        if job.dependency is not None:
            self._waiting[job_id] = run  # the scheduler sees it once it holds (``_gate``)
            return True
        self._submit(run)
        return True

    def _submit(self, run: _Run) -> None:
        """Hand an arrived job to the scheduler."""
        self._pending[run.core.id] = run
        if self._mixes is not None:
            self._mixes.add(run.core.id, run.core.spec)

    def _observed(self, name: str) -> Seen:
        """A job as a dependency sees it (one not arrived yet: pending, never started); an
        array's name, the whole array."""
        if name in self._arrays:
            seen = [self._observed(run.job.name) for run in self._elements.get(name, ())]
            states = [s.state for s in seen if isinstance(s, Observed)]
            return ArrayObserved(
                total=self._arrays[name][1],
                started=sum(
                    1 for s in seen if isinstance(s, Observed) and (s.started or s.state.terminal)
                ),
                succeeded=states.count(JobState.SUCCEEDED),
                failed=states.count(JobState.FAILED),
                cancelled=states.count(JobState.CANCELLED),
            )
        run = self._by_name.get(name)
        if run is None:
            return Observed(JobState.PENDING)
        state = _OUTCOME_STATES.get(run.outcome) if run.outcome else run.core.state
        return Observed(state or JobState.PENDING, run.first_start is not None)

    def _gate(self, now: float) -> bool:
        """Submit the waiting jobs whose dependency holds and cancel those whose never
        will, until nothing changes (a cancellation may decide another); True if any
        was submitted. Names are unique in a jobs file: ``singleton`` never waits."""
        submitted, changed = False, True
        while changed and self._waiting:
            changed = False
            for job_id, run in list(self._waiting.items()):
                dependency = run.job.dependency
                assert dependency is not None
                observed = {ref: self._observed(ref) for ref in dependency.refs}
                gate = evaluate(dependency, observed)
                if gate.verdict is Verdict.WAITING:
                    run.reason = gate.reason
                    continue
                del self._waiting[job_id]
                changed = True
                if gate.verdict is Verdict.SATISFIED:
                    run.reason = None
                    self._submit(run)
                    submitted = True
                else:
                    run.outcome, run.reason, run.end = Outcome.CANCELLED, gate.reason, now
                    self._ended += 1
        return submitted

    def _start(self, run: _Run, alloc: Allocation, now: float) -> None:
        del self._pending[run.core.id]
        self._running[run.core.id] = run
        run.core = replace(run.core, state=JobState.RUNNING)
        if run.job.saves_on_preemption:  # it can resume from any moment: nothing is lost
            alloc = replace(alloc, last_checkpoint=SAVES_WHEN_SIGNALLED)
        run.allocation, run.started = alloc, now
        self._holding[run.core.id] = alloc
        self._held = None
        if self._keeper is not None:
            run.provisioning_wait += self._keeper.provisioning_wait(alloc, run.queued, now)
            self._pool_changes(self._keeper.hold(alloc, now, +1), now)
        run.first_start = now if run.first_start is None else run.first_start
        run.placement = tuple(TaskPlace(t.node, t.gpus) for t in alloc.tasks)
        self._allocated += run.gpus
        self._rate(alloc, +1)
        self._push(now + run.restore + run.remaining, _Kind.FINISH, (run.core.id, run.core.attempt))
        if run.job.spec.time_limit:
            self._push(
                now + run.job.spec.time_limit, _Kind.TIME_LIMIT, (run.core.id, run.core.attempt)
            )

    def _rate(self, alloc: Allocation, sign: int) -> None:
        """Add (or take away) what ``alloc`` holds to its queue's rate of use."""
        use, now = held(alloc), self._rates.get(alloc.queue, Usage())
        self._rates[alloc.queue] = Usage(
            now.gpu + sign * use.gpu, now.cpu + sign * use.cpu, now.memory + sign * use.memory
        )

    def _stop(
        self,
        run: _Run,
        now: float,
        outcome: Outcome | None,
        why: str | None,
        lose: bool,
        saved: bool = False,
    ) -> None:
        """End the current attempt: done (``outcome``) or back to pending (None). ``lose``:
        the work since the last checkpoint is lost, unless ``saved`` (it saved when
        signalled)."""
        del self._running[run.core.id]
        self._holding.pop(run.core.id, None)
        self._preempting.discard(run.core.id)
        self._held = None
        self._allocated -= run.gpus
        if run.allocation is not None:
            self._snapshot.release(run.allocation)
            self._rate(run.allocation, -1)
            if self._keeper is not None:
                self._pool_changes(self._keeper.hold(run.allocation, now, -1), now)
        elapsed = 0.0 if run.started is None else now - run.started
        progress = max(0.0, elapsed - run.restore)  # restoring a checkpoint is no progress
        run.lost_gpu_seconds += (elapsed - progress) * run.gpus
        if lose:
            total = run.done + progress
            interval = run.job.checkpoint_interval
            kept = math.floor(total / interval) * interval if interval else 0.0
            if saved:  # it saved its state when signalled
                kept = total
            run.lost_gpu_seconds += (total - kept) * run.gpus
            # it resumes from a checkpoint: restoring it takes a while at the next start
            run.restore = restore_cost(run.gpus) if kept > 0 else 0.0
            run.done = kept
        else:
            run.done += progress
        run.allocation, run.started, run.preempted_by = None, None, None
        if outcome is None:
            run.core = replace(
                run.core, state=JobState.PENDING, attempt=run.core.attempt + 1, ran=run.done
            )
            self._pending[run.core.id] = run
            run.reason, run.queued = why, now
            return
        run.outcome, run.reason, run.end = outcome, why, now
        self._ended += 1
        if self._mixes is not None:
            self._mixes.end(run.core.id)

    def _interrupt(self, run: _Run, now: float, why: str, saved: bool = False) -> None:
        """Preemption or node loss: lose the work since the last checkpoint (none when it
        ``saved`` on the signal), requeue or fail."""
        run.preemptions += 1
        if run.job.spec.requeue:
            self._stop(run, now, None, f"{why}; requeued", lose=True, saved=saved)
        else:
            self._stop(run, now, Outcome.FAILED, f"{why}; requeue is false", lose=True, saved=saved)

    # -- scheduling ----------------------------------------------------------------

    def _allocations(self, now: float | None = None) -> tuple[Allocation, ...]:
        """What the running jobs hold; with ``now``, with their last checkpoint as of then
        (a job that saves when signalled can always resume from now)."""
        if now is None or not self._checkpoints:  # the same until a job starts or stops
            if self._held is None:
                self._held = tuple(self._holding.values())
            return self._held
        held = []
        for run in self._running.values():
            alloc = run.allocation
            if alloc is None:
                continue
            interval = run.job.checkpoint_interval
            if now is not None and interval and run.started is not None:
                saved = run.started + math.floor((now - run.started) / interval) * interval
                alloc = replace(alloc, last_checkpoint=saved if saved > run.started else None)
            held.append(alloc)
        return tuple(held)

    def _features(self, job: SimJob) -> JobFeatures:
        return JobFeatures.of(job.spec, job.user)

    def _predict(self, job: SimJob) -> float | None:
        """The run time learned from the completions so far (None without any)."""
        found = self._predictor.predict(self._features(job))
        return None if found is None else found.seconds

    def _learn_mix(self) -> None:
        """A new profile when the request mix of the jobs seen (pending, running, the last
        to end) changed materially (``scheduling/mix.py``); the memo goes with the old."""
        learned = self._mixes.refresh(self._supply) if self._mixes is not None else None
        if learned is not None:
            self.profile = build_profile(self.config, self._registry, learned)
            self._memo = SchedulingMemo()

    def _cycle(self, now: float) -> None:
        self._gate(now)
        # a start may satisfy an ``after``: schedule again what that lets in
        while self._schedule(now) and self._waiting and self._gate(now):
            pass
        if self._keeper is not None:
            self._autoscale(now)
        self._sample(now)

    def _schedule(self, now: float) -> bool:
        """One scheduling pass over the pending jobs; True if it started any."""
        running = len(self._running)
        if self._pending:
            self._learn_mix()
            state = ClusterState(
                nodes=tuple(self._nodes.values()),
                allocations=self._allocations(now if self.config.policy.preemption else None),
                snapshot=self._snapshot,
                memo=self._memo,
                preempting=frozenset(self._preempting),
                usage=self._ledger,
            )
            pending = [r.core for r in self._throttled()]
            decisions = schedule(state, pending, self.config, now, self.profile, estimate=False)
            self._apply(decisions, now)
            if self._keeper is not None:
                self._order = tuple(decisions.pending)
        return len(self._running) > running

    def _throttled(self) -> list[_Run]:
        """The pending jobs to offer the scheduler: all but the elements of arrays whose
        throttle (``%MAX``) holds them back (``core.array.throttle``)."""
        runs = list(self._pending.values())
        elements = [
            Element(r.core.id, self._arrays[a.name][0], a.task, a.max_running)
            for r in runs
            if (a := r.job.array) is not None and a.max_running is not None
        ]
        if not elements:
            return runs
        running: dict[int, int] = {}
        for run in self._running.values():
            if run.job.array is not None:
                number = self._arrays[run.job.array.name][0]
                running[number] = running.get(number, 0) + 1
        blocked = throttle(elements, running)
        return [r for r in runs if r.core.id not in blocked]

    def _apply(self, decisions: Decisions, now: float) -> None:
        for job_id, why in decisions.preemptions:
            run = self._running.get(job_id)
            if run is not None and run.preempted_by is None:
                self._signal(run, why, run.job.spec.grace_period, now)
        for alloc in decisions.placements:  # the cycle assumed them in the snapshot
            run = self._pending.get(alloc.job_id)
            if run is not None and run.core.attempt == alloc.attempt:
                self._start(run, alloc, now)
            else:
                self._snapshot.release(alloc)
        for job_id, pend in decisions.pending.items():
            run = self._pending.get(job_id)
            if run is not None:
                run.reason = pend.reason
                if run.promised is None:
                    run.promised = pend.estimated_start

    def _signal(self, run: _Run, why: str, grace: float, now: float) -> None:
        """SIGTERM now; it holds its resources until ``grace`` seconds are over."""
        if run.preempted_by is None:
            run.preempted_by = why
            self._preempting.add(run.core.id)
            run.core = replace(run.core, state=JobState.PREEMPTING)
        self._push(now + grace, _Kind.PREEMPTED, (run.core.id, run.core.attempt))

    # -- pools (``corral.sim.pools``) --------------------------------------------------

    def _autoscale(self, now: float) -> None:
        """Ask the autoscaler, carry its plan out, and say why jobs wait on pools."""
        assert self._keeper is not None
        for _ in range(AUTOSCALE_ROUNDS):
            pending = [self._pending[i].core for i in self._order if i in self._pending]
            nodes, held = tuple(self._nodes.values()), self._allocations(now)
            plan = self._keeper.autoscale(nodes, held, pending, now, self.profile)
            self._pool_changes(self._keeper.apply(plan, now), now)
            for job_id, why in plan.preemptions:  # consolidation: moved off a unit
                if (run := self._running.get(job_id)) is not None:
                    self._signal(run, why, run.job.spec.grace_period, now)
            for job_id, why in plan.waits.items():
                if (run := self._pending.get(job_id)) is not None:
                    run.reason = why
            if not any(isinstance(action, Drain) for action in plan.actions):
                break

    def _pool_changes(self, changes: PoolChanges, now: float) -> None:
        """Spot notices signal the jobs on those nodes (to let go by the deadline); nodes
        deleted lose their jobs; nodes come, go or change state; timers are set."""
        for nodes, deadline in changes.notices:
            for run in list(self._running.values()):
                if run.allocation and not set(nodes).isdisjoint(run.allocation.nodes):
                    grace = min(run.job.spec.grace_period, deadline - now)
                    self._signal(run, f"spot interruption of {nodes[0]}", grace, now)
        gone = set(changes.removed)
        for run in list(self._running.values()) if gone else ():
            if run.allocation and not gone.isdisjoint(run.allocation.nodes):
                self._interrupt(run, now, "its pool node was deleted")
        for name in changes.removed:
            del self._nodes[name]
        for node in (*changes.states, *changes.added):
            self._nodes[node.name] = node
        if changes.added or changes.removed:  # a new node set: a new snapshot
            self._snapshot = Snapshot.build(self._nodes.values(), self._holding.values())
            self._memo = SchedulingMemo()
        else:
            for node in changes.states:
                self._snapshot.set_node(node)
        for time, event in changes.timers:
            self._push(time, _Kind.POOL, event)

    def _sample(self, now: float) -> None:
        if now - self._last_frag_at >= self._frag_period:
            pending = (run.job.spec for run in self._pending.values())
            self._last_frag = fragmented_gpus(self._snapshot, pending, self.config)
            self._last_frag_at = now
        sample = Sample(
            time=now,
            allocated_gpus=round(self._allocated, 6),
            pending_jobs=len(self._pending) + len(self._waiting),
            running_jobs=len(self._running),
            fragmented_gpus=self._last_frag,
            paid_gpus=None if self._keeper is None else self._fixed + self._keeper.paid_gpus(),
        )
        if self._samples and self._samples[-1].time == now:
            self._samples[-1] = sample
        else:
            self._samples.append(sample)

    def _record(self, run: _Run) -> JobRecord:
        return JobRecord(
            name=run.job.name,
            queue=run.job.spec.queue,
            submit_time=run.job.submit_time,
            start_time=run.first_start,
            end_time=run.end,
            state=run.outcome or Outcome.UNFINISHED,
            gpus=run.gpus,
            run_time=run.job.duration,
            preemptions=run.preemptions,
            lost_gpu_seconds=run.lost_gpu_seconds,
            placement=run.placement,
            reason=run.reason,
            promised_start=run.promised,
            provisioning_wait=run.provisioning_wait,
        )


_OUTCOME_STATES = {
    Outcome.COMPLETED: JobState.SUCCEEDED,
    Outcome.FAILED: JobState.FAILED,
    Outcome.REFUSED: JobState.FAILED,  # never ran: an afterok on it is never satisfied
    Outcome.CANCELLED: JobState.CANCELLED,
}


def simulate(
    nodes: Sequence[Node],
    workload: Workload,
    config: SchedulerConfig | None = None,
    config_name: str = "default",
    seed: int = 0,
    progress: Callable[[int, int], None] | None = None,
    pools: Sequence[Pool] = (),
) -> SimResult:
    """Run ``workload`` on ``nodes`` (and ``pools``, autoscaled) with the production
    scheduler under ``config``."""
    return Simulator(
        nodes, workload, config or SchedulerConfig(), None, config_name, seed, progress, pools
    ).run()
