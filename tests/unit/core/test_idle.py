"""The idle-GPU verdict, as a table of cases."""

from __future__ import annotations

import pytest

from corral.core.idle import IdleAction, IdlePolicy, IdleVerdict, judge_idle

FLAG = IdlePolicy(threshold=5, after=60, action=IdleAction.FLAG)
PREEMPT = IdlePolicy(threshold=5, after=60, action=IdleAction.PREEMPT)


@pytest.mark.parametrize(
    ("name", "utils", "since", "policy", "now", "verdict"),
    [
        ("busy GPU", [0.0, 40.0], None, FLAG, 100, IdleVerdict(None, False, False)),
        ("goes idle", [0.0, 5.0], None, FLAG, 100, IdleVerdict(100, False, False)),
        ("still idle", [1.0, 2.0], 100, FLAG, 159, IdleVerdict(100, False, False)),
        ("idle long enough", [1.0], 100, FLAG, 160, IdleVerdict(100, True, False)),
        ("policy acts", [1.0], 100, PREEMPT, 160, IdleVerdict(100, True, True)),
        ("busy again resets", [6.0], 100, PREEMPT, 500, IdleVerdict(None, False, False)),
        (
            "no reading is no evidence",
            [0.0, None],
            100,
            PREEMPT,
            500,
            IdleVerdict(None, False, False),
        ),
        ("no GPUs is never idle", [], 100, PREEMPT, 500, IdleVerdict(None, False, False)),
    ],
)
def test_judge_idle(
    name: str,
    utils: list[float | None],
    since: float | None,
    policy: IdlePolicy,
    now: float,
    verdict: IdleVerdict,
) -> None:
    assert judge_idle(utils, since, policy, now) == verdict, name
