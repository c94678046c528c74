"""kbroker.coord.group_config: Kafka's GroupConfig validation and evaluation, sans-IO.

The messages are Kafka 4.3.1's (the same requests against the reference broker:
tests/differential/test_group_configs_vs_kafka.py); here the edges that need no broker: the broker's
bounds moving, clamping at use, `by_duration` parsing, the order of the checks.
"""

from __future__ import annotations

import pytest

from kbroker.config import KafkaConfig
from kbroker.coord.group_config import (
    GROUP_CONFIG_DEFS,
    GroupConfig,
    parse_auto_offset_reset,
    validate_group_configs,
)
from kbroker.protocol.errors import ErrorCode, KafkaError


def broker(**overrides: str) -> KafkaConfig:
    return KafkaConfig({k.replace("_", "."): v for k, v in overrides.items()})


def lookup(config: KafkaConfig) -> object:
    return lambda key: config[key] if key in config else None


def refused(overrides: dict[str, str], config: KafkaConfig | None = None) -> str:
    with pytest.raises(KafkaError) as e:
        validate_group_configs(overrides, lookup(config or broker()))  # type: ignore[arg-type]
    assert e.value.error_code == ErrorCode.INVALID_CONFIG
    return str(e.value)


def test_seventeen_keys_each_with_a_default_that_validates() -> None:
    assert len(GROUP_CONFIG_DEFS) == 17
    validate_group_configs({d.name: d.default for d in GROUP_CONFIG_DEFS}, lookup(broker()))  # type: ignore[arg-type]


def test_bounds_come_from_the_broker_config() -> None:
    assert refused({"share.session.timeout.ms": "20000"}) == \
        "share.session.timeout.ms must be greater than or equal to group.share.min.session.timeout.ms"
    lowered = broker(**{"group.share.min.session.timeout.ms": "10000"})
    validate_group_configs({"share.session.timeout.ms": "20000"}, lookup(lowered))  # type: ignore[arg-type]


def test_ranges_are_checked_before_session_over_heartbeat() -> None:
    wide = broker(**{"group.share.min.session.timeout.ms": "1000", "group.share.min.heartbeat.interval.ms": "1000"})
    assert refused({"share.session.timeout.ms": "5000", "share.heartbeat.interval.ms": "5000"}, wide) == \
        "share.session.timeout.ms must be greater than share.heartbeat.interval.ms"
    assert refused({"share.heartbeat.interval.ms": "20000", "share.session.timeout.ms": "1000"}, wide) == \
        "share.heartbeat.interval.ms must be less than or equal to group.share.max.heartbeat.interval.ms"


def test_assignment_intervals_are_bounded_only_when_set() -> None:
    tight = broker(**{"group.consumer.min.assignment.interval.ms": "2000"})
    validate_group_configs({}, lookup(tight))  # type: ignore[arg-type]  (the default 1000 is below: not checked)
    assert refused({"consumer.assignment.interval.ms": "1500"}, tight) == \
        "consumer.assignment.interval.ms must be greater than or equal to group.consumer.min.assignment.interval.ms"


@pytest.mark.parametrize(("value", "expected"), [
    ("latest", ("latest", 0)), ("earliest", ("earliest", 0)), ("by_duration:PT1H", ("by_duration", 3_600_000)),
    ("by_duration:pt1h", ("by_duration", 3_600_000)),
    ("by_duration:P1DT30M", ("by_duration", 88_200_000)), ("by_duration:PT0.5S", ("by_duration", 500)),
])
def test_auto_offset_reset_strategies(value: str, expected: tuple[str, int]) -> None:
    assert parse_auto_offset_reset(value) == expected


# Each checked against Kafka 4.3.1's validator (GroupConfig.CONFIG_DEF's share.auto.offset.reset).
@pytest.mark.parametrize("value", ["bogus", "EARLIEST", "By_Duration:PT1H", "by_duration:", "by_duration:PT",
                                   "by_duration:-PT1H", "by_duration:1H"])
def test_bad_auto_offset_reset(value: str) -> None:
    with pytest.raises(ValueError, match="The value must be either 'earliest', 'latest' or of the format"):
        parse_auto_offset_reset(value)


def test_evaluate_clamps_overrides_into_the_brokers_current_bounds() -> None:
    overrides = {"share.record.lock.duration.ms": "20000", "share.delivery.count.limit": "9",
                 "share.auto.offset.reset": "earliest"}
    gc = GroupConfig.evaluate(overrides, lookup(broker()))  # type: ignore[arg-type]
    assert (gc.share_record_lock_duration_ms, gc.share_delivery_count_limit, gc.share_auto_offset_reset) == \
        (20000, 9, "earliest")
    narrowed = broker(**{"group.share.min.record.lock.duration.ms": "25000", "group.share.max.delivery.count.limit": "6"})
    gc = GroupConfig.evaluate(overrides, lookup(narrowed))  # type: ignore[arg-type]
    assert (gc.share_record_lock_duration_ms, gc.share_delivery_count_limit) == (25000, 6)


def test_evaluate_without_overrides_is_the_brokers_keys() -> None:
    config = broker(**{"group.share.record.lock.duration.ms": "17000", "group.share.heartbeat.interval.ms": "7000"})
    gc = GroupConfig.evaluate({}, lookup(config))  # type: ignore[arg-type]
    assert (gc.share_record_lock_duration_ms, gc.share_heartbeat_interval_ms, gc.share_session_timeout_ms) == \
        (17000, 7000, 45000)
