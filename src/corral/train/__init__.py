"""corral.train: make any training loop preemption-safe (see docs/training.md).

from corral import train

info = train.init_distributed()          # env of SPEC section 4 (or torchrun's);
                                         # JAX: train.init_jax_distributed()
train.install_signal_handlers()          # SIGTERM/SIGINT set a flag
resumed = train.load_latest()            # (step, state) or None
for step in range(start, steps):
    ...
    if train.should_stop():              # one collective: every rank agrees
        train.save(state, step)
        train.shutdown()
        sys.exit(0)                      # Corral requeues the job
"""

from corral.errors import TrainError
from corral.train.checkpoint import load_latest, notify_checkpoint, save
from corral.train.env import (
    DistEnv,
    TrainInfo,
    current,
    init_distributed,
    init_jax_distributed,
    parse_env,
    shutdown,
)
from corral.train.preemption import (
    install_signal_handlers,
    request_stop,
    should_stop,
    stop_requested,
    uninstall_signal_handlers,
)
from corral.train.state import ResumableSampler, capture_rng, restore_rng

__all__ = [
    "DistEnv",
    "ResumableSampler",
    "TrainError",
    "TrainInfo",
    "capture_rng",
    "current",
    "init_distributed",
    "init_jax_distributed",
    "install_signal_handlers",
    "load_latest",
    "notify_checkpoint",
    "parse_env",
    "request_stop",
    "restore_rng",
    "save",
    "should_stop",
    "shutdown",
    "stop_requested",
    "uninstall_signal_handlers",
]
