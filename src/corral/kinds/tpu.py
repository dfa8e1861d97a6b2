"""``kind: tpu``: a TPU slice (SPEC section 2's ``resources.tpu``), one task per host.

The slice's variables (``TPU_WORKER_ID``, ``TPU_WORKER_HOSTNAMES``, ``TPU_TOPOLOGY``,
``TPU_ACCELERATOR_TYPE``) are set by the control plane for every job holding a slice,
whatever its kind; this kind only insists on the slice. A manifest with ``resources.tpu``
and no ``kind`` is of this kind.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from corral.core.job import JobSpec
from corral.kinds.base import Launch, TaskContext, no_options


class TpuKind:
    name = "tpu"
    summary = "a TPU slice of a given shape, one task per host"

    def options(self, block: Mapping[str, Any]) -> dict[str, Any]:
        return no_options(self.name, block)

    def expand(self, spec: JobSpec) -> JobSpec:
        if spec.tpu is None:
            raise ValueError(
                "kind tpu needs resources.tpu: the slice's generation and shape "
                "(for example v5p:2x2x4)"
            )
        return spec

    def launch(self, task: TaskContext) -> Launch:
        return Launch(task.role.command)
