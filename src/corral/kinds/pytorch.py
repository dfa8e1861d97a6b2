"""``kind: pytorch`` (the default): every task gets torchrun's environment.

A program written for ``torchrun`` (``torch.distributed.init_process_group("nccl")``
reading ``env://``, TorchElastic's ``ROLE_*``/``GROUP_*`` variables) runs unchanged, one
Corral task per torchrun worker: no torchrun process is needed in between.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from corral.core.job import JobSpec
from corral.kinds.base import Launch, TaskContext, no_options


class PyTorchKind:
    name = "pytorch"
    summary = "torchrun's environment in every task (the default kind)"

    def options(self, block: Mapping[str, Any]) -> dict[str, Any]:
        return no_options(self.name, block)

    def expand(self, spec: JobSpec) -> JobSpec:
        return spec

    def launch(self, task: TaskContext) -> Launch:
        return Launch(task.role.command, torchrun_env(task))


def torchrun_env(task: TaskContext) -> dict[str, str]:
    """What ``torchrun`` sets for a worker beside section 4's variables (which already
    hold ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``GROUP_RANK``,
    ``MASTER_ADDR``, ``MASTER_PORT``)."""
    role = task.role
    env = {
        "ROLE_NAME": role.name,
        "ROLE_RANK": str(role.rank),
        "ROLE_WORLD_SIZE": str(role.world_size),
        "GROUP_WORLD_SIZE": str(task.spec.node_count),
        "TORCHELASTIC_RUN_ID": f"corral-{task.job_id}",
        "TORCHELASTIC_RESTART_COUNT": str(task.attempt),
        "TORCHELASTIC_MAX_RESTARTS": "0",
        "TORCHELASTIC_USE_AGENT_STORE": "False",
    }
    if role.tasks_per_node > 1 and "OMP_NUM_THREADS" not in task.env:
        env["OMP_NUM_THREADS"] = "1"  # as torchrun does with several workers per node
    return env
