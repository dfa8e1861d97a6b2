"""The scheduler configuration file (SPEC section 6) and what it turns into."""

from __future__ import annotations

import textwrap

import pytest

from corral.core.idle import IdleAction, IdlePolicy
from corral.core.job import PlacementPolicy
from corral.errors import ValidationError
from corral.scheduling.config import (
    DEFAULT_PRIORITY_CLASSES,
    PluginRef,
    Policy,
    PriorityClass,
    QueueConfig,
    SchedulerConfig,
)
from corral.schemas.config import load_config

SPEC_EXAMPLE = textwrap.dedent(
    """\
    queues:
      - name: team-a
        weight: 1
        quota: {gpus: 16, H100: 8}
        cohort: research
        borrowing_limit: {gpus: 8}
      - name: team-b
        weight: 2.5
        placement: spread
    priority_classes:
      low: {value: 0, preemptible: true}
      normal: {value: 100, preemptible: true}
      high: {value: 1000, preemptible: false}
    policy:
      placement: binpack
      backfill: true
      preemption: true
      fair_share_half_life: 7d
      interval: 10s
    """
)


def test_contract_example() -> None:
    config = load_config(SPEC_EXAMPLE)
    assert config.queues == (
        QueueConfig(
            "team-a",
            weight=1.0,
            quota=(("H100", 8.0), ("gpus", 16.0)),
            cohort="research",
            borrowing_limit=(("gpus", 8.0),),
        ),
        QueueConfig("team-b", weight=2.5, placement=PlacementPolicy.SPREAD),
    )
    assert config.priority_classes == (
        PriorityClass("low", 0, True),
        PriorityClass("normal", 100, True),
        PriorityClass("high", 1000, False),
    )
    assert config.policy == Policy(
        placement=PlacementPolicy.BINPACK,
        backfill=True,
        preemption=True,
        fair_share_half_life=7 * 86400.0,
        interval=10.0,
    )
    assert config.plugins == ()


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(None, id="none"),
        pytest.param("", id="empty"),
        pytest.param("  \n", id="blank"),
        pytest.param("# nothing here\n", id="comment-only"),
        pytest.param("{}", id="empty-mapping"),
    ],
)
def test_no_configuration_means_one_unlimited_default_queue(text: str | None) -> None:
    config = load_config(text)
    assert config == SchedulerConfig()
    assert config.queues == (QueueConfig("default"),)
    assert config.queue("default").quota == ()
    assert config.priority_classes == DEFAULT_PRIORITY_CLASSES


@pytest.mark.parametrize(
    ("text", "policy"),
    [
        pytest.param("policy: {interval: 2m}", Policy(interval=120.0), id="interval-minutes"),
        pytest.param("policy: {interval: 0.5}", Policy(interval=0.5), id="interval-number"),
        pytest.param(
            "policy: {fair_share_half_life: 12h}",
            Policy(fair_share_half_life=43200.0),
            id="half-life-hours",
        ),
        pytest.param(
            "policy: {placement: spread}", Policy(placement=PlacementPolicy.SPREAD), id="spread"
        ),
        pytest.param("policy: {}", Policy(), id="defaults"),
    ],
)
def test_policy_durations_and_placement(text: str, policy: Policy) -> None:
    assert load_config(text).policy == policy


def test_queues_replace_the_default_queue() -> None:
    config = load_config("queues: [{name: a}, {name: b}]")
    assert [q.name for q in config.queues] == ["a", "b"]
    with pytest.raises(ValidationError, match="unknown queue 'default'"):
        config.queue("default")


def test_custom_priority_classes_replace_the_defaults() -> None:
    config = load_config("priority_classes: {batch: {value: 5}}")
    assert config.priority_classes == (PriorityClass("batch", 5, True),)


