"""The example files shipped in examples/ parse with the real parsers."""

from __future__ import annotations

from pathlib import Path

from corral.schemas.cluster import load_cluster
from corral.schemas.config import load_config
from corral.schemas.manifest import load_manifest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def test_example_job_manifest() -> None:
    spec = load_manifest((EXAMPLES / "job.yaml").read_text()).to_spec()
    assert (spec.nodes, spec.tasks_per_node, spec.gpus_per_task) == (2, 8, 1)
    assert spec.time_limit == 600


def test_example_cluster_file() -> None:
    nodes = load_cluster((EXAMPLES / "cluster.yaml").read_text()).to_nodes()
    assert [n.name for n in nodes] == ["h100-0", "h100-1", "a100-0", "a100-1"]
    assert [d.nvlink_domain for d in nodes[0].devices] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert nodes[0].memory == 10**12


def test_example_scheduler_config() -> None:
    config = load_config((EXAMPLES / "scheduler.yaml").read_text())
    assert [q.name for q in config.queues] == ["default", "team-a", "team-b"]
    assert config.policy.interval == 10


def test_example_sim_workload_runs_on_the_example_cluster() -> None:
    from corral.sim.engine import simulate
    from corral.sim.jobs_file import load_jobs

    workload = load_jobs((EXAMPLES / "jobs.yaml").read_text())
    nodes = load_cluster((EXAMPLES / "cluster.yaml").read_text()).to_nodes()
    result = simulate(nodes, workload)
    assert len(result.jobs) == 40 and {j.state.value for j in result.jobs} == {"completed"}


def test_example_policies_load() -> None:
    from corral.scheduling.registry import build_profile

    orders = {}
    for name in ("fifo", "sjf", "easy-backfill", "fgd", "fair-share", "corral"):
        config = load_config((EXAMPLES / f"{name}.yaml").read_text())
        build_profile(config)
        policy = config.policy
        orders[name] = (policy.order, policy.backfill, policy.preemption, policy.sharing)
    assert orders == {
        "fifo": ("priority-fifo", False, False, "packing"),
        "sjf": ("shortest-first", True, False, "corral"),
        "easy-backfill": ("priority-fifo", True, False, "corral"),
        "fgd": ("jct", True, True, "fgd"),
        "fair-share": ("fair-share", True, True, "corral"),
        "corral": ("jct", True, True, "corral"),
    }
    assert load_config((EXAMPLES / "corral.yaml").read_text()) == load_config("")


def test_example_job_kinds_parse() -> None:
    specs = {
        path.stem: load_manifest(path.read_text(), str(path)).to_spec()
        for path in sorted((EXAMPLES / "kinds").glob("*.yaml"))
    }
    assert set(specs) == {"ps-workers", "jax", "mpi", "ray"}
    assert [r.name for r in specs["ps-workers"].roles] == ["ps", "worker"]
    assert specs["ps-workers"].world_size == 17
    assert specs["jax"].kind == "jax"
    assert [(r.name, r.daemon) for r in specs["mpi"].roles] == [
        ("worker", True),
        ("launcher", False),
    ]
    assert specs["ray"].roles[0].name == "head"
