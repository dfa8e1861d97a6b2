"""What the simulator replays: jobs with submit times and true durations, and a cluster.

Built from a jobs file (SPEC section 5) by ``corral.sim.jobs_file`` or from a public trace
by a reader in ``corral.sim.traces``. Pure data: no I/O here.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum

from corral.core.dependency import Dependency
from corral.core.job import JobSpec
from corral.core.node import Node
from corral.scheduling.config import QueueConfig, SchedulerConfig


@dataclass(frozen=True)
class SimJob:
    """One job of a workload.

    ``duration``: seconds the job runs once started, if never interrupted.
    ``checkpoint_interval``: seconds between checkpoints; a preempted job loses the work
    done since its last one (None: it restarts from zero).
    ``saves_on_preemption``: it saves its state when signalled (as ``corral.train`` jobs
    do), so a preemption loses nothing; it pays ``plugins.jct.restore_cost`` when it starts
    again. A node failure still loses the work since its last periodic checkpoint.
    ``user``: who submitted it, when the trace says (run-time predictions use it).
    ``dependency``: it is submitted to the scheduler only once this holds; it names other
    jobs of the workload by ``name`` (an array's name: all its elements).
    ``array``: it is an element of a job array (named ``{array}_{task}``).
    """

    name: str
    spec: JobSpec
    submit_time: float
    duration: float
    checkpoint_interval: float | None = None
    saves_on_preemption: bool = False
    user: str | None = None
    dependency: Dependency | None = None
    array: ArrayElement | None = None


@dataclass(frozen=True)
class ArrayElement:
    """Which job array a job is an element of: the array's name (its jobs file entry's),
    the element's index, and the array's throttle (``%MAX``; None: none)."""

    name: str
    task: int
    max_running: int | None = None


class NodeEventKind(StrEnum):
    FAIL = "fail"
    RECOVER = "recover"


@dataclass(frozen=True)
class NodeEvent:
    time: float
    node: str
    kind: NodeEventKind


@dataclass(frozen=True)
class Workload:
    """Jobs sorted by submit time; ``nodes`` when the trace comes with its own cluster.

    ``timed`` is False when the submit times and run times are made up (a pod list without
    timestamps, replayed in a packing order): JCT, wait and makespan then say nothing about
    the schedule. ``notes``: lines for the user on how to read the results.
    """

    jobs: tuple[SimJob, ...]
    nodes: tuple[Node, ...] | None = None
    node_events: tuple[NodeEvent, ...] = ()
    source: str = ""
    timed: bool = True
    notes: tuple[str, ...] = ()

    def saving_on_preemption(self) -> Workload:
        """The same workload with every job that has no ``checkpoint_interval`` saving its
        state when preempted (``SimJob.saves_on_preemption``), as traces record no
        checkpoints and as the Helios simulator assumes."""
        jobs = tuple(
            j if j.checkpoint_interval else replace(j, saves_on_preemption=True) for j in self.jobs
        )
        return replace(self, jobs=jobs)

    def with_true_runtimes(self) -> Workload:
        """The same workload with each job's true duration as its ``runtime_estimate``: an
        oracle, for the shortest-job-first baseline (real schedulers only get estimates)."""
        jobs = tuple(
            replace(j, spec=replace(j.spec, runtime_estimate=j.duration)) for j in self.jobs
        )
        return replace(self, jobs=jobs, source=f"{self.source} (true run times revealed)")


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
