"""A small, deterministic data-parallel JAX training job made preemption-safe with corral.train.

The JAX counterpart of examples/pytorch_ddp.py. Runs under Corral, alone, or as processes
you start yourself with RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT::

    python examples/jax_train.py --steps 200 --checkpoint-dir /tmp/ckpt

Every process feeds its shard of the global batch into one jitted step over a mesh of all
processes' devices (the gradient mean is XLA's all-reduce). On SIGTERM or SIGINT (to any
process) every process stops at the same step, saves a checkpoint, leaves the runtime and
exits 0; the next run resumes from the newest complete checkpoint (parameters, momentum,
PRNG key, data position, host RNGs) and ends with the same parameters, bit for bit, as an
uninterrupted run. At the end rank 0 prints ``final-params-sha256: <hex>``.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import signal
import sys
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from corral import train

SAMPLES = 4096
FEATURES = 32
HIDDEN = 128
DROPOUT = 0.1


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20000, help="training steps in all")
    parser.add_argument("--batch-size", type=int, default=32, help="samples per process and step")
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
    return parser.parse_args(argv)


def synthetic_data() -> tuple[np.ndarray, np.ndarray]:
    """A fixed regression problem: y = tanh(x W) v + noise, the same on every process."""
    g = np.random.default_rng(1234)
    x = g.standard_normal((SAMPLES, FEATURES), dtype=np.float32)
    w = g.standard_normal((FEATURES, 8), dtype=np.float32)
    v = g.standard_normal((8, 1), dtype=np.float32)
    y = np.tanh(x @ w) @ v + np.float32(0.05) * g.standard_normal((SAMPLES, 1), dtype=np.float32)
    return x, y.astype(np.float32)


def init_params(seed: int) -> dict[str, np.ndarray]:
    """The same initial model on every process."""
    k1, k2 = jax.random.split(jax.random.PRNGKey(seed))
    bound1, bound2 = 1 / np.sqrt(FEATURES), 1 / np.sqrt(HIDDEN)
    return {
        "w1": np.asarray(jax.random.uniform(k1, (FEATURES, HIDDEN), minval=-bound1, maxval=bound1)),
        "b1": np.zeros(HIDDEN, np.float32),
        "w2": np.asarray(jax.random.uniform(k2, (HIDDEN, 1), minval=-bound2, maxval=bound2)),
        "b2": np.zeros(1, np.float32),
    }


def loss_fn(params: dict[str, Any], key: jax.Array, x: jax.Array, y: jax.Array) -> jax.Array:
    hidden = jax.nn.relu(x @ params["w1"] + params["b1"])
    keep = jax.random.bernoulli(key, 1 - DROPOUT, hidden.shape)
    hidden = jnp.where(keep, hidden / (1 - DROPOUT), 0)
    return jnp.mean((hidden @ params["w2"] + params["b2"] - y) ** 2)


def learning_rate(step: jax.Array) -> jax.Array:
    """0.02, times 0.9 every 100 steps (StepLR of the PyTorch example)."""
    return 0.02 * 0.9 ** (step // 100)


@jax.jit
def train_step(
    params: dict[str, Any],
    momentum: dict[str, Any],
    key: jax.Array,
    step: jax.Array,
    x: jax.Array,
    y: jax.Array,
) -> tuple[dict[str, Any], dict[str, Any], jax.Array]:
    """SGD with momentum 0.9 on the global batch (sharded over processes)."""
    loss, grads = jax.value_and_grad(loss_fn)(params, key, x, y)
    momentum = jax.tree.map(lambda m, g: 0.9 * m + g, momentum, grads)
    lr = learning_rate(step)
    params = jax.tree.map(lambda p, m: p - lr * m, params, momentum)
    return params, momentum, loss


def to_host(tree: dict[str, Any]) -> dict[str, np.ndarray]:
    """Replicated global arrays as this process's NumPy copies."""
    return {k: np.asarray(v.addressable_data(0)) for k, v in tree.items()}


def params_sha256(params: dict[str, np.ndarray]) -> str:
    digest = hashlib.sha256()
    for name in sorted(params):
        digest.update(np.ascontiguousarray(params[name]).tobytes())
    return digest.hexdigest()


def main(argv: list[str] | None = None) -> int:
    return run(parse_args(argv))


def run(args: argparse.Namespace) -> int:
    info = train.init_jax_distributed()
    logging.basicConfig(
        level=logging.INFO, format=f"rank {info.rank}: %(levelname)s %(name)s: %(message)s"
    )
    train.install_signal_handlers()

    mesh = Mesh(np.array(jax.devices()), ("data",))
    replicated = NamedSharding(mesh, PartitionSpec())
    batch_sharding = NamedSharding(mesh, PartitionSpec("data"))
    sampler = train.ResumableSampler(
        SAMPLES, seed=args.seed, rank=info.rank, world_size=info.world_size
    )
    x, y = synthetic_data()
    params = init_params(args.seed)
    momentum = {k: np.zeros_like(v) for k, v in params.items()}
    key = np.asarray(jax.random.PRNGKey(args.seed + 1))  # dropout: one key, split each step

    start = 0
    resumed = train.load_latest(args.checkpoint_dir)
    if resumed is not None:
        start, state = resumed
        params, momentum, key = state["params"], state["momentum"], state["key"]
        sampler.load_state_dict(state["sampler"])
        train.restore_rng(state["rng"])
        print(f"rank {info.rank} resumed at step {start}", flush=True)

    def replicate(tree: dict[str, np.ndarray]) -> dict[str, jax.Array]:
        return {k: jax.device_put(v, replicated) for k, v in tree.items()}

    def global_batch(local: np.ndarray) -> jax.Array:
        return jax.make_array_from_process_local_data(batch_sharding, local)

    params_g, momentum_g = replicate(params), replicate(momentum)

    def state() -> dict[str, Any]:
        return {
            "params": to_host(params_g),
            "momentum": to_host(momentum_g),
            "key": key,
            "sampler": sampler.state_dict(),
            "rng": train.capture_rng(),
        }

    for step in range(start, args.steps):
        if step == args.preempt_at and resumed is None and args.preempt_rank in (None, info.rank):
            os.kill(os.getpid(), signal.SIGTERM)
        if train.should_stop():
            print(f"rank {info.rank} stopping at step {step}", flush=True)
            train.save(state(), step, directory=args.checkpoint_dir, keep=args.keep)
            train.shutdown()
            return 0
        index = np.array(sampler.take(args.batch_size))
        key, dropout_key = (np.asarray(k) for k in jax.random.split(key))
        params_g, momentum_g, loss = train_step(
            params_g,
            momentum_g,
            jax.device_put(dropout_key, replicated),
            jax.device_put(np.int32(step), replicated),
            global_batch(x[index]),
            global_batch(y[index]),
        )
        done = step + 1
        if info.rank == 0:
            print(f"step {done} loss {float(loss.addressable_data(0)):.6f}", flush=True)
        if done % args.checkpoint_every == 0 and done < args.steps:
            train.save(state(), done, directory=args.checkpoint_dir, keep=args.keep)

    if info.rank == 0:
        print(f"final-params-sha256: {params_sha256(to_host(params_g))}", flush=True)
    train.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
