"""Prometheus metrics of one control plane, on a registry of its own (no global state).

Gauges and the preemption/requeue counters are read from the database and the telemetry
store at each scrape (the counters count recorded events, so they survive restarts);
the two histograms are observed in-process as cycles run and jobs start. Names and labels
are listed in docs/monitoring.md.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from sqlalchemy import String, cast, func, select

from corral.core.node import NodeState
from corral.server.db.models import EventRow, JobRow

if TYPE_CHECKING:
    from corral.server.context import Context

CYCLE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
WAIT_BUCKETS = (1, 5, 15, 30, 60, 300, 900, 1800, 3600, 4 * 3600, 12 * 3600, 86400, 7 * 86400)


class ServerMetrics:
    """The registry and the in-process histograms; :meth:`bind` adds the scrape-time
    collector for a context (once)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.cycle_seconds = Histogram(
            "corral_scheduling_cycle_duration_seconds",
            "Duration of one scheduling cycle (load, schedule, apply).",
            buckets=CYCLE_BUCKETS,
            registry=self.registry,
        )
        self.start_wait = Histogram(
            "corral_job_submission_to_start_seconds",
            "Time from a job's submission to the start of its first attempt.",
            ["queue"],
            buckets=WAIT_BUCKETS,
            registry=self.registry,
        )
        self._bound = False

    def bind(self, ctx: Context) -> None:
        if not self._bound:
            self.registry.register(_ClusterCollector(ctx))
            self._bound = True

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _ClusterCollector:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    def describe(self) -> list[Metric]:
        return []  # names are not checked against the histograms'; nothing to read at start

    def collect(self) -> Iterator[Metric]:
        from corral.server.services.nodes import NodeService

        yield from self._jobs()
        nodes = NodeService(self.ctx).list()
        yield from self._nodes(nodes)
        yield from self._gpus(nodes)
        yield from self._telemetry({n.name: n for n in nodes})
        yield from self._events()
        if self.ctx.settings.pools:
            yield from self._pools()

    def _pools(self) -> Iterator[Metric]:
        from corral.server.services.pools import list_pools

        units = GaugeMetricFamily(
            "corral_pool_units", "Units of each node pool by phase.", labels=["pool", "phase"]
        )
        desired = GaugeMetricFamily(
            "corral_pool_desired_units", "Units each pool should have.", labels=["pool"]
        )
        cost = GaugeMetricFamily(
            "corral_pool_cost_per_hour",
            "What each pool's units cost per hour now.",
            labels=["pool"],
        )
        for pool in list_pools(self.ctx):
            for phase, count in (
                ("provisioning", pool.provisioning),
                ("ready", pool.ready),
                ("draining", pool.draining),
            ):
                units.add_metric([pool.name, phase], count)
            desired.add_metric([pool.name], pool.desired)
            cost.add_metric([pool.name], pool.cost_now)
        yield from (units, desired, cost)

    def _jobs(self) -> Iterator[Metric]:
        pending = GaugeMetricFamily("corral_jobs_pending", "Pending jobs.", labels=["queue"])
        running = GaugeMetricFamily(
            "corral_jobs_running", "Running (or preempting) jobs.", labels=["queue"]
        )
        idle = GaugeMetricFamily(
            "corral_jobs_idle", "Running jobs flagged idle (GPUs near 0%).", labels=["queue"]
        )
        counts: dict[str, list[int]] = {q.name: [0, 0, 0] for q in self.ctx.config.queues}
        with self.ctx.sessions() as session:
            rows = session.execute(
                select(JobRow.queue, JobRow.state, JobRow.idle, func.count())
                .where(JobRow.state.in_(("pending", "running", "preempting")))
                .group_by(JobRow.queue, JobRow.state, JobRow.idle)
            )
            for queue, state, flagged, n in rows:
                row = counts.setdefault(queue, [0, 0, 0])
                row[0 if state == "pending" else 1] += n
                row[2] += n if flagged and state == "running" else 0
        for queue, (waiting, active, flagged) in sorted(counts.items()):
            pending.add_metric([queue], waiting)
            running.add_metric([queue], active)
            idle.add_metric([queue], flagged)
        yield from (pending, running, idle)

    def _nodes(self, nodes: list) -> Iterator[Metric]:
        states = GaugeMetricFamily("corral_nodes", "Nodes by state.", labels=["state"])
        per_node = GaugeMetricFamily(
            "corral_node_state", "1 for the state a node is in.", labels=["node", "state"]
        )
        counts = {s.value: 0 for s in NodeState}
        for node in nodes:
            counts[node.state] = counts.get(node.state, 0) + 1
            for state in NodeState:
                per_node.add_metric([node.name, state.value], 1 if node.state == state else 0)
        for state, count in counts.items():
            states.add_metric([state], count)
        yield from (states, per_node)

    def _gpus(self, nodes: list) -> Iterator[Metric]:
        labels = ["node", "model"]
        total = GaugeMetricFamily("corral_gpus_total", "GPUs per node and model.", labels=labels)
        allocated = GaugeMetricFamily(
            "corral_gpus_allocated", "GPUs allocated (fractions count).", labels=labels
        )
        free = GaugeMetricFamily(
            "corral_gpus_free", "GPUs not allocated, on nodes taking work.", labels=labels
        )
        for node in nodes:
            sums: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
            for device in node.devices:
                if device.kind == "gpu":
                    sums[device.model][0] += 1
                    sums[device.model][1] += device.share_used
            for model, (count, used) in sorted(sums.items()):
                taking = node.state == NodeState.READY.value
                total.add_metric([node.name, model], count)
                allocated.add_metric([node.name, model], round(used, 3))
                free.add_metric([node.name, model], round(count - used, 3) if taking else 0)
        yield from (total, allocated, free)

    def _telemetry(self, nodes: dict) -> Iterator[Metric]:
        labels = ["node", "gpu", "model"]
        families = {
            "utilization": GaugeMetricFamily(
                "corral_gpu_utilization_percent", "GPU duty cycle.", labels=labels
            ),
            "memory_used": GaugeMetricFamily(
                "corral_gpu_memory_used_bytes", "GPU memory in use.", labels=labels
            ),
            "temperature": GaugeMetricFamily(
                "corral_gpu_temperature_celsius", "GPU temperature.", labels=labels
            ),
            "power": GaugeMetricFamily("corral_gpu_power_watts", "GPU power draw.", labels=labels),
            "ecc_errors": GaugeMetricFamily(
                "corral_gpu_ecc_errors", "Uncorrectable ECC errors (volatile).", labels=labels
            ),
            "xid_errors": GaugeMetricFamily(
                "corral_gpu_xid_errors", "Critical Xid events seen by the agent.", labels=labels
            ),
        }
        fresh_after = self.ctx.clock() - self.ctx.settings.node_timeout
        for sample in self.ctx.telemetry.latest_all():
            node = nodes.get(sample.node)
            if node is None or sample.at < fresh_after:
                continue
            model = next((d.model for d in node.devices if d.index == sample.gpu), "")
            for attr, family in families.items():
                value = getattr(sample, attr)
                if value is not None:
                    family.add_metric([sample.node, str(sample.gpu), model], value)
        yield from families.values()

    def _events(self) -> Iterator[Metric]:
        preemptions = CounterMetricFamily(
            "corral_preemptions",
            "Jobs preempted (by the scheduler, users or policy).",
            labels=["queue"],
        )
        requeues = CounterMetricFamily(
            "corral_requeues", "Jobs put back in the queue as a new attempt.", labels=["queue"]
        )
        query = (
            select(JobRow.queue, EventRow.from_state, EventRow.to_state, func.count())
            .join(JobRow, cast(JobRow.id, String) == EventRow.entity_id)
            .where(
                EventRow.entity == "job",
                EventRow.to_state.in_(("preempting", "pending")),
                EventRow.from_state.in_(("running", "preempting")),
            )
            .group_by(JobRow.queue, EventRow.from_state, EventRow.to_state)
        )
        counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        with self.ctx.sessions() as session:
            for queue, _from, to, n in session.execute(query):
                counts[queue][0 if to == "preempting" else 1] += n
        for q in self.ctx.config.queues:
            counts.setdefault(q.name, [0, 0])
        for queue, (preempted, requeued) in sorted(counts.items()):
            preemptions.add_metric([queue], preempted)
            requeues.add_metric([queue], requeued)
        yield from (preemptions, requeues)
