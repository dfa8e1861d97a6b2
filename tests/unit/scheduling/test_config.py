"""SchedulerConfig lookups: queues, their placement, and priority resolution."""

from __future__ import annotations

import pytest

from corral.core.job import PlacementPolicy
from corral.errors import ValidationError
from corral.scheduling.config import Policy, PriorityClass, QueueConfig, SchedulerConfig

DEFAULT = SchedulerConfig()
TWO_QUEUES = SchedulerConfig(
    queues=(QueueConfig("team-a"), QueueConfig("team-b", placement=PlacementPolicy.SPREAD)),
    policy=Policy(placement=PlacementPolicy.BINPACK),
)
NO_NORMAL = SchedulerConfig(
    priority_classes=(PriorityClass("batch", 10, True), PriorityClass("prod", 500, False))
)
ALL_PREEMPTIBLE = SchedulerConfig(priority_classes=(PriorityClass("only", 7, True),))


@pytest.mark.parametrize(
    ("config", "priority", "preemptible", "expected"),
    [
        pytest.param(DEFAULT, None, None, (100, True), id="default-is-normal"),
        pytest.param(DEFAULT, "low", None, (0, True), id="low"),
        pytest.param(DEFAULT, "normal", None, (100, True), id="normal"),
        pytest.param(DEFAULT, "high", None, (1000, False), id="high-not-preemptible"),
        pytest.param(DEFAULT, "high", True, (1000, True), id="explicit-preemptible-wins"),
        pytest.param(DEFAULT, "low", False, (0, False), id="explicit-not-preemptible-wins"),
        pytest.param(DEFAULT, 999, None, (999, True), id="int-below-high"),
        pytest.param(DEFAULT, 1000, None, (1000, False), id="int-at-high"),
        pytest.param(DEFAULT, 5000, None, (5000, False), id="int-above-high"),
        pytest.param(DEFAULT, -10, None, (-10, True), id="negative-int"),
        pytest.param(DEFAULT, 5000, True, (5000, True), id="int-explicit-preemptible"),
        pytest.param(NO_NORMAL, None, None, (0, True), id="no-normal-class-means-zero"),
        pytest.param(NO_NORMAL, "prod", None, (500, False), id="custom-class"),
        pytest.param(NO_NORMAL, 499, None, (499, True), id="int-below-custom-fence"),
        pytest.param(ALL_PREEMPTIBLE, 10**6, None, (10**6, True), id="no-fence-all-preemptible"),
    ],
)
def test_resolve_priority(
    config: SchedulerConfig,
    priority: str | int | None,
    preemptible: bool | None,
    expected: tuple[int, bool],
) -> None:
    assert config.resolve_priority(priority, preemptible) == expected


def test_unknown_priority_class_lists_the_known_ones() -> None:
    with pytest.raises(ValidationError) as info:
        DEFAULT.resolve_priority("urgent")
    assert info.value.message == (
        "priority: unknown priority class 'urgent' (known: low, normal, high, or an integer)"
    )


@pytest.mark.parametrize(
    ("config", "name"),
    [
        pytest.param(DEFAULT, "default", id="default"),
        pytest.param(TWO_QUEUES, "team-b", id="named"),
    ],
)
def test_queue_lookup(config: SchedulerConfig, name: str) -> None:
    assert config.queue(name).name == name


@pytest.mark.parametrize(
    ("config", "name", "known"),
    [
        pytest.param(DEFAULT, "team-a", "default", id="default-config"),
        pytest.param(TWO_QUEUES, "default", "team-a, team-b", id="no-default-queue"),
        pytest.param(TWO_QUEUES, "TEAM-A", "team-a, team-b", id="case-sensitive"),
    ],
)
def test_unknown_queue_is_a_validation_error(
    config: SchedulerConfig, name: str, known: str
) -> None:
    with pytest.raises(ValidationError) as info:
        config.queue(name)
    assert info.value.message == f"queue: unknown queue {name!r} (known queues: {known})"


@pytest.mark.parametrize(
    ("name", "placement"),
    [
        pytest.param("team-a", PlacementPolicy.BINPACK, id="cluster-default"),
        pytest.param("team-b", PlacementPolicy.SPREAD, id="queue-override"),
        pytest.param("unknown", PlacementPolicy.BINPACK, id="unknown-falls-back"),
    ],
)
def test_queue_placement(name: str, placement: PlacementPolicy) -> None:
    assert TWO_QUEUES.queue_placement(name) is placement


def test_numeric_priority_strings_are_integers() -> None:
    from corral.scheduling.config import SchedulerConfig

    assert SchedulerConfig().resolve_priority("250") == (250, True)
    assert SchedulerConfig().resolve_priority("2000") == (2000, False)
