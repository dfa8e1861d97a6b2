"""Exact resume: RNG states and the position in the data order.

A resumed run continues bit for bit when it restores, besides the model, optimizer and
LR-scheduler state dicts, the random generators (:func:`capture_rng` / :func:`restore_rng`)
and where it was in the data (:class:`ResumableSampler`). Both produce plain values that go
into the state passed to ``checkpoint.save``; RNG states differ per rank, so each rank saves
its own.
"""

from __future__ import annotations

import importlib
import random
from collections.abc import Iterator
from typing import Any


def _optional(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def capture_rng() -> dict[str, Any]:
    """The states of Python's ``random``, NumPy's global generator, torch CPU and CUDA."""
    states: dict[str, Any] = {"python": random.getstate()}
    numpy = _optional("numpy")
    if numpy is not None:
        states["numpy"] = numpy.random.get_state()
    torch = _optional("torch")
    if torch is not None:
        states["torch"] = torch.get_rng_state()
        if torch.cuda.is_available():
            states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def restore_rng(states: dict[str, Any]) -> None:
    """Put back what :func:`capture_rng` returned (generators missing here are skipped)."""
    random.setstate(states["python"])
    numpy = _optional("numpy")
    if numpy is not None and "numpy" in states:
        numpy.random.set_state(states["numpy"])
    torch = _optional("torch")
    if torch is not None and "torch" in states:
        torch.set_rng_state(states["torch"])
        if "cuda" in states and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(states["cuda"])


class ResumableSampler:
    """A deterministic, rank-sharded data order that remembers (epoch, position).

    Epoch ``e`` is a permutation of ``range(num_samples)`` seeded by ``(seed, e)`` (or the
    identity without ``shuffle``), cut to a multiple of ``world_size`` and dealt round-robin:
    rank ``r`` gets items ``r, r + world_size, ...``. ``position`` counts this rank's indices
    already handed out in the epoch. :meth:`take` crosses epoch boundaries.

    ``position`` counts what was handed out, not what was trained on: with a prefetching
    DataLoader, record the position of the batch the step used instead.
    """

    def __init__(
        self,
        num_samples: int,
        *,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        shuffle: bool = True,
    ) -> None:
        if num_samples < world_size:
            raise ValueError(f"{num_samples} samples cannot feed {world_size} ranks")
        self.num_samples = num_samples
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        self.shuffle = shuffle
        self.epoch = 0
        self.position = 0

    def __len__(self) -> int:
        return self.num_samples // self.world_size

    def indices(self, epoch: int) -> list[int]:
        """This rank's indices for ``epoch``, in order."""
        order = list(range(self.num_samples))
        if self.shuffle:
            random.Random(f"{self.seed}:{epoch}").shuffle(order)
        order = order[: len(self) * self.world_size]
        return order[self.rank :: self.world_size]

    def __iter__(self) -> Iterator[int]:
        """The rest of the current epoch; afterwards the sampler is at the next epoch."""
        epoch = self.epoch
        remaining = self.indices(epoch)[self.position :]
        for index in remaining:
            self.position += 1
            yield index
        if self.epoch == epoch:
            self.epoch, self.position = epoch + 1, 0

    def take(self, count: int) -> list[int]:
        """The next ``count`` indices, moving into later epochs as needed."""
        out: list[int] = []
        while len(out) < count:
            order = self.indices(self.epoch)
            chunk = order[self.position : self.position + count - len(out)]
            out.extend(chunk)
            self.position += len(chunk)
            if self.position >= len(order):
                self.epoch, self.position = self.epoch + 1, 0
        return out

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "position": self.position, "seed": self.seed}

    def load_state_dict(self, state: dict[str, int]) -> None:
        if state.get("seed", self.seed) != self.seed:
            raise ValueError(f"sampler state has seed {state['seed']}, this one {self.seed}")
        self.epoch = int(state["epoch"])
        self.position = int(state["position"])
