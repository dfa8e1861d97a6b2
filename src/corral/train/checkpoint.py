"""Atomic, sharded checkpoints that are never half-visible.

Layout, in ``CORRAL_CHECKPOINT_DIR`` (or ``directory``)::

    step-00000120/
        rank-00000.pt      each rank's own part (the state it passed to save)
        rank-00001.pt
        COMPLETE           manifest (JSON): step, world size, format, sha256 of every part

Every file is written to a temporary file in the same directory, flushed and fsynced, moved
into place with ``os.replace`` and followed by an fsync of the directory. Rank 0 writes
``COMPLETE`` only after a barrier (every rank's part is in place), so a checkpoint exists
for :func:`load_latest` only once all its parts do, whatever instant a SIGKILL hits. Rank 0
then prunes all but the newest ``keep`` complete checkpoints and leftovers of interrupted
saves older than the new one.

Ranks must share the checkpoint directory (a shared filesystem on multi-node jobs; rank 0
reads every part to hash it when no process group exists). Parts are written with
``torch.save`` when torch is installed (read back with ``weights_only=False``: these are the
job's own files, and the state holds optimizer and RNG objects) and ``pickle`` otherwise;
the manifest records which. Loading maps tensors to the CPU; ``load_state_dict`` moves
them to the parameters' devices.

After each save, rank 0 tells the control plane (best effort, see :func:`notify_checkpoint`).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import io
import json
import logging
import os
import pickle
import re
import shutil
import ssl
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx

from corral.errors import TrainError
from corral.train import collective
from corral.train import env as _env

log = logging.getLogger("corral.train")

MANIFEST = "COMPLETE"
STEP_DIR = re.compile(r"^step-(\d{8,})$")
NOTIFY_TIMEOUT = 2.0


def step_dir(directory: Path, step: int) -> Path:
    return directory / f"step-{step:08d}"


def part_name(rank: int) -> str:
    return f"rank-{rank:05d}.pt"


def checkpoint_dir(directory: str | os.PathLike[str] | None) -> Path:
    if directory is not None:
        return Path(directory)
    value = os.environ.get("CORRAL_CHECKPOINT_DIR")
    if not value:
        raise TrainError("no checkpoint directory: pass directory= or set CORRAL_CHECKPOINT_DIR")
    return Path(value)


def _torch() -> Any:
    try:
        return importlib.import_module("torch")
    except ImportError:
        return None


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _write_atomic(path: Path, write: Any) -> None:
    """Write through ``write(fileobj)`` to a temporary file, then fsync, rename, fsync dir."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with tmp.open("wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    _fsync_dir(path.parent)


def _serialize(state: Any, f: io.BufferedWriter, fmt: str) -> None:
    if fmt == "torch":
        _torch().save(state, f)
    else:
        pickle.dump(state, f, protocol=pickle.HIGHEST_PROTOCOL)


def _deserialize(path: Path, fmt: str) -> Any:
    if fmt == "torch":
        torch = _torch()
        if torch is None:
            raise TrainError(f"{path} was saved with torch, which is not installed")
        with path.open("rb") as f:
            return torch.load(f, map_location="cpu", weights_only=False)
    with path.open("rb") as f:
        return pickle.load(f)


def _ranks(
    rank: int | None, world_size: int | None
) -> tuple[int, int, collective.Collective | None]:
    """(rank, world size, the group's collectives or None) for this save or load."""
    dist = collective.current()
    if dist is not None:
        actual = dist.rank, dist.world_size
        if (rank, world_size) not in ((None, None), actual):
            raise TrainError(f"rank/world_size {rank}/{world_size} disagree with {actual}")
        return actual[0], actual[1], dist
    if rank is None or world_size is None:
        info = _env.current()
        spec = info if info is not None else _env.parse_env()
        rank = spec.rank if rank is None else rank
        world_size = spec.world_size if world_size is None else world_size
    if not 0 <= rank < world_size:
        raise TrainError(f"rank {rank} is not within world size {world_size}")
    return rank, world_size, None


def save(
    state: Any,
    step: int,
    *,
    directory: str | os.PathLike[str] | None = None,
    keep: int = 3,
    rank: int | None = None,
    world_size: int | None = None,
) -> Path:
    """Save this rank's ``state`` as part of checkpoint ``step``; return the step directory.

    Every rank calls it at the same step (it has barriers when a process group exists).
    Without a process group, ``rank``/``world_size`` may simulate ranks in one process: the
    parts of ranks 1.. must then be saved before rank 0's, which completes the checkpoint.
    ``keep`` (>= 1) complete checkpoints are kept.
    """
    if step < 0:
        raise TrainError(f"step must be >= 0, not {step}")
    if keep < 1:
        raise TrainError(f"keep must be at least 1, not {keep}")
    root = checkpoint_dir(directory)
    rank, world_size, dist = _ranks(rank, world_size)
    fmt = "torch" if _torch() is not None else "pickle"
    target = step_dir(root, step)
    if (target / MANIFEST).exists():
        log.info("checkpoint %s is already complete: not saving it again", target)
        return target
    if rank == 0:
        root.mkdir(parents=True, exist_ok=True)
        target.mkdir(exist_ok=True)
        _fsync_dir(root)
    if dist is not None:
        dist.barrier(f"save {step}: directory")
    else:
        target.mkdir(parents=True, exist_ok=True)
    part = target / part_name(rank)
    _write_atomic(part, lambda f: _serialize(state, f, fmt))
    digest = _sha256(part)
    if dist is not None:
        digests = dist.gather_digests(digest)
    elif rank == 0:
        digests = []
        for other in range(world_size):
            path = target / part_name(other)
            if not path.exists():
                raise TrainError(f"cannot complete {target}: {path.name} is missing")
            digests.append(digest if other == 0 else _sha256(path))
    if rank == 0:
        manifest = {
            "step": step,
            "world_size": world_size,
            "format": fmt,
            "files": {part_name(r): d for r, d in enumerate(digests)},
        }
        data = json.dumps(manifest, indent=1, sort_keys=True).encode()
        _write_atomic(target / MANIFEST, lambda f: f.write(data))
        log.info("checkpoint %d complete in %s", step, target)
        _prune(root, step, keep)
        notify_checkpoint(step, str(target))
    if dist is not None:
        dist.barrier(f"save {step}: complete")
    return target


