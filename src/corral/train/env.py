"""Distributed initialisation from the task environment (SPEC section 4, torchrun's names).

Corral and torchrun both give each task ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``MASTER_ADDR`` and ``MASTER_PORT``; :func:`init_distributed` turns them into a PyTorch
process group (XLA through PJRT on a TPU slice, else NCCL when CUDA is available, else gloo)
and :func:`init_jax_distributed` into JAX's distributed runtime.

Rules:

- No ``RANK`` and no ``WORLD_SIZE`` at all: a plain single-process run (rank 0 of 1), handy
  for debugging outside Corral.
- ``WORLD_SIZE=1``: no process group is created (collectives would be no-ops);
  ``TrainInfo.backend`` is ``None``. Only ``RANK`` and ``WORLD_SIZE`` are needed then.
- Otherwise every one of ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``,
  ``MASTER_PORT`` must be set; :class:`TrainError` names the missing ones.

A task is on a TPU slice when Corral gave it ``TPU_WORKER_ID`` or ``TPU_ACCELERATOR_TYPE``,
or ``PJRT_DEVICE=TPU`` is set: then the process group is torch_xla's "xla" backend with the
``xla://`` init method (PJRT finds the slice's hosts itself) and the device is the XLA device.

The initialised state is per process (a process has one process group), so it lives in this
module; a second call returns the same :class:`TrainInfo`.
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from types import ModuleType
from typing import Any

from corral.errors import TrainError

log = logging.getLogger("corral.train")

REQUIRED = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
TPU_MARKERS = ("TPU_WORKER_ID", "TPU_ACCELERATOR_TYPE")
XLA_INSTALL = "torch_xla[tpu]"


@dataclass(frozen=True)
class DistEnv:
    """What the environment says about this task (parsed, validated, no side effects)."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    master_addr: str | None
    master_port: int | None

    @property
    def coordinator_address(self) -> str:
        return f"{self.master_addr}:{self.master_port}"


@dataclass(frozen=True)
class TrainInfo:
    """The result of :func:`init_distributed`."""

    rank: int
    world_size: int
    local_rank: int
    backend: str | None  # "nccl", "gloo", "xla", "jax", or None for a single process
    device: str  # "cuda:N", "xla:N" or "cpu"

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def _int(env: Mapping[str, str], name: str, minimum: int) -> int:
    raw = env[name]
    try:
        value = int(raw)
    except ValueError:
        raise TrainError(f"{name}={raw!r} is not an integer") from None
    if value < minimum:
        raise TrainError(f"{name}={value} must be at least {minimum}")
    return value


def parse_env(env: Mapping[str, str] | None = None) -> DistEnv:
    """Read and validate the distributed environment; raise TrainError naming what is missing."""
    env = os.environ if env is None else env
    present = {name for name in REQUIRED if env.get(name, "") != ""}
    if not present & {"RANK", "WORLD_SIZE"}:
        return DistEnv(0, 1, 0, 1, None, None)
    for name in ("RANK", "WORLD_SIZE"):
        if name not in present:
            raise TrainError(f"incomplete distributed environment: {name} is not set")
    world_size = _int(env, "WORLD_SIZE", 1)
    rank = _int(env, "RANK", 0)
    if rank >= world_size:
        raise TrainError(f"RANK={rank} is not below WORLD_SIZE={world_size}")
    if world_size > 1:
        missing = [name for name in REQUIRED if name not in present]
        if missing:
            raise TrainError(
                f"incomplete distributed environment: {', '.join(missing)} "
                f"{'is' if len(missing) == 1 else 'are'} not set (WORLD_SIZE={world_size})"
            )
    local_rank = _int(env, "LOCAL_RANK", 0) if "LOCAL_RANK" in present else 0
    local_world = (
        _int(env, "LOCAL_WORLD_SIZE", 1) if env.get("LOCAL_WORLD_SIZE", "") != "" else world_size
    )
    port = _int(env, "MASTER_PORT", 1) if "MASTER_PORT" in present else None
    if port is not None and port > 65535:
        raise TrainError(f"MASTER_PORT={port} is not a TCP port")
    return DistEnv(rank, world_size, local_rank, local_world, env.get("MASTER_ADDR") or None, port)


_info: TrainInfo | None = None
_jax: Any = None  # the jax module init_jax_distributed used


def current() -> TrainInfo | None:
    """The TrainInfo of this process, or None before init_distributed / init_jax_distributed."""
    return _info


def _import(name: str, install: str) -> ModuleType:
    top = name.split(".")[0]
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        missing = getattr(exc, "name", None)
        if isinstance(exc, ModuleNotFoundError) and missing and missing.split(".")[0] != top:
            raise TrainError(f"cannot import {name}: {exc}") from None  # a dependency of it
        raise TrainError(f"{top} is not installed (pip install '{install}')") from None


def on_tpu(env: Mapping[str, str] | None = None) -> bool:
    """Whether this task runs on a TPU slice (Corral's TPU variables, or PJRT_DEVICE=TPU)."""
    env = os.environ if env is None else env
    return any(env.get(name, "") != "" for name in TPU_MARKERS) or (
        env.get("PJRT_DEVICE", "").upper() == "TPU"
    )


def cuda_index(torch: Any, local_rank: int, local_world_size: int) -> int:
    """The CUDA device of this task.

    Corral sets CUDA_VISIBLE_DEVICES per task, so a task usually sees only its own GPUs
    (device 0); torchrun shows every task all the node's GPUs (device LOCAL_RANK).
    """
    count = torch.cuda.device_count()
    return local_rank if count >= local_world_size and local_rank < count else 0


