"""Idle GPUs: when a running job counts as idle, and what its queue's policy then does.

Pure: the control plane feeds the latest utilization of each GPU a job holds and the
time, and applies the verdict.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum


class IdleAction(StrEnum):
    FLAG = "flag"  # mark the job idle (API, `corral jobs`, an event); nothing else
    PREEMPT = "preempt"  # preempt it as the scheduler would (grace period, requeue)
    STOP = "stop"  # cancel it (grace period, no requeue)


@dataclass(frozen=True)
class IdlePolicy:
    """A job whose every GPU stays at or below ``threshold`` percent utilization for
    ``after`` seconds is idle; ``action`` says what happens to it then."""

    threshold: float = 5.0
    after: float = 1800.0
    action: IdleAction = IdleAction.FLAG


@dataclass(frozen=True)
class IdleVerdict:
    idle_since: float | None  # since when the job has been continuously idle; None: busy
    flagged: bool  # idle for at least ``policy.after``
    act: bool  # flagged now and the policy's action is not just a flag


def judge_idle(
    utilizations: Sequence[float | None],
    idle_since: float | None,
    policy: IdlePolicy,
    now: float,
) -> IdleVerdict:
    """The verdict for a job holding GPUs whose latest readings are ``utilizations``.

    A GPU without a fresh reading (None) counts as busy: no reading is no evidence of idling,
    and a job without GPUs is never idle. ``idle_since`` is the previous verdict's.
    """
    low = bool(utilizations) and all(u is not None and u <= policy.threshold for u in utilizations)
    if not low:
        return IdleVerdict(None, False, False)
    since = now if idle_since is None else idle_since
    flagged = now - since >= policy.after
    return IdleVerdict(since, flagged, flagged and policy.action is not IdleAction.FLAG)
