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
from corral.errors import ValidationError
from corral.scheduling.config import QueueConfig, SchedulerConfig
from corral.scheduling.cycle import ClusterState, Decisions, schedule
from corral.scheduling.estimates import JobFeatures, RuntimePredictor
from corral.scheduling.fairshare import Usage, UsageLedger, held
from corral.scheduling.feasibility import never_fits, node_shapes, with_tpu_hosts
from corral.scheduling.framework import NodeRequest, Profile
from corral.scheduling.memo import SchedulingMemo
from corral.scheduling.mix import MixLearner, gpu_supply, learns_mix
from corral.scheduling.plugins.filters import fits_free
from corral.scheduling.plugins.jct import restore_cost
from corral.scheduling.registry import build_profile, default_registry
from corral.scheduling.snapshot import Snapshot
from corral.sim.result import JobRecord, Outcome, Sample, SimResult, TaskPlace
from corral.sim.workload import NodeEventKind, SimJob, Workload

FRAGMENTATION_SAMPLES = 2000  # at most this many fragmentation measurements per run
FRAGMENTATION_SHAPES = 16  # the most common pending request shapes it considers
SAVES_WHEN_SIGNALLED = math.inf  # Allocation.last_checkpoint of a job that saves on SIGTERM


class _Kind(IntEnum):  # order of simultaneous events: ends free resources first
    FINISH = 0
    PREEMPTED = 1  # a preempted job's grace period is over: it has let go
    TIME_LIMIT = 2
    NODE_FAIL = 3
    NODE_RECOVER = 4
    ARRIVAL = 5


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

    def __post_init__(self) -> None:
        if not self.nodes:
            raise ValidationError("the simulated cluster has no nodes")
        names = [n.name for n in self.nodes]
        if len(set(names)) != len(names):
            raise ValidationError("the simulated cluster declares a node twice")
        self.config = with_workload_queues(self.config, self.workload)
        # corral's request mix, learned from the jobs seen (unless given a profile)
        self._mixes = MixLearner() if self.profile is None and learns_mix(self.config) else None
        self._supply = gpu_supply(self.nodes)
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
        self._capacity = float(sum(len(n.devices) - n.tpu_chips for n in self.nodes))
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
        self._shapes = node_shapes(self.nodes)
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
        )

    def _push(self, time: float, kind: _Kind, payload: object) -> None:
        self._seq += 1
        heapq.heappush(self._events, (time, int(kind), self._seq, payload))

    # -- events --------------------------------------------------------------------

    def _handle(self, kind: _Kind, payload: object, now: float) -> bool:
        if kind is _Kind.ARRIVAL:
            return self._arrive(self.workload.jobs[int(payload) - 1], int(payload), now)
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
        run = _Run(job, core, job.spec.total_gpus)
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
            run.reason = why
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
                # SIGTERM now; it holds its resources until the grace period is over
                run.preempted_by = why
                self._preempting.add(job_id)
                run.core = replace(run.core, state=JobState.PREEMPTING)
                grace = run.job.spec.grace_period
                self._push(now + grace, _Kind.PREEMPTED, (run.core.id, run.core.attempt))
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

    def _sample(self, now: float) -> None:
        if now - self._last_frag_at >= self._frag_period:
            self._last_frag, self._last_frag_at = self._fragmentation(), now
        sample = Sample(
            time=now,
            allocated_gpus=round(self._allocated, 6),
            pending_jobs=len(self._pending) + len(self._waiting),
            running_jobs=len(self._running),
            fragmented_gpus=self._last_frag,
        )
        if self._samples and self._samples[-1].time == now:
            self._samples[-1] = sample
        else:
            self._samples.append(sample)

    def _fragmentation(self) -> float:
        """Free GPUs (on ready nodes) that none of the common pending requests could use."""
        if not self._pending:
            return 0.0
        counts: dict[NodeRequest, int] = {}
        for run in self._pending.values():
            request = NodeRequest.of(run.job.spec, self.config.queue_placement(run.job.spec.queue))
            counts[request] = counts.get(request, 0) + 1
        shapes = sorted(counts, key=counts.__getitem__, reverse=True)[:FRAGMENTATION_SHAPES]
        stranded = 0.0
        for view in self._snapshot.views():
            free = len(view.node.devices) - view.used_gpus
            if free <= 0 or not view.node.state.schedulable or view.node.tpu_chips:
                continue
            if not any(fits_free(request, view) is None for request in shapes):
                stranded += free
        return stranded

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
        )


_OUTCOME_STATES = {
    Outcome.COMPLETED: JobState.SUCCEEDED,
    Outcome.FAILED: JobState.FAILED,
    Outcome.REFUSED: JobState.FAILED,  # never ran: an afterok on it is never satisfied
    Outcome.CANCELLED: JobState.CANCELLED,
}


def with_workload_queues(config: SchedulerConfig, workload: Workload) -> SchedulerConfig:
    """A configuration that declares no queues (only the implicit ``default``) gets one
    unlimited queue per queue the workload names, as traces bring their own (users,
    virtual clusters); a configuration that declares queues is taken as it is, and jobs of
    other queues are refused, as the server refuses them."""
    if config.queues != SchedulerConfig().queues:
        return config
    names = sorted({j.spec.queue for j in workload.jobs} - {"default"})
    queues = config.queues + tuple(QueueConfig(name) for name in names)
    return replace(config, queues=queues)


def simulate(
    nodes: Sequence[Node],
    workload: Workload,
    config: SchedulerConfig | None = None,
    config_name: str = "default",
    seed: int = 0,
    progress: Callable[[int, int], None] | None = None,
) -> SimResult:
    """Run ``workload`` on ``nodes`` with the production scheduler under ``config``."""
    return Simulator(
        nodes, workload, config or SchedulerConfig(), None, config_name, seed, progress
    ).run()
