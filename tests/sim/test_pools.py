"""Node pools in the simulator: provisioning, scale-down, spot interruptions and the bill
(``corral.sim.pools``), on small workloads whose schedule is known exactly."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from corral.scheduling.plugins.jct import restore_cost
from corral.schemas.cluster import load_cluster
from corral.schemas.config import load_config
from corral.sim.engine import simulate
from corral.sim.jobs_file import load_jobs
from corral.sim.metrics import compute_metrics, pools_json
from corral.sim.pools import NOTICE
from corral.sim.result import Outcome, SimResult
from tests.sim.test_cli_sim import corral

H = 3600.0
POOL = (
    "pools:\n"
    "  - name: p\n"
    "    node: {gpus: {count: 8, model: H100}}\n"
    "    min: {min}\n"
    "    max: {max}\n"
    "    provisioning_time: 60\n"
    "    cost_per_hour: 10\n"
)


def pool(min: int = 0, max: int = 4) -> str:  # noqa: A002 -- the pool's own words
    return POOL.replace("{min}", str(min)).replace("{max}", str(max))


def run(jobs: str, cluster: str | None = None, config: str | None = None, seed: int = 0):
    declared = load_cluster(cluster or pool())
    workload = load_jobs(jobs)
    pools = declared.to_pools()
    return simulate(declared.to_nodes(), workload, load_config(config), seed=seed, pools=pools)


def jobs_of(result: SimResult) -> dict:
    return {j.name: j for j in result.jobs}


def test_a_job_on_an_empty_pool_pays_from_request_to_deletion() -> None:
    result = run(
        "- {name: a, submit_time: 0, duration: 3600, resources: {gpus: 1}}\n",
        config="autoscaling: {scale_down_idle: 600}\n",
    )
    a = jobs_of(result)["a"]
    # provisioned at 0 for the job, ready at 60: it waits 60 s, all of it on provisioning
    assert (a.state, a.start_time, a.end_time) == (Outcome.COMPLETED, 60.0, 3660.0)
    assert a.provisioning_wait == 60.0 and a.placement[0].node == "p-0"
    (p,) = result.pools
    # paid from the request at 0 to the deletion at 60 + 3600 + 600 s idle
    assert result.end_time == 4260.0
    assert p.node_hours == pytest.approx(4260 / H)
    assert p.provisioning_hours == pytest.approx(60 / H)
    assert p.cost == pytest.approx(4260 / H * 10)
    assert p.gpu_hours_paid == pytest.approx(8 * 4260 / H)
    assert p.gpu_hours_used == pytest.approx(1.0)
    assert (p.units_provisioned, p.units_deleted, p.units_interrupted, p.peak_units) == (
        1,
        1,
        0,
        1,
    )
    m = compute_metrics(result)
    assert m.pools is not None
    assert m.pools.paid_gpu_hours == pytest.approx(8 * 4260 / H)
    assert m.pools.used_gpu_hours == pytest.approx(1.0)
    assert m.gpu_utilization == pytest.approx(3600 / (8 * 4260))  # allocated over paid
    assert (m.pools.provisioning_wait_jobs, m.pools.provisioning_wait_total) == (1, 60.0)
    assert m.pools.provisioning_wait_avg == 60.0
    assert m.pools.pool_cost == pytest.approx(p.cost)
    assert result.capacity_gpus == 32.0  # the pool at its max (for the bounds)


def test_a_gang_gets_its_nodes_together() -> None:
    result = run("- {name: g, submit_time: 0, duration: 100, nodes: 2, resources: {gpus: 8}}\n")
    g = jobs_of(result)["g"]
    assert (g.start_time, g.end_time) == (60.0, 160.0)
    assert sorted(t.node for t in g.placement) == ["p-0", "p-1"]
    (p,) = result.pools
    assert (p.units_provisioned, p.peak_units, p.units_deleted) == (2, 2, 2)
    # both paid from 0 to 160 + 600 s idle (the default scale_down_idle)
    assert p.node_hours == pytest.approx(2 * 760 / H)


def test_min_units_are_there_from_the_start_and_kept() -> None:
    result = run(
        "- {name: a, submit_time: 100, duration: 1000, resources: {gpus: 1}}\n",
        cluster=pool(min=1),
    )
    a = jobs_of(result)["a"]
    assert (a.start_time, a.provisioning_wait) == (100.0, 0.0)  # no wait: it was there
    (p,) = result.pools
    assert (p.units_provisioned, p.units_deleted) == (1, 0)  # never scaled below min
    assert p.provisioning_hours == 0.0
    assert p.node_hours == pytest.approx(1000 / H)  # from the first submission to the end


def test_max_caps_the_pool() -> None:
    result = run(
        "- {name: a, submit_time: 0, duration: 100, resources: {gpus: 8}}\n"
        "- {name: b, submit_time: 0, duration: 100, resources: {gpus: 8}}\n",
        cluster=pool(max=1),
    )
    jobs = jobs_of(result)
    assert sorted((j.start_time, j.end_time) for j in jobs.values()) == [
        (60.0, 160.0),
        (160.0, 260.0),
    ]
    (p,) = result.pools
    assert (p.units_provisioned, p.peak_units) == (1, 1)


TWO_APART = (
    "- {name: a, submit_time: 0, duration: 100, resources: {gpus: 1}}\n"
    "- {name: b, submit_time: 1200, duration: 100, resources: {gpus: 1}}\n"
)


def test_scale_down_idle_trades_cost_for_waits() -> None:
    quick = run(TWO_APART, config="autoscaling: {scale_down_idle: 5m}\n")
    slow = run(TWO_APART, config="autoscaling: {scale_down_idle: 30m}\n")
    (q,), (s,) = quick.pools, slow.pools
    # 5m: a unit for a (0..460), deleted, another for b (1200..1660)
    assert (q.units_provisioned, q.node_hours) == (2, pytest.approx(920 / H))
    assert jobs_of(quick)["b"].start_time == 1260.0
    # 30m: b reuses a's idle unit at once; it leaves 30m after b ends
    assert (s.units_provisioned, s.node_hours) == (1, pytest.approx(3100 / H))
    assert jobs_of(slow)["b"].start_time == 1200.0
    mq, ms = compute_metrics(quick).pools, compute_metrics(slow).pools
    assert mq is not None and ms is not None
    assert (mq.provisioning_wait_jobs, ms.provisioning_wait_jobs) == (2, 1)
    assert mq.pool_cost < ms.pool_cost


SPOT = (
    "pools:\n"
    "  - name: s\n"
    "    node: {gpus: {count: 8, model: H100}}\n"
    "    max: 2\n"
    "    provisioning_time: 60\n"
    "    cost_per_hour: 3\n"
    "    spot: true\n"
    "    interruption_rate: 2\n"  # per node-hour: a few in a 2-hour job
)
LONG = (
    "- {name: long, submit_time: 0, duration: 2h, checkpoint_interval: 10m,"
    " grace_period: 30, resources: {gpus: 8}}\n"
)


def test_spot_interruptions_preempt_requeue_and_the_run_completes() -> None:
    result = run(LONG, cluster=SPOT, seed=7)
    job = jobs_of(result)["long"]
    (p,) = result.pools
    assert job.state is Outcome.COMPLETED
    assert job.preemptions == p.units_interrupted >= 1
    assert job.lost_gpu_seconds > 0  # work since the last checkpoint, and restores
    assert p.units_provisioned == p.units_interrupted + 1 == p.units_deleted
    # each replacement waited on provisioning: at least 60 s per start
    assert job.provisioning_wait >= 60.0 * (1 + job.preemptions)
    assert job.end_time is not None and job.end_time > 7200 + 60


def test_the_same_seed_gives_the_same_run() -> None:
    first, second = run(LONG, cluster=SPOT, seed=7), run(LONG, cluster=SPOT, seed=7)
    assert first == second
    others = [run(LONG, cluster=SPOT, seed=s) for s in (1, 2, 3)]
    assert any(o.jobs != first.jobs for o in others)


@pytest.mark.parametrize("grace", [30, 600])
def test_a_spot_notice_lets_the_job_go_within_two_minutes(grace: int) -> None:
    spot = SPOT.replace("interruption_rate: 2", "interruption_rate: 0.5")
    result = run(LONG.replace("grace_period: 30", f"grace_period: {grace}"), cluster=spot, seed=1)
    job = jobs_of(result)["long"]
    assert job.state is Outcome.COMPLETED and job.preemptions == 1
    # the unit is ready at 60, its interruption the first draw of Random(seed)
    notice = 60 + random.Random(1).expovariate(0.5 / H)
    let_go = notice + min(grace, NOTICE)  # SIGTERM at the notice, gone by the deadline
    kept = (let_go - 60) // 600 * 600  # checkpoints every 10m
    restore = restore_cost(8)
    assert job.lost_gpu_seconds == pytest.approx(8 * (let_go - 60 - kept) + 8 * restore)
    # requeued, it waits for a new unit (60 s), restores, and does what is left
    assert job.end_time == pytest.approx(let_go + 60 + restore + 7200 - kept)
    assert job.provisioning_wait == pytest.approx(120.0)


def test_jobs_only_a_pool_holds_are_accepted_others_refused() -> None:
    result = run(
        "- {name: fits, submit_time: 0, duration: 10, resources: {gpus: 8}}\n"
        "- {name: huge, submit_time: 0, duration: 10, resources: {gpus: 9}}\n"
        "- {name: wide, submit_time: 0, duration: 10, nodes: 5, resources: {gpus: 8}}\n"
    )
    jobs = jobs_of(result)
    assert jobs["fits"].state is Outcome.COMPLETED
    assert jobs["huge"].state is Outcome.REFUSED and "can never fit" in jobs["huge"].reason
    assert jobs["wide"].state is Outcome.REFUSED  # 5 nodes: the pool's max is 4


FIXED_AND_POOL = "nodes:\n  - name: fixed-0\n    gpus: {count: 8, model: H100}\n" + pool()


def test_fixed_nodes_are_used_first_and_a_pool_takes_the_rest() -> None:
    result = run(
        "- {name: a, submit_time: 0, duration: 100, resources: {gpus: 8}}\n"
        "- {name: b, submit_time: 0, duration: 100, resources: {gpus: 8}}\n"
        "- {name: c, submit_time: 500, duration: 100, resources: {gpus: 8}}\n",
        cluster=FIXED_AND_POOL,
        config="autoscaling: {scale_down_idle: 60}\n",  # queue-demand by default
    )
    jobs = jobs_of(result)
    assert (jobs["a"].start_time, jobs["a"].placement[0].node) == (0.0, "fixed-0")
    assert (jobs["b"].start_time, jobs["b"].placement[0].node) == (60.0, "p-0")
    # c comes once the pool unit is gone and the fixed node is free: no provisioning
    assert (jobs["c"].start_time, jobs["c"].placement[0].node) == (500.0, "fixed-0")
    (p,) = result.pools
    assert p.units_provisioned == 1 and p.node_hours == pytest.approx(220 / H)
    m = compute_metrics(result)
    assert m.pools is not None
    # paid: the fixed node over the window (0..600) and the unit (0..220)
    assert m.pools.paid_gpu_hours == pytest.approx((8 * 600 + 8 * 220) / H)
    assert m.pools.used_gpu_hours == pytest.approx(3 * 8 * 100 / H)


def test_a_job_the_busy_fixed_nodes_will_hold_waits_for_them_if_told_to() -> None:
    result = run(
        "- {name: a, submit_time: 0, duration: 100, resources: {gpus: 8}}\n"
        "- {name: b, submit_time: 0, duration: 100, resources: {gpus: 8}}\n",
        cluster=FIXED_AND_POOL,
        config="autoscaling: {policies: [{name: queue-demand, args: {wait_for_busy: true}}]}\n",
    )
    jobs = jobs_of(result)
    assert (jobs["b"].start_time, jobs["b"].placement[0].node) == (100.0, "fixed-0")
    assert result.pools[0].units_provisioned == 0 and result.pools[0].node_hours == 0.0


def test_a_job_the_pool_cannot_afford_waits_with_the_autoscalers_reason() -> None:
    result = run(
        "- {name: a, submit_time: 0, duration: 10, resources: {gpus: 1}}\n",
        config="autoscaling: {max_cost_per_hour: 1}\n",
    )
    a = jobs_of(result)["a"]
    assert a.state is Outcome.UNFINISHED
    assert "pool p" in (a.reason or "") and "max_cost_per_hour" in (a.reason or "")
    assert result.pools[0].units_provisioned == 0


TPU_POOL = (
    "pools:\n"
    "  - name: v5p\n"
    "    tpu: {generation: v5p, shape: [2, 2, 4], chips_per_host: [2, 2, 1]}\n"
    "    max: 2\n"
    "    provisioning_time: 120\n"
    "    cost_per_hour: 4\n"
)


def test_a_tpu_slice_job_gets_a_whole_slice() -> None:
    result = run(
        "- {name: t, submit_time: 0, duration: 100, resources: {tpu: 'v5p:2x2x4'}}\n",
        cluster=TPU_POOL,
        config="autoscaling: {scale_down_idle: 0}\n",
    )
    t = jobs_of(result)["t"]
    assert (t.start_time, len(t.placement)) == (120.0, 4)
    assert all(p.node.startswith("v5p-0-h") for p in t.placement)
    (p,) = result.pools
    assert p.node_hours == pytest.approx(4 * 220 / H)  # 4 hosts, paid 0..220
    assert p.gpu_hours_paid == 0.0  # TPU chips are not GPUs


def test_pools_json_gives_each_pools_bill() -> None:
    result = run("- {name: a, submit_time: 0, duration: 3600, resources: {gpus: 8}}\n")
    (entry,) = pools_json(result)
    assert entry["name"] == "p" and entry["units_provisioned"] == 1
    assert entry["gpu_utilization"] == pytest.approx(3600 / 4260)
    keys = set(compute_metrics(result).to_json())
    assert {"paid_gpu_hours", "used_gpu_hours", "pool_cost", "pool_node_hours"} <= keys
    assert {"provisioning_wait_jobs", "provisioning_wait_total", "provisioning_wait_avg"} <= keys
    assert "by_pool" not in keys and "pools" not in keys


def test_the_report_plots_paid_gpus_and_lists_the_pools(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from corral.sim.report import write_report

    runs = []
    for name, idle in (("quick", "5m"), ("slow", "30m")):
        result = run(TWO_APART, config=f"autoscaling: {{scale_down_idle: {idle}}}\n")
        assert [s.paid_gpus for s in result.samples][-1] == 0.0  # all scaled down
        runs.append((name, result, compute_metrics(result)))
    write_report(tmp_path / "r.html", runs)
    html = (tmp_path / "r.html").read_text()
    assert html.count("data:image/png;base64,") == 3
    assert "<h2>Pools</h2>" in html and "<td>quick</td><td>p</td>" in html
    assert "Provisioning wait total" in html


def test_corral_sim_compares_scale_down_settings(tmp_path: Path) -> None:
    (tmp_path / "cluster.yaml").write_text(pool())
    (tmp_path / "jobs.yaml").write_text(TWO_APART)
    (tmp_path / "quick.yaml").write_text("autoscaling: {scale_down_idle: 5m}\n")
    (tmp_path / "slow.yaml").write_text("autoscaling: {scale_down_idle: 30m}\n")
    base = ("--cluster", "cluster.yaml", "--jobs", "jobs.yaml")
    one = corral(*base, "--config", "quick.yaml", "-o", "json", cwd=tmp_path)
    assert one.returncode == 0, one.stderr
    data = json.loads(one.stdout)
    assert set(data) == {"jobs", "metrics", "notes", "pools"}
    assert data["pools"][0]["name"] == "p"
    assert data["pools"][0]["node_hours"] == pytest.approx(920 / H)
    for key in ("avg_jct", "gpu_utilization", "paid_gpu_hours", "pool_cost"):
        assert key in data["metrics"]
    assert all("provisioning_wait" in job for job in data["jobs"])
    both = corral(*base, "--config", "quick.yaml", "--compare", "slow.yaml", cwd=tmp_path)
    assert both.returncode == 0, both.stderr
    for row in ("Cost", "Node-hours", "Provisioning wait total", "quick", "slow", "Pools: slow"):
        assert row in both.stdout
    compared = corral(
        *base, "--compare", "quick.yaml", "--compare", "slow.yaml", "-o", "json", cwd=tmp_path
    )
    costs = [c["pools"][0]["cost"] for c in json.loads(compared.stdout)["configs"]]
    assert costs[0] < costs[1]


def test_a_cluster_without_pools_prints_as_before(tmp_path: Path) -> None:
    (tmp_path / "cluster.yaml").write_text("nodes:\n  - {name: n0, gpus: {count: 8}}\n")
    (tmp_path / "jobs.yaml").write_text(TWO_APART)
    out = corral("--cluster", "cluster.yaml", "--jobs", "jobs.yaml", "-o", "json", cwd=tmp_path)
    data = json.loads(out.stdout)
    assert set(data) == {"jobs", "metrics", "notes"}
    assert "pool_cost" not in data["metrics"] and "pools" not in data["metrics"]
    assert all("provisioning_wait" not in job for job in data["jobs"])
