"""A small, deterministic PyTorch DDP training job made preemption-safe with corral.train.

Runs unchanged on CPU (gloo) and GPUs (NCCL), under Corral, torchrun, or alone::

    python examples/pytorch_ddp.py --steps 200 --checkpoint-dir /tmp/ckpt
    torchrun --nproc-per-node 2 examples/pytorch_ddp.py --checkpoint-dir /tmp/ckpt

On SIGTERM or SIGINT (to any rank) every rank stops at the same step, saves a checkpoint,
leaves the process group and exits 0; the next run resumes from the newest complete
checkpoint and ends with the same parameters, bit for bit, as an uninterrupted run. At the
end rank 0 prints ``final-params-sha256: <hex>``.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import logging
import os
import random
import signal
import sys
import time

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from corral import train

SAMPLES = 4096
FEATURES = 32
HIDDEN = 128


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20000, help="training steps in all")
    parser.add_argument("--batch-size", type=int, default=32, help="samples per rank and step")
    parser.add_argument("--checkpoint-every", type=int, default=500, help="steps between saves")
    parser.add_argument("--keep", type=int, default=3, help="complete checkpoints kept")
    parser.add_argument(
        "--checkpoint-dir",
        default=os.environ.get("CORRAL_CHECKPOINT_DIR", "checkpoints"),
        help="default: $CORRAL_CHECKPOINT_DIR, else ./checkpoints",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--preempt-at",
        type=int,
        default=None,
        help="testing: on a fresh run, send SIGTERM to this process before this step",
    )
    parser.add_argument(
        "--preempt-rank", type=int, default=None, help="testing: only this rank signals itself"
    )
    parser.add_argument(
        "--hold-at",
        type=int,
        default=None,
        help="testing: on a fresh run, wait at this step (asking should_stop) until preempted",
    )
    parser.add_argument(
        "--ignore-sigterm-rank",
        type=int,
        default=None,
        help="testing: this rank never sees SIGTERM (only its peers get the signal)",
    )
    parser.add_argument(
        "--stall-save-rank",
        type=int,
        default=None,
        help="testing: on a fresh run, this rank's save on stopping hangs, its temporary "
        "file open, until the process is killed",
    )
    return parser.parse_args(argv)


class StalledSave:
    """Pickling it never returns: a save cut off (by SIGKILL) in the middle, on demand."""

    def __init__(self, step: int) -> None:
        self.step = step

    def __reduce__(self) -> tuple:
        print(f"save of step {self.step} stalled", flush=True)
        while True:
            time.sleep(1)


def synthetic_data() -> tuple[torch.Tensor, torch.Tensor]:
    """A fixed regression problem: y = tanh(x W) v + noise, the same on every rank."""
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(SAMPLES, FEATURES, generator=g)
    w = torch.randn(FEATURES, 8, generator=g)
    v = torch.randn(8, 1, generator=g)
    y = torch.tanh(x @ w) @ v + 0.05 * torch.randn(SAMPLES, 1, generator=g)
    return x, y


def params_sha256(model: nn.Module) -> str:
    digest = hashlib.sha256()
    for tensor in model.state_dict().values():
        flat = tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8)
        digest.update(bytes(flat.tolist()))
    return digest.hexdigest()


def main(argv: list[str] | None = None) -> int:
    try:
        return run(parse_args(argv))
    finally:
        # Free the DDP wrapper (it holds the process group in reference cycles) while the
        # interpreter is alive: gloo objects destroyed during interpreter shutdown can abort.
        gc.collect()


def run(args: argparse.Namespace) -> int:
    info = train.init_distributed()
    logging.basicConfig(
        level=logging.INFO, format=f"rank {info.rank}: %(levelname)s %(name)s: %(message)s"
    )
    train.install_signal_handlers()
    if args.ignore_sigterm_rank == info.rank:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    device = torch.device(info.device)
    torch.use_deterministic_algorithms(True)

    torch.manual_seed(args.seed)  # the same initial model on every rank
    model = nn.Sequential(
        nn.Linear(FEATURES, HIDDEN), nn.ReLU(), nn.Dropout(0.1), nn.Linear(HIDDEN, 1)
    ).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=100, gamma=0.9)
    sampler = train.ResumableSampler(
        SAMPLES, seed=args.seed, rank=info.rank, world_size=info.world_size
    )
    x, y = (t.to(device) for t in synthetic_data())
    # Dropout differs per rank; its generator state is saved with each rank's part.
    torch.manual_seed(args.seed * 1000 + info.rank + 1)
    random.seed(args.seed * 1000 + info.rank + 1)

    start = 0
    resumed = train.load_latest(args.checkpoint_dir)
    if resumed is not None:
        start, state = resumed
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        sampler.load_state_dict(state["sampler"])
        train.restore_rng(state["rng"])
        print(f"rank {info.rank} resumed at step {start}", flush=True)
    net = model
    if info.world_size > 1:
        device_ids = [device.index] if device.type == "cuda" else None
        net = DistributedDataParallel(model, device_ids=device_ids)

    def state() -> dict:
        return {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "sampler": sampler.state_dict(),
            "rng": train.capture_rng(),
        }

    fresh = resumed is None
    for step in range(start, args.steps):
        if step == args.preempt_at and fresh and args.preempt_rank in (None, info.rank):
            os.kill(os.getpid(), signal.SIGTERM)
        if step == args.hold_at and fresh:
            print(f"rank {info.rank} holding at step {step}", flush=True)
            while not train.should_stop():  # every rank asks, in step: a collective each time
                time.sleep(0.05)
        if train.should_stop():
            print(f"rank {info.rank} stopping at step {step}", flush=True)
            final = state()
            if fresh and args.stall_save_rank == info.rank:
                final["stalled"] = StalledSave(step)
            train.save(final, step, directory=args.checkpoint_dir, keep=args.keep)
            train.shutdown()
            return 0
        index = torch.tensor(sampler.take(args.batch_size), device=device)
        loss = nn.functional.mse_loss(net(x[index]), y[index])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        scheduler.step()
        done = step + 1
        if info.rank == 0:
            print(f"step {done} loss {loss.item():.6f}", flush=True)
        if done % args.checkpoint_every == 0 and done < args.steps:
            train.save(state(), done, directory=args.checkpoint_dir, keep=args.keep)

    if info.rank == 0:
        print(f"final-params-sha256: {params_sha256(model)}", flush=True)
    train.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
