"""The simulator learns the corral policy's request mix from the jobs it has seen."""

from __future__ import annotations

import pytest

from corral.scheduling.plugins.fgd import RequestClass
from corral.schemas.cluster import load_cluster
from corral.schemas.config import load_config
from corral.sim.engine import Simulator
from corral.sim.jobs_file import load_jobs

# one T4 and one G2: T4 GPUs are scarce for the T4-only jobs seen first
CLUSTER = """
nodes:
  - {name: a-t4, gpus: {count: 1, model: T4}}
  - {name: b-g2, gpus: {count: 1, model: G2}}
"""
T4_JOB = "- {name: t4-%d, submit_time: %d, duration: 1, resources: {gpus: 1, gpu_model: T4}}\n"
JOBS = "".join(T4_JOB % (i, i) for i in range(5))
JOBS += "- {name: any, submit_time: 100, duration: 1, resources: {gpus: 1}}\n"
GIVEN = """
plugins:
  - name: corral
    args: {mix: [{gpus: 1, share: 1}], supply: {T4: 1, G2: 1}}
"""


def simulate(config: str | None) -> tuple[Simulator, dict[str, str]]:
    sim = Simulator(load_cluster(CLUSTER).to_nodes(), load_jobs(JOBS), load_config(config))
    result = sim.run()
    return sim, {j.name: j.placement[0].node for j in result.jobs}


@pytest.mark.parametrize(
    ("config", "node"),
    [
        # learned: 5 of the 6 jobs seen wanted a T4, so the any-model job keeps off it
        pytest.param(None, "b-g2", id="default-learns"),
        pytest.param("policy: {sharing: packing}", "a-t4", id="packing"),  # name order
        pytest.param(GIVEN, "a-t4", id="configured-mix-wins"),
    ],
)
def test_the_any_model_job_goes_where_the_mix_says(config: str | None, node: str) -> None:
    _, placed = simulate(config)
    assert placed["any"] == node
    assert {placed[f"t4-{i}"] for i in range(5)} == {"a-t4"}


def test_the_profile_has_the_mix_of_the_jobs_seen() -> None:
    sim, _ = simulate(None)
    score = sim.profile.scores[0]  # type: ignore[union-attr]
    assert score.name == "corral"
    assert score.mix == (  # type: ignore[attr-defined]
        RequestClass(1000, 1, 0.0, "T4", 5 / 6),
        RequestClass(1000, 1, 0.0, None, 1 / 6),
    )
    assert score.fragmentation.supply == {"G2": 1, "T4": 1}  # type: ignore[attr-defined]