def test_plugins_with_weight_and_args() -> None:
    config = load_config(
        "plugins:\n  - {name: my.mod:Score, weight: 2.5, args: {bias: 3}}\n  - {name: other}\n"
    )
    assert config.plugins == (
        PluginRef("my.mod:Score", 2.5, (("bias", 3),)),
        PluginRef("other", 1.0, ()),
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            "queues: [{name: a}, {name: b}, {name: a}]",
            "queues: duplicate queue names ['a']",
            id="duplicate-queue",
        ),
        pytest.param("queuez: []", "queuez: unknown field", id="unknown-top-level-key"),
        pytest.param(
            "queues: [{name: a, quota: {gpus: -1}}]",
            "quota.gpus: must be at least 0, got -1",
            id="negative-quota",
        ),
        pytest.param(
            "queues: [{name: a, quota: {gpus: 8}, borrowing_limit: {gpus: 4}}]",
            "borrowing_limit: needs a cohort to borrow from",
            id="borrowing-without-cohort",
        ),
        pytest.param(
            "queues: [{name: a, quota: {'': 8}}]",
            "quota: empty key",
            id="empty-quota-key",
        ),
        pytest.param(
            "policy: {order: lottery}",
            "policy.order",
            id="unknown-order",
        ),
        pytest.param(
            "policy: {backfil: true}", "policy.backfil: unknown field", id="unknown-policy-key"
        ),
        pytest.param(
            "queues: [{name: a, quotas: {gpus: 1}}]",
            "queues.0.quotas: unknown field",
            id="unknown-queue-key",
        ),
        pytest.param(
            "priority_classes: {low: {value: 0, preemptable: true}}",
            "priority_classes.low.preemptable: unknown field",
            id="unknown-priority-class-key",
        ),
        pytest.param("queues: [{name: ''}]", "queues.0.name", id="empty-queue-name"),
        pytest.param("queues: [{name: a, weight: 0}]", "queues.0.weight", id="zero-weight"),
        pytest.param(
            "queues: [{name: a, quota: {gpus: many}}]", "queues.0.quota.gpus", id="bad-quota"
        ),
        pytest.param(
            "policy: {interval: soon}", "policy.interval: expected a duration", id="bad-interval"
        ),
        pytest.param(
            "policy: {interval: 0}", "policy.interval: must be positive", id="zero-interval"
        ),
        pytest.param(
            "policy: {fair_share_half_life: -1d}",
            "policy.fair_share_half_life",
            id="negative-half-life",
        ),
        pytest.param("policy: {placement: tetris}", "policy.placement", id="bad-placement"),
        pytest.param(
            "priority_classes: {low: {value: high}}",
            "priority_classes.low.value",
            id="non-integer-class-value",
        ),
        pytest.param("- a\n- b\n", "expected a mapping", id="a-list"),
        pytest.param("queues: [\n", "not valid YAML", id="broken-yaml"),
    ],
)
def test_bad_configuration_names_the_field(text: str, message: str) -> None:
    with pytest.raises(ValidationError) as info:
        load_config(text, source="scheduler.yaml")
    assert info.value.message.startswith("scheduler.yaml: ")
    assert message in info.value.message


def test_policy_order_selects_the_queue_sort() -> None:
    from corral.scheduling.registry import build_profile
    from corral.schemas.config import load_config

    config = load_config("policy: {order: shortest-first}\n")
    assert config.policy.order == "shortest-first"
    assert build_profile(config).queue_sort.name == "shortest-first"
    with pytest.raises(ValidationError, match="policy.order"):
        load_config("policy: {order: random}\n")


def test_idle_policy_per_queue_with_the_cluster_default() -> None:
    config = load_config(
        textwrap.dedent(
            """
            queues:
              - name: team-a
                idle: {threshold: 3, after: 10m, action: preempt}
              - name: team-b
            policy:
              idle: {after: 2h}
            """
        )
    )
    assert config.idle_policy("team-a") == IdlePolicy(3.0, 600.0, IdleAction.PREEMPT)
    assert config.idle_policy("team-b") == IdlePolicy(5.0, 7200.0, IdleAction.FLAG)
    assert load_config(None).idle_policy("default") == IdlePolicy(5.0, 1800.0, IdleAction.FLAG)


@pytest.mark.parametrize(
    ("idle", "message"),
    [
        ("{action: kill}", "queues.0.idle.action"),
        ("{threshold: 120}", "queues.0.idle.threshold"),
        ("{after: 0s}", "after: must be positive"),
        ("{afterr: 1h}", "queues.0.idle.afterr: unknown field"),
    ],
)
def test_bad_idle_policy_names_the_field(idle: str, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        load_config(f"queues: [{{name: a, idle: {idle}}}]")
