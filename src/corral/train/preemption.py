"""Preemption: SIGTERM and SIGINT set a flag; ``should_stop()`` agrees on it across ranks.

Corral (and torchrun) send SIGTERM to every task, then SIGKILL after CORRAL_GRACE_PERIOD
seconds. A loop that calls ``should_stop()`` once per step stops at the same step on every
rank, even when only some ranks got the signal: the ranks combine their flags with one
collective (an all_reduce MAX in torch.distributed, a ``process_allgather`` in JAX) when a
group of more than one rank exists. So every rank must call it at the same points of the
loop, like any other collective.

Chaining: a previous Python handler (someone else's) is still called on every signal. A
second SIGINT falls back to the previous SIGINT behaviour (KeyboardInterrupt by default), so
Ctrl-C twice still interrupts a stuck job; a second SIGTERM only logs.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

from corral.errors import TrainError
from corral.train import collective

log = logging.getLogger("corral.train")

SIGNALS = (signal.SIGTERM, signal.SIGINT)

Handler = Callable[[int, FrameType | None], Any] | int | None


class _Stop:
    """The per-process stop flag and the handlers it replaced (signals are per process)."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.received: dict[int, int] = {}
        self.previous: dict[int, Handler] = {}

    def handle(self, signum: int, frame: FrameType | None) -> None:
        count = self.received.get(signum, 0) + 1
        self.received[signum] = count
        self.event.set()
        name = signal.Signals(signum).name
        previous = self.previous.get(signum)
        if count == 1:
            log.warning("%s received: stopping at the next should_stop()", name)
        elif signum == signal.SIGINT and previous is signal.default_int_handler:
            previous(signum, frame)
        else:
            log.warning("%s received again (%d times)", name, count)
        if callable(previous) and previous is not signal.default_int_handler:
            previous(signum, frame)


_stop = _Stop()


def install_signal_handlers() -> None:
    """Make SIGTERM and SIGINT set the stop flag; idempotent; call from the main thread."""
    for signum in SIGNALS:
        if signal.getsignal(signum) == _stop.handle:
            continue
        try:
            _stop.previous[signum] = signal.signal(signum, _stop.handle)
        except ValueError as exc:  # not the main thread
            raise TrainError(
                f"signal handlers can only be installed in the main thread: {exc}"
            ) from None


def uninstall_signal_handlers() -> None:
    """Restore the handlers that install_signal_handlers replaced and clear the flag."""
    for signum, previous in list(_stop.previous.items()):
        if signal.getsignal(signum) == _stop.handle:
            signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
    _stop.previous.clear()
    _stop.received.clear()
    _stop.event.clear()


def request_stop() -> None:
    """Set the stop flag as a signal would (for code paths that decide to stop themselves)."""
    _stop.event.set()


def stop_requested() -> bool:
    """This process's own flag, without asking the other ranks."""
    return _stop.event.is_set()


def should_stop() -> bool:
    """True when any rank was asked to stop; one collective when a group of ranks exists."""
    local = _stop.event.is_set()
    group = collective.current()
    if group is None:
        return local
    agreed = group.any(local)
    if agreed and not local:
        log.warning("another rank was asked to stop: stopping too")
        _stop.event.set()
    return agreed
