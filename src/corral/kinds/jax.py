"""``kind: jax``: ``jax.distributed.initialize()`` with no arguments joins every task.

JAX finds its peers by cluster detection. Each task gets ``JAX_COORDINATOR_ADDRESS``
(rank 0's node and the job's free port there); the variables of JAX's Slurm cluster
detection (``SLURM_JOB_ID``, ``SLURM_NTASKS``, ``SLURM_PROCID``, ``SLURM_LOCALID``,
``SLURM_STEP_NODELIST``: process count, process id and local id) are those every task
gets (``corral.server.services.launch.slurm_env``, SPEC 9). A task holding GPUs also
gets ``JAX_LOCAL_DEVICE_IDS`` (its devices as the process sees them, ``0..n-1``, since
``CUDA_VISIBLE_DEVICES`` already narrows them). On a TPU slice the slice's ``TPU_*``
variables are set as for every TPU job.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from corral.core.job import JobSpec
from corral.kinds.base import Launch, TaskContext, no_options


class JaxKind:
    name = "jax"
    summary = "jax.distributed.initialize() with no arguments joins every task"

    def options(self, block: Mapping[str, Any]) -> dict[str, Any]:
        return no_options(self.name, block)

    def expand(self, spec: JobSpec) -> JobSpec:
        return spec

    def launch(self, task: TaskContext) -> Launch:
        return Launch(task.role.command, jax_env(task))


def jax_env(task: TaskContext) -> dict[str, str]:
    """What JAX needs beyond the ``SLURM_*`` variables every task sees."""
    env = {"JAX_COORDINATOR_ADDRESS": f"{task.master_addr}:{task.master_port}"}
    if task.gpus:
        env["JAX_LOCAL_DEVICE_IDS"] = ",".join(str(i) for i in range(len(task.gpus)))
    return env
