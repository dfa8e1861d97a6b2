"""``IdHoles``: an event stream passes a missing id only after waiting for it."""

from __future__ import annotations

from corral.server.services.events import IdHoles


def test_contiguous_ids_are_all_safe() -> None:
    assert IdHoles(2.0).safe(10, [11, 12, 13], now=0.0) == 13
    assert IdHoles(2.0).safe(10, [], now=0.0) == 10


def test_a_hole_holds_what_follows_until_filled() -> None:
    holes = IdHoles(2.0)
    assert holes.safe(10, [11, 13, 14], now=0.0) == 11  # 12 is being written
    assert holes.safe(11, [13, 14], now=1.9) == 11
    assert holes.safe(11, [12, 13, 14], now=1.95) == 14  # it committed


def test_a_hole_that_stays_is_passed_after_the_wait() -> None:
    holes = IdHoles(2.0)
    assert holes.safe(10, [13], now=0.0) == 10  # 11 and 12: one hole
    assert holes.safe(10, [13, 15], now=1.0) == 10
    assert holes.safe(10, [13, 15], now=2.0) == 13  # 11-12 rolled back; 14 seen at 1.0
    assert holes.safe(13, [15], now=2.5) == 13
    assert holes.safe(13, [15], now=3.0) == 15


def test_a_partly_filled_hole_waits_again_for_the_rest() -> None:
    holes = IdHoles(2.0)
    assert holes.safe(10, [14], now=0.0) == 10
    assert holes.safe(10, [11, 14], now=1.5) == 11  # 12-13 first seen as a hole now
    assert holes.safe(11, [14], now=3.0) == 11
    assert holes.safe(11, [14], now=3.5) == 14
