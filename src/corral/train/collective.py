"""The few collectives corral.train needs, over torch.distributed or JAX's runtime.

``should_stop`` needs "did any rank get a signal" and ``save`` needs a barrier and the
gathering of every part's sha256. :func:`current` returns the :class:`Collective` of the
process group this process is in (more than one rank), or None for a single process:

- torch.distributed (gloo, NCCL, XLA): ``all_reduce`` MAX, ``barrier``, ``all_gather`` of
  each digest's 32 bytes (not ``all_gather_object``: that one needs NumPy, which torch does
  not depend on; corral.train needs no NumPy);
- JAX (after :func:`corral.train.init_jax_distributed` with more than one process):
  ``jax.experimental.multihost_utils.process_allgather`` and ``sync_global_devices``, which
  run on every process's devices (gloo between CPU processes).

Every rank must call each of them at the same point, like any collective.
"""

from __future__ import annotations

import importlib
from typing import Any, Protocol

from corral.train import env as _env


class Collective(Protocol):
    rank: int
    world_size: int

    def any(self, flag: bool) -> bool:
        """Whether ``flag`` is true on any rank."""

    def barrier(self, name: str) -> None:
        """Wait until every rank got here (``name`` labels the barrier)."""

    def gather_digests(self, digest: str) -> list[str]:
        """Every rank's hex sha256, by rank."""


class TorchCollective:
    def __init__(self, dist: Any) -> None:
        self.dist = dist
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()

    def _device(self) -> str:
        """Where the backend wants the tensors of a collective."""
        backend = self.dist.get_backend()
        info = _env.current()
        if backend == "nccl":
            return info.device if info is not None and info.device.startswith("cuda") else "cuda"
        if backend == "xla" and info is not None:
            return info.device
        return "cpu"

    def any(self, flag: bool) -> bool:
        torch = importlib.import_module("torch")
        value = torch.tensor([1 if flag else 0], dtype=torch.int32, device=self._device())
        self.dist.all_reduce(value, op=self.dist.ReduceOp.MAX)
        return bool(value.item())

    def barrier(self, name: str) -> None:
        self.dist.barrier()

    def gather_digests(self, digest: str) -> list[str]:
        torch = importlib.import_module("torch")
        raw = list(bytes.fromhex(digest))  # a sha256: 32 bytes on every rank
        mine = torch.tensor(raw, dtype=torch.uint8, device=self._device())
        parts = [torch.empty_like(mine) for _ in range(self.world_size)]
        self.dist.all_gather(parts, mine)
        return [bytes(part.cpu().tolist()).hex() for part in parts]


class JaxCollective:
    def __init__(self, jax: Any, rank: int, world_size: int) -> None:
        self.utils = importlib.import_module("jax.experimental.multihost_utils")
        self.np = importlib.import_module("numpy")
        self.rank = rank
        self.world_size = world_size

    def any(self, flag: bool) -> bool:
        gathered = self.utils.process_allgather(self.np.array([1 if flag else 0], "int32"))
        return bool(self.np.asarray(gathered).max())

    def barrier(self, name: str) -> None:
        self.utils.sync_global_devices(f"corral.train:{name}")

    def gather_digests(self, digest: str) -> list[str]:
        mine = self.np.frombuffer(bytes.fromhex(digest), dtype="uint8")
        gathered = self.np.asarray(self.utils.process_allgather(mine))
        return [bytes(row.tolist()).hex() for row in gathered.reshape(self.world_size, -1)]


def current() -> Collective | None:
    """The collectives of this process's group of more than one rank, else None."""
    info = _env.current()
    if info is not None and info.backend == "jax":
        jax = _env.jax_module()
        if info.world_size > 1 and jax is not None:
            return JaxCollective(jax, info.rank, info.world_size)
        return None
    dist = _env.distributed_ready()
    return TorchCollective(dist) if dist is not None else None