def init_distributed(
    backend: str | None = None,
    *,
    env: Mapping[str, str] | None = None,
    timeout: timedelta | None = None,
) -> TrainInfo:
    """Initialise torch.distributed from the environment; idempotent.

    ``backend`` defaults to "xla" on a TPU slice (see :func:`on_tpu`), else "nccl" when CUDA
    is available, else "gloo". Sets the CUDA device from LOCAL_RANK. With WORLD_SIZE=1 no
    process group is created.
    """
    global _info
    if _info is not None:
        return _info
    spec = parse_env(env)
    if backend == "xla" or (backend is None and on_tpu(env)):
        _info = _init_xla(spec, timeout)
        return _info
    try:
        torch = importlib.import_module("torch")
    except ImportError:
        if spec.world_size > 1:
            raise TrainError("torch is not installed (pip install 'corral[torch]')") from None
        _info = TrainInfo(spec.rank, 1, spec.local_rank, None, "cpu")
        return _info
    dist = torch.distributed
    cuda = torch.cuda.is_available()
    device = "cpu"
    if cuda and backend in (None, "nccl"):
        index = cuda_index(torch, spec.local_rank, spec.local_world_size)
        torch.cuda.set_device(index)
        device = f"cuda:{index}"
    if dist.is_available() and dist.is_initialized():
        # The caller (or a launcher) already made a process group: describe it.
        _info = TrainInfo(
            dist.get_rank(), dist.get_world_size(), spec.local_rank, dist.get_backend(), device
        )
        return _info
    if spec.world_size == 1:
        _info = TrainInfo(0, 1, spec.local_rank, None, device)
        return _info
    chosen = backend or ("nccl" if cuda else "gloo")
    if chosen == "nccl" and not cuda:
        raise TrainError("backend nccl needs CUDA, which is not available here")
    dist.init_process_group(
        chosen,
        init_method=f"tcp://{spec.coordinator_address}",
        rank=spec.rank,
        world_size=spec.world_size,
        **_timeout(timeout),
    )
    log.info("rank %d/%d joined the %s process group", spec.rank, spec.world_size, chosen)
    _info = TrainInfo(spec.rank, spec.world_size, spec.local_rank, chosen, device)
    return _info


def _timeout(timeout: timedelta | None) -> dict[str, Any]:
    return {} if timeout is None else {"timeout": timeout}


def _init_xla(spec: DistEnv, timeout: timedelta | None) -> TrainInfo:
    """The "xla" process group through PJRT (torch_xla), ranks as the runtime numbers them."""
    _import("torch_xla", XLA_INSTALL)
    _import("torch_xla.distributed.xla_backend", XLA_INSTALL)  # registers the "xla" backend
    xm = _import("torch_xla.core.xla_model", XLA_INSTALL)
    os.environ.setdefault("PJRT_DEVICE", "TPU")  # read when the runtime starts, not on import
    dist = importlib.import_module("torch.distributed")
    device = str(xm.xla_device())
    if dist.is_initialized():
        return TrainInfo(
            dist.get_rank(), dist.get_world_size(), spec.local_rank, dist.get_backend(), device
        )
    if spec.world_size == 1:
        return TrainInfo(0, 1, spec.local_rank, None, device)
    dist.init_process_group("xla", init_method="xla://", **_timeout(timeout))
    rank, world_size = dist.get_rank(), dist.get_world_size()
    if (rank, world_size) != (spec.rank, spec.world_size):
        log.warning(
            "PJRT numbers this process %d/%d, the environment says %d/%d: using PJRT's",
            rank,
            world_size,
            spec.rank,
            spec.world_size,
        )
    log.info("rank %d/%d joined the xla process group on %s", rank, world_size, device)
    return TrainInfo(rank, world_size, spec.local_rank, "xla", device)


def init_jax_distributed(
    *, env: Mapping[str, str] | None = None, jax_module: Any = None
) -> TrainInfo:
    """Initialise JAX's distributed runtime from the same variables; idempotent.

    Calls ``jax.distributed.initialize(coordinator_address=MASTER_ADDR:MASTER_PORT,
    num_processes=WORLD_SIZE, process_id=RANK)``. With WORLD_SIZE=1 nothing is initialised.
    ``jax_module`` replaces ``import jax`` (tests).
    """
    global _info, _jax
    if _info is not None:
        return _info
    spec = parse_env(env)
    jax = _jax = jax_module if jax_module is not None else _import("jax", "jax")
    if spec.world_size > 1:
        jax.distributed.initialize(
            coordinator_address=spec.coordinator_address,
            num_processes=spec.world_size,
            process_id=spec.rank,
        )
    _info = TrainInfo(spec.rank, spec.world_size, spec.local_rank, "jax", "cpu")
    return _info


def shutdown() -> None:
    """Leave the process group (if this process has one) and forget the TrainInfo.

    Every rank calls it (it starts with a barrier), like any collective.
    """
    global _info, _jax
    info, jax, _info, _jax = _info, _jax, None, None
    if info is None or info.backend is None:
        return
    if info.backend == "jax":
        if info.world_size > 1 and jax is not None:
            jax.distributed.shutdown()
        return
    torch = importlib.import_module("torch")
    dist = torch.distributed
    if dist.is_initialized():
        # Leave together: a rank tearing down while another still talks to it aborts gloo.
        dist.barrier()
        dist.destroy_process_group()


def jax_module() -> Any:
    """The jax module :func:`init_jax_distributed` used, or None."""
    return _jax


def distributed_ready() -> Any:
    """torch.distributed when a process group of more than one rank exists, else None."""
    try:
        torch = importlib.import_module("torch")
    except ImportError:
        return None
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return dist
    return None