def _steps(root: Path) -> list[tuple[int, Path]]:
    if not root.is_dir():
        return []
    found = []
    for child in root.iterdir():
        match = STEP_DIR.match(child.name)
        if match and child.is_dir():
            found.append((int(match.group(1)), child))
    return sorted(found, reverse=True)


def _prune(root: Path, newest: int, keep: int) -> None:
    complete = 0
    for step, path in _steps(root):
        if step > newest:
            continue  # a later save (not ours to judge)
        if (path / MANIFEST).exists() and complete < keep:
            complete += 1
            continue
        if step == newest:
            continue
        # Remove the manifest first, so a half-deleted checkpoint is never "complete".
        with contextlib.suppress(FileNotFoundError):
            (path / MANIFEST).unlink()
        shutil.rmtree(path, ignore_errors=True)
        log.info("pruned %s", path)


def _verify(path: Path, world_size: int) -> tuple[dict[str, Any] | None, str]:
    """(manifest, "") when the checkpoint at ``path`` is complete and intact, else (None, why)."""
    try:
        manifest = json.loads((path / MANIFEST).read_text())
    except FileNotFoundError:
        return None, "no COMPLETE marker (a save that did not finish)"
    except (OSError, ValueError) as exc:
        return None, f"unreadable COMPLETE marker: {exc}"
    files = manifest.get("files")
    if not isinstance(files, dict) or manifest.get("world_size") != len(files):
        return None, "malformed COMPLETE marker"
    if manifest["world_size"] != world_size:
        return None, f"saved by {manifest['world_size']} ranks, this run has {world_size}"
    for name, expected in sorted(files.items()):
        part = path / name
        if not part.exists():
            return None, f"{name} is missing"
        actual = _sha256(part)
        if actual != expected:
            return None, f"{name} is corrupt (sha256 {actual[:12]}, expected {expected[:12]})"
    return manifest, ""


def load_latest(
    directory: str | os.PathLike[str] | None = None,
    *,
    rank: int | None = None,
    world_size: int | None = None,
) -> tuple[int, Any] | None:
    """(step, this rank's state) of the newest complete, intact checkpoint, or None.

    Partial and corrupt checkpoints are skipped with a warning saying why. Every part is
    verified against the manifest's sha256, so all ranks (sharing the directory) choose the
    same checkpoint.
    """
    root = checkpoint_dir(directory)
    rank, world_size, _ = _ranks(rank, world_size)
    for step, path in _steps(root):
        manifest, why = _verify(path, world_size)
        if manifest is None:
            log.warning("skipping checkpoint %s: %s", path, why)
            continue
        try:
            state = _deserialize(path / part_name(rank), manifest.get("format", "pickle"))
        except Exception as exc:  # noqa: BLE001 - any unreadable part means: skip it
            log.warning("skipping checkpoint %s: %s cannot be read: %s", path, part_name(rank), exc)
            continue
        log.info("resuming from checkpoint %d (%s)", step, path)
        return step, state
    return None


def notify_checkpoint(
    step: int,
    path: str,
    *,
    env: Mapping[str, str] | None = None,
    transport: httpx.BaseTransport | None = None,
) -> bool:
    """Tell the control plane about a complete checkpoint; never raises.

    Needs ``CORRAL_SERVER`` (first address of a comma-separated list), ``CORRAL_JOB_ID``
    and a token: ``CORRAL_JOB_TOKEN``, else ``CORRAL_TOKEN``. Without them it does nothing.
    An HTTPS server is verified with ``CORRAL_CA_CERT`` when set (else the system CAs).
    Returns whether the server accepted it.
    """
    env = os.environ if env is None else env
    server = env.get("CORRAL_SERVER", "").split(",")[0].strip().rstrip("/")
    job_id = env.get("CORRAL_JOB_ID", "")
    token = env.get("CORRAL_JOB_TOKEN") or env.get("CORRAL_TOKEN")
    if not (server and job_id and token):
        return False
    url = f"{server}/api/v1/jobs/{job_id}/checkpoint"
    try:
        ca = env.get("CORRAL_CA_CERT")
        verify = ssl.create_default_context(cafile=ca) if ca else True
        with httpx.Client(transport=transport, timeout=NOTIFY_TIMEOUT, verify=verify) as http:
            response = http.post(
                url,
                json={"step": step, "path": path},
                headers={"Authorization": f"Bearer {token}"},
            )
        response.raise_for_status()
    except Exception as exc:  # noqa: BLE001 - best effort: training goes on
        log.warning("could not report checkpoint %d to %s: %s", step, url, exc)
        return False
    return True
