"""Group-level configs (the GROUP config resource, type 32): Kafka's `GroupConfig` and the evaluation
its `GroupConfigManager` does (KIP-848 / KIP-932 / KIP-1071 group configs).

A group's dynamic configs live in the metadata image as `ConfigRecord`s with resource type GROUP
(written by the controller, `kbroker.controller.configuration_control`). This module owns:

- the table of keys Kafka 4.3.1 accepts (`GROUP_CONFIG_DEFS`: name, type, default, range, the broker
  key it falls back to), in the order Kafka's DescribeConfigs lists them;
- `validate_group_configs`: Kafka's `GroupConfig.validate` on a group's whole new override set, with
  Kafka's messages (INVALID_CONFIG): unknown names, values that do not parse, ranges, and the bounds
  the broker's `group.consumer|share|streams.min/max.*` keys put on them;
- `GroupConfig.evaluate`: the values a group runs with — its overrides over the broker's keys, each
  clamped into the broker's current min/max range (Kafka's `GroupConfig.evaluate`, so a broker whose
  bounds narrowed after a group was configured still runs the group inside them).

Pure: no I/O, no asyncio. Must not import net/, api/ or the broker wiring (the broker config is
handed in as a `Mapping`-like lookup).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kbroker.protocol.errors import ErrorCode, KafkaError

__all__ = [
    "GROUP_CONFIG_DEFS",
    "GroupConfig",
    "GroupConfigDef",
    "parse_auto_offset_reset",
    "validate_group_configs",
]

BrokerValue = Callable[[str], object]

_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
_AUTO_OFFSET_RESET = "share.auto.offset.reset"
_BY_DURATION = "by_duration:"
# java.time.Duration.parse: PnDTnHnMn.nS, each part optional (at least one), signs allowed per part.
_DURATION = re.compile(r"([-+]?)P(?:([-+]?\d+)D)?(?:T(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?"
                       r"(?:([-+]?\d+)(?:[.,](\d{0,9}))?S)?)?", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class GroupConfigDef:
    """One group config key (Kafka's `GroupConfig.CONFIG_DEF` entry)."""

    name: str
    type: str  # "int", "string", "boolean"
    default: str
    doc: str
    at_least: int | None = None
    one_of: tuple[str, ...] = ()
    # The broker key whose value is the group's default (Kafka's `GroupConfig.ALL_GROUP_CONFIG_SYNONYMS`).
    broker_synonym: str | None = None
    # The broker keys bounding the value (`group.*.min.*`, `group.*.max.*`): (min key, max key).
    bounds: tuple[str | None, str | None] = (None, None)
    # Bounds checked only when the group sets the key (Kafka: the assignment intervals).
    bounds_only_when_set: bool = False


def _d(name: str, type_: str, default: str, doc: str, **kw: object) -> GroupConfigDef:
    return GroupConfigDef(name, type_, default, doc, **kw)  # type: ignore[arg-type]


# In the order Kafka 4.3.1's DescribeConfigs lists a group's configs (checked against the reference broker).
GROUP_CONFIG_DEFS: tuple[GroupConfigDef, ...] = (
    _d("consumer.session.timeout.ms", "int", "45000", "The timeout to detect client failures when using the "
       "consumer group protocol.", at_least=1, broker_synonym="group.consumer.session.timeout.ms",
       bounds=("group.consumer.min.session.timeout.ms", "group.consumer.max.session.timeout.ms")),
    _d("consumer.assignment.interval.ms", "int", "1000", "The interval between assignment updates for a consumer "
       "group.", at_least=0, broker_synonym="group.consumer.assignment.interval.ms",
       bounds=("group.consumer.min.assignment.interval.ms", "group.consumer.max.assignment.interval.ms"),
       bounds_only_when_set=True),
    _d(_AUTO_OFFSET_RESET, "string", "latest", "The strategy to initialize the share-partition start offset."),
    _d("share.renew.acknowledge.enable", "boolean", "true", "Whether the renew acknowledge type is enabled for "
       "the share group."),
    _d("streams.initial.rebalance.delay.ms", "int", "3000", "The amount of time the group coordinator will wait "
       "for more streams clients to join a new group before performing the first rebalance.", at_least=0,
       broker_synonym="group.streams.initial.rebalance.delay.ms"),
    _d("share.session.timeout.ms", "int", "45000", "The timeout to detect client failures when using the share "
       "group protocol.", at_least=1, broker_synonym="group.share.session.timeout.ms",
       bounds=("group.share.min.session.timeout.ms", "group.share.max.session.timeout.ms")),
    _d("streams.assignment.interval.ms", "int", "1000", "The interval between assignment updates for a streams "
       "group.", at_least=0, broker_synonym="group.streams.assignment.interval.ms",
       bounds=("group.streams.min.assignment.interval.ms", "group.streams.max.assignment.interval.ms"),
       bounds_only_when_set=True),
    _d("share.heartbeat.interval.ms", "int", "5000", "The heartbeat interval given to the members of a share "
       "group.", at_least=1, broker_synonym="group.share.heartbeat.interval.ms",
       bounds=("group.share.min.heartbeat.interval.ms", "group.share.max.heartbeat.interval.ms")),
    _d("streams.heartbeat.interval.ms", "int", "5000", "The heartbeat interval given to the members.",
       at_least=1, broker_synonym="group.streams.heartbeat.interval.ms",
       bounds=("group.streams.min.heartbeat.interval.ms", "group.streams.max.heartbeat.interval.ms")),
    _d("share.delivery.count.limit", "int", "5", "The maximum number of delivery attempts for a record delivered "
       "to a share group.", at_least=2, broker_synonym="group.share.delivery.count.limit",
       bounds=("group.share.min.delivery.count.limit", "group.share.max.delivery.count.limit")),
    _d("consumer.heartbeat.interval.ms", "int", "5000", "The heartbeat interval given to the members of a "
       "consumer group.", at_least=1, broker_synonym="group.consumer.heartbeat.interval.ms",
       bounds=("group.consumer.min.heartbeat.interval.ms", "group.consumer.max.heartbeat.interval.ms")),
    _d("share.record.lock.duration.ms", "int", "30000", "The record acquisition lock duration in milliseconds "
       "for share groups.", at_least=1000, broker_synonym="group.share.record.lock.duration.ms",
       bounds=("group.share.min.record.lock.duration.ms", "group.share.max.record.lock.duration.ms")),
    _d("share.assignment.interval.ms", "int", "1000", "The interval between assignment updates for a share "
       "group.", at_least=0, broker_synonym="group.share.assignment.interval.ms",
       bounds=("group.share.min.assignment.interval.ms", "group.share.max.assignment.interval.ms"),
       bounds_only_when_set=True),
    _d("share.isolation.level", "string", "read_uncommitted", "Controls how to read records written "
       "transactionally.", one_of=("read_committed", "read_uncommitted")),
    _d("streams.session.timeout.ms", "int", "45000", "The timeout to detect client failures when using the "
       "streams group protocol.", at_least=1, broker_synonym="group.streams.session.timeout.ms",
       bounds=("group.streams.min.session.timeout.ms", "group.streams.max.session.timeout.ms")),
    _d("share.partition.max.record.locks", "int", "2000", "Share-group record lock limit per share-partition.",
       at_least=100, broker_synonym="group.share.partition.max.record.locks",
       bounds=("group.share.min.partition.max.record.locks", "group.share.max.partition.max.record.locks")),
    _d("streams.num.standby.replicas", "int", "0", "The number of standby replicas for each task.", at_least=0,
       broker_synonym="group.streams.num.standby.replicas", bounds=(None, "group.streams.max.standby.replicas")),
)
GROUP_CONFIGS_BY_NAME: dict[str, GroupConfigDef] = {d.name: d for d in GROUP_CONFIG_DEFS}

# Kafka's validateValues order: the ranges first (in this order), then session > heartbeat per group type.
_RANGE_ORDER = ("consumer.heartbeat.interval.ms", "consumer.session.timeout.ms", "consumer.assignment.interval.ms",
                "share.heartbeat.interval.ms", "share.session.timeout.ms", "share.record.lock.duration.ms",
                "share.delivery.count.limit", "share.partition.max.record.locks", "share.assignment.interval.ms",
                "streams.heartbeat.interval.ms", "streams.session.timeout.ms", "streams.num.standby.replicas",
                "streams.assignment.interval.ms")
_SESSION_OVER_HEARTBEAT = (("consumer.session.timeout.ms", "consumer.heartbeat.interval.ms"),
                           ("share.session.timeout.ms", "share.heartbeat.interval.ms"),
                           ("streams.session.timeout.ms", "streams.heartbeat.interval.ms"))


def _invalid(message: str) -> KafkaError:
    return KafkaError(message, error_code=ErrorCode.INVALID_CONFIG)


def parse_auto_offset_reset(value: str) -> tuple[str, int]:
    """("latest" | "earliest" | "by_duration", duration ms) of a `share.auto.offset.reset` value
    (Kafka's `ShareGroupAutoOffsetResetStrategy`); ValueError when it is none of them."""
    text = value.strip()  # case-sensitive, as Kafka's validator ("EARLIEST" is refused)
    if text in ("latest", "earliest"):
        return text, 0
    if text.startswith(_BY_DURATION):
        m = _DURATION.fullmatch(text[len(_BY_DURATION):].strip())
        if m is not None and any(g is not None for g in m.groups()[1:]):
            sign = -1 if m.group(1) == "-" else 1
            days, hours, minutes, seconds = (int(g) if g else 0 for g in m.groups()[1:5])
            nanos = int((m.group(6) or "").ljust(9, "0")) if m.group(6) else 0
            if m.group(5) and m.group(5).startswith("-"):
                nanos = -nanos
            ms = sign * (((days * 24 + hours) * 60 + minutes) * 60_000 + seconds * 1000 + nanos // 1_000_000)
            if ms >= 0:
                return "by_duration", ms
    raise ValueError(f"Invalid value `{value}` for configuration {_AUTO_OFFSET_RESET}. The value must be either "
                     "'earliest', 'latest' or of the format 'by_duration:<PnDTnHnMn.nS>'.")


def _parse(defn: GroupConfigDef, value: str) -> int | str | bool:
    """Kafka's `ConfigDef.parseType` and the key's validator; INVALID_CONFIG with Kafka's wording."""
    text = value.strip()
    prefix = f"Invalid value {value} for configuration {defn.name}: "
    if defn.type == "int":
        try:
            number = int(text)
        except ValueError:
            raise _invalid(prefix + "Not a number of type INT") from None
        if not _INT_MIN <= number <= _INT_MAX:
            raise _invalid(prefix + "Not a number of type INT")
        if defn.at_least is not None and number < defn.at_least:
            raise _invalid(prefix + f"Value must be at least {defn.at_least}")
        return number
    if defn.type == "boolean":
        if text.lower() not in ("true", "false"):
            raise _invalid(prefix + "Expected value to be either true or false")
        return text.lower() == "true"
    if defn.name == _AUTO_OFFSET_RESET:
        try:
            parse_auto_offset_reset(text)
        except ValueError as e:
            raise _invalid(prefix + str(e)) from None
    elif defn.one_of and text not in defn.one_of:
        raise _invalid(prefix + f"String must be one of: {', '.join(defn.one_of)}")
    return text


def _broker_int(broker: BrokerValue, key: str) -> int:
    value = broker(key)
    return int(value) if isinstance(value, int | str) else 0


def validate_group_configs(overrides: Mapping[str, str], broker: BrokerValue) -> None:
    """Kafka's `GroupConfig.validate` for a group's full override set (the broker's values for the rest);
    raises KafkaError(INVALID_CONFIG) with Kafka's message."""
    for name in overrides:
        if name not in GROUP_CONFIGS_BY_NAME:
            raise _invalid(f"Unknown group config name: {name}")
    values: dict[str, int | str | bool] = {}
    for defn in GROUP_CONFIG_DEFS:
        raw = overrides.get(defn.name)
        if raw is None:
            base = broker(defn.broker_synonym) if defn.broker_synonym else None
            raw = str(base) if isinstance(base, int | str) and not isinstance(base, bool) else defn.default
        values[defn.name] = _parse(defn, raw)
    for name in _RANGE_ORDER:
        defn = GROUP_CONFIGS_BY_NAME[name]
        if defn.bounds_only_when_set and name not in overrides:
            continue
        value = values[name]
        assert isinstance(value, int)
        low_key, high_key = defn.bounds
        if low_key is not None and value < _broker_int(broker, low_key):
            raise _invalid(f"{name} must be greater than or equal to {low_key}")
        if high_key is not None and value > _broker_int(broker, high_key):
            raise _invalid(f"{name} must be less than or equal to {high_key}")
    for session, heartbeat in _SESSION_OVER_HEARTBEAT:
        if int(values[session]) <= int(values[heartbeat]):
            raise _invalid(f"{session} must be greater than {heartbeat}")


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """The configs one group runs with (Kafka's `GroupConfig`, after `GroupConfig.evaluate`)."""

    consumer_session_timeout_ms: int
    consumer_heartbeat_interval_ms: int
    share_session_timeout_ms: int
    share_heartbeat_interval_ms: int
    share_record_lock_duration_ms: int
    share_delivery_count_limit: int
    share_partition_max_record_locks: int
    share_auto_offset_reset: str
    share_isolation_level: str
    share_renew_acknowledge_enable: bool

    @classmethod
    def evaluate(cls, overrides: Mapping[str, str], broker: BrokerValue) -> GroupConfig:
        """The group's overrides over the broker's keys, each clamped into the broker's current bounds
        (an override that no longer parses falls back to the broker's value)."""

        def value(name: str) -> int | str | bool:
            defn = GROUP_CONFIGS_BY_NAME[name]
            base = broker(defn.broker_synonym) if defn.broker_synonym else None
            fallback = str(base) if isinstance(base, int | str) and not isinstance(base, bool) else defn.default
            raw = overrides.get(name, fallback)
            try:
                parsed = _parse(defn, raw)
            except KafkaError:
                parsed = _parse(defn, fallback)
            if isinstance(parsed, int) and not isinstance(parsed, bool) and name in overrides:
                low_key, high_key = defn.bounds
                if low_key is not None:
                    parsed = max(parsed, _broker_int(broker, low_key))
                if high_key is not None:
                    parsed = min(parsed, _broker_int(broker, high_key))
            return parsed

        def as_int(name: str) -> int:
            v = value(name)
            assert isinstance(v, int)
            return v

        return cls(
            consumer_session_timeout_ms=as_int("consumer.session.timeout.ms"),
            consumer_heartbeat_interval_ms=as_int("consumer.heartbeat.interval.ms"),
            share_session_timeout_ms=as_int("share.session.timeout.ms"),
            share_heartbeat_interval_ms=as_int("share.heartbeat.interval.ms"),
            share_record_lock_duration_ms=as_int("share.record.lock.duration.ms"),
            share_delivery_count_limit=as_int("share.delivery.count.limit"),
            share_partition_max_record_locks=as_int("share.partition.max.record.locks"),
            share_auto_offset_reset=str(value(_AUTO_OFFSET_RESET)),
            share_isolation_level=str(value("share.isolation.level")),
            share_renew_acknowledge_enable=bool(value("share.renew.acknowledge.enable")),
        )
