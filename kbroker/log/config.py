"""Topic-level log configuration: Kafka's topic config names, types, defaults and broker synonyms.

Owns ``LogConfig`` (the parsed, validated settings one ``UnifiedLog`` runs with) and ``TOPIC_CONFIGS``
(the table of every Kafka 4.x topic config that CreateTopics, DescribeConfigs and AlterConfigs use:
Kafka name, type, default, broker synonym keys, validator, sensitivity). Values missing from a
topic's overrides fall back to the broker's ``log.*`` synonyms, then to Kafka's default.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["ConfigType", "LogConfig", "TopicConfigDef", "TOPIC_CONFIGS", "TOPIC_CONFIGS_BY_NAME"]

LONG_MAX = 9223372036854775807
INT_MAX = 2147483647


class ConfigType:
    """DescribeConfigs ``config_type`` ids (Kafka's ``ConfigResource``/``ConfigDef.Type`` order)."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


Validator = Callable[[Any], str | None]  # returns an error message, or None when the value is fine


def _at_least(lo: int | float) -> Validator:
    return lambda v: None if v >= lo else f"Value must be at least {lo}"


def _between(lo: int | float, hi: int | float) -> Validator:
    return lambda v: None if lo <= v <= hi else f"Value must be in the range [{lo}, ..., {hi}]"


def _one_of(*choices: str) -> Validator:
    return lambda v: None if v in choices else f"String must be one of: {', '.join(choices)}"


def _subset_of(*choices: str) -> Validator:
    def check(v: list[str]) -> str | None:
        bad = [x for x in v if x not in choices]
        return f"Invalid value(s) {bad}; valid values are {list(choices)}" if bad else None

    return check


def _gzip_level(v: int) -> str | None:
    return None if v == -1 or 1 <= v <= 9 else "Value must be -1 or in the range [1, ..., 9]"


def _throttled_replicas(v: list[str]) -> str | None:
    # Kafka's ThrottledReplicaListValidator: either "*" alone or "partition:brokerId" pairs.
    if v == ["*"] or not v:
        return None
    for item in v:
        parts = item.split(":")
        if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
            return "Must be '*' or a list of [partitionId]:[brokerId] pairs"
    return None


@dataclass(frozen=True)
class TopicConfigDef:
    """One topic config as Kafka defines it (``LogConfig.CONFIG`` in Kafka's storage module)."""

    name: str
    type: int
    default: Any
    synonyms: tuple[tuple[str, int], ...] = ()  # broker keys, highest precedence first, with ms multiplier
    validator: Validator | None = None
    sensitive: bool = False
    internal: bool = False  # defined but hidden from DescribeConfigs (like Kafka's defineInternal)
    doc: str = ""

    @property
    def field(self) -> str:
        return self.name.replace(".", "_")

    def default_string(self) -> str | None:
        """The default rendered as DescribeConfigs shows it."""
        return format_value(self.type, self.default)


def format_value(config_type: int, value: Any) -> str | None:
    if value is None:
        return None
    if config_type == ConfigType.BOOLEAN:
        return "true" if value else "false"
    if config_type == ConfigType.LIST:
        return ",".join(value)
    return str(value)


def parse_value(defn: TopicConfigDef, raw: Any) -> Any:
    """Parse a string (or already-typed) value for ``defn``; ValueError with Kafka-like wording on failure."""
    t = defn.type
    try:
        if t == ConfigType.BOOLEAN:
            if isinstance(raw, bool):
                return raw
            s = str(raw).strip().lower()
            if s not in ("true", "false"):
                raise ValueError("Expected value to be either true or false")
            return s == "true"
        if t in (ConfigType.INT, ConfigType.LONG, ConfigType.SHORT):
            v = int(str(raw).strip()) if not isinstance(raw, int) else raw
            limit = INT_MAX if t == ConfigType.INT else (32767 if t == ConfigType.SHORT else LONG_MAX)
            if not -limit - 1 <= v <= limit:
                raise ValueError("Value out of range")
            return v
        if t == ConfigType.DOUBLE:
            return float(str(raw).strip())
        if t == ConfigType.LIST:
            if isinstance(raw, list):
                return [str(x) for x in raw]
            s = str(raw).strip()
            return [x.strip() for x in s.split(",") if x.strip()] if s else []
        return str(raw).strip() if t != ConfigType.PASSWORD else str(raw)
    except ValueError as e:
        raise ValueError(f"Invalid value {raw} for configuration {defn.name}: {e}") from None


_L, _I, _S, _B, _D, _LS = ConfigType.LONG, ConfigType.INT, ConfigType.STRING, ConfigType.BOOLEAN, ConfigType.DOUBLE, ConfigType.LIST
_HOUR = 3600000

TOPIC_CONFIGS: tuple[TopicConfigDef, ...] = (
    TopicConfigDef("cleanup.policy", _LS, ["delete"], (("log.cleanup.policy", 1),), _subset_of("compact", "delete")),
    TopicConfigDef("compression.type", _S, "producer", (("compression.type", 1),),
                   _one_of("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")),
    TopicConfigDef("compression.gzip.level", _I, -1, (("compression.gzip.level", 1),), _gzip_level),
    TopicConfigDef("compression.lz4.level", _I, 9, (("compression.lz4.level", 1),), _between(1, 17)),
    TopicConfigDef("compression.zstd.level", _I, 3, (("compression.zstd.level", 1),), _between(-131072, 22)),
    TopicConfigDef("delete.retention.ms", _L, 86400000, (("log.cleaner.delete.retention.ms", 1),), _at_least(0)),
    TopicConfigDef("file.delete.delay.ms", _L, 60000, (("log.segment.delete.delay.ms", 1),), _at_least(0)),
    TopicConfigDef("flush.messages", _L, LONG_MAX, (("log.flush.interval.messages", 1),), _at_least(1)),
    TopicConfigDef("flush.ms", _L, LONG_MAX, (("log.flush.interval.ms", 1),), _at_least(0)),
    TopicConfigDef("follower.replication.throttled.replicas", _LS, [], (), _throttled_replicas),
    TopicConfigDef("index.interval.bytes", _I, 4096, (("log.index.interval.bytes", 1),), _at_least(0)),
    TopicConfigDef("leader.replication.throttled.replicas", _LS, [], (), _throttled_replicas),
    TopicConfigDef("local.retention.bytes", _L, -2, (("log.local.retention.bytes", 1),), _at_least(-2)),
    TopicConfigDef("local.retention.ms", _L, -2, (("log.local.retention.ms", 1),), _at_least(-2)),
    TopicConfigDef("max.compaction.lag.ms", _L, LONG_MAX, (("log.cleaner.max.compaction.lag.ms", 1),), _at_least(1)),
    TopicConfigDef("max.message.bytes", _I, 1048588, (("message.max.bytes", 1),), _at_least(0)),
    # Kafka 4.0 (KIP-1030) lowered the future-timestamp bound's default from Long.MAX to one hour.
    TopicConfigDef("message.timestamp.after.max.ms", _L, _HOUR, (("log.message.timestamp.after.max.ms", 1),), _at_least(0)),
    TopicConfigDef("message.timestamp.before.max.ms", _L, LONG_MAX, (("log.message.timestamp.before.max.ms", 1),), _at_least(0)),
    TopicConfigDef("message.timestamp.type", _S, "CreateTime", (("log.message.timestamp.type", 1),),
                   _one_of("CreateTime", "LogAppendTime")),
    TopicConfigDef("min.cleanable.dirty.ratio", _D, 0.5, (("log.cleaner.min.cleanable.ratio", 1),), _between(0, 1)),
    TopicConfigDef("min.compaction.lag.ms", _L, 0, (("log.cleaner.min.compaction.lag.ms", 1),), _at_least(0)),
    TopicConfigDef("min.insync.replicas", _I, 1, (("min.insync.replicas", 1),), _at_least(1)),
    TopicConfigDef("preallocate", _B, False, (("log.preallocate", 1),)),
    TopicConfigDef("remote.log.copy.disable", _B, False),
    TopicConfigDef("remote.log.delete.on.disable", _B, False),
    TopicConfigDef("remote.storage.enable", _B, False),
    TopicConfigDef("retention.bytes", _L, -1, (("log.retention.bytes", 1),)),
    TopicConfigDef("retention.ms", _L, 168 * _HOUR,
                   (("log.retention.ms", 1), ("log.retention.minutes", 60000), ("log.retention.hours", _HOUR)),
                   _at_least(-1)),
    # Kafka 4.0 (KIP-1030) raised the minimum from 14 bytes to 1 MiB; tests use internal.segment.bytes.
    TopicConfigDef("segment.bytes", _I, 1073741824, (("log.segment.bytes", 1),), _at_least(1048576)),
    TopicConfigDef("segment.index.bytes", _I, 10485760, (("log.index.size.max.bytes", 1),), _at_least(4)),
    TopicConfigDef("segment.jitter.ms", _L, 0, (("log.roll.jitter.ms", 1), ("log.roll.jitter.hours", _HOUR)), _at_least(0)),
    TopicConfigDef("segment.ms", _L, 168 * _HOUR, (("log.roll.ms", 1), ("log.roll.hours", _HOUR)), _at_least(1)),
    TopicConfigDef("unclean.leader.election.enable", _B, False, (("unclean.leader.election.enable", 1),)),
    TopicConfigDef("internal.segment.bytes", _I, None, (), _at_least(14), internal=True),
)

TOPIC_CONFIGS_BY_NAME: dict[str, TopicConfigDef] = {d.name: d for d in TOPIC_CONFIGS}


@dataclass
class LogConfig:
    """Parsed topic configuration. Field names are Kafka's config names with dots as underscores."""

    cleanup_policy: str = "delete"  # comma-separated, as Kafka's list type renders it
    compression_type: str = "producer"
    compression_gzip_level: int = -1
    compression_lz4_level: int = 9
    compression_zstd_level: int = 3
    delete_retention_ms: int = 86400000
    file_delete_delay_ms: int = 60000
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    follower_replication_throttled_replicas: str = ""
    index_interval_bytes: int = 4096
    leader_replication_throttled_replicas: str = ""
    local_retention_bytes: int = -2
    local_retention_ms: int = -2
    max_compaction_lag_ms: int = LONG_MAX
    max_message_bytes: int = 1048588
    message_timestamp_after_max_ms: int = _HOUR
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_type: str = "CreateTime"
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    min_insync_replicas: int = 1
    preallocate: bool = False
    remote_log_copy_disable: bool = False
    remote_log_delete_on_disable: bool = False
    remote_storage_enable: bool = False
    retention_bytes: int = -1
    retention_ms: int = 168 * _HOUR
    segment_bytes: int = 1073741824
    segment_index_bytes: int = 10485760
    segment_jitter_ms: int = 0
    segment_ms: int = 168 * _HOUR
    unclean_leader_election_enable: bool = False

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy.split(",")

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy.split(",")

    @functools.cached_property
    def log_append_time(self) -> bool:
        # Read on every append (a LogConfig is replaced, never changed: see produce_check_args).
        return self.message_timestamp_type == "LogAppendTime"

    @property
    def max_index_size(self) -> int:
        return self.segment_index_bytes

    @functools.cached_property
    def produce_check_args(self) -> tuple[int, int, int, bool, bool] | None:
        """What the compiled produce check (``log.validator.check_produced``) reads, once per config
        (a LogConfig is replaced, never changed, when a topic's configs change): (max.message.bytes,
        message.timestamp.before.max.ms, message.timestamp.after.max.ms, compacted, LogAppendTime), or
        None when ``compression.type`` recompresses producers' batches (the Python path does that)."""
        if self.compression_type not in ("producer", "uncompressed"):
            return None
        return (self.max_message_bytes, self.message_timestamp_before_max_ms, self.message_timestamp_after_max_ms,
                self.compact, self.log_append_time)

    def replace(self, **changes: Any) -> LogConfig:
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_props(cls, broker_defaults: Mapping[str, str] | None = None,
                   overrides: Mapping[str, str] | None = None) -> LogConfig:
        """Build a config from the broker's properties (``log.*`` synonyms) and a topic's overrides.

        Raises ValueError (the API layer answers INVALID_CONFIG) for unknown topic config names,
        unparsable values and values a validator rejects.
        """
        broker_defaults = broker_defaults or {}
        overrides = overrides or {}
        for name in overrides:
            if name not in TOPIC_CONFIGS_BY_NAME:
                raise ValueError(f"Unknown topic config name: {name}")
        values: dict[str, Any] = {}
        internal_segment_bytes: int | None = None
        for defn in TOPIC_CONFIGS:
            raw: Any = None
            multiplier = 1
            if defn.name in overrides and overrides[defn.name] is not None:
                value = parse_value(defn, overrides[defn.name])
            else:
                for key, mult in defn.synonyms:
                    raw = broker_defaults.get(key)
                    if raw is not None:
                        multiplier = mult
                        break
                if raw is not None:
                    value = parse_value(defn, raw)
                    if defn.name == "retention.ms" and isinstance(value, int) and value < 0:
                        value = -1  # Kafka's KafkaConfig.logRetentionTimeMillis: any negative broker value is forever
                    elif multiplier != 1 and isinstance(value, int) and value >= 0:
                        value *= multiplier
                else:
                    value = defn.default
            if value is not None and defn.validator is not None:
                problem = defn.validator(value)
                if problem:
                    raise ValueError(f"Invalid value {format_value(defn.type, value)} for configuration {defn.name}: {problem}")
            if defn.name == "internal.segment.bytes":
                internal_segment_bytes = value
                continue
            values[defn.field] = ",".join(value) if defn.type == ConfigType.LIST else value
        if internal_segment_bytes is not None:
            values["segment_bytes"] = internal_segment_bytes
        return cls(**values)

    def to_props(self) -> dict[str, str]:
        """Every (non-internal) topic config rendered as a string, keyed by Kafka name."""
        out: dict[str, str] = {}
        for defn in TOPIC_CONFIGS:
            if defn.internal:
                continue
            value = getattr(self, defn.field)
            out[defn.name] = value if isinstance(value, str) else (format_value(defn.type, value) or "")
        return out
