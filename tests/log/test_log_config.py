"""LogConfig / TOPIC_CONFIGS: Kafka names, defaults, broker synonyms and validation."""

from __future__ import annotations

import dataclasses

import pytest

from kbroker.log.config import TOPIC_CONFIGS, TOPIC_CONFIGS_BY_NAME, ConfigType, LogConfig


def test_defaults_match_kafka() -> None:
    c = LogConfig()
    assert (c.segment_bytes, c.segment_ms, c.segment_index_bytes, c.index_interval_bytes) == (
        1073741824, 604800000, 10485760, 4096)
    assert (c.retention_ms, c.retention_bytes, c.max_message_bytes, c.file_delete_delay_ms) == (
        604800000, -1, 1048588, 60000)
    assert c.flush_messages == c.flush_ms == 2**63 - 1
    assert c.message_timestamp_after_max_ms == 3600000  # Kafka 4.0 default
    assert c.compression_type == "producer" and c.cleanup_policy == "delete" and c.delete and not c.compact
    assert LogConfig.from_props({}, {}) == c


def test_table_covers_every_field() -> None:
    fields = {f.name for f in dataclasses.fields(LogConfig)}
    public = {d.field for d in TOPIC_CONFIGS if not d.internal}
    assert fields == public
    for d in TOPIC_CONFIGS:
        if not d.internal:
            default = getattr(LogConfig(), d.field)
            rendered = ",".join(d.default) if d.type == ConfigType.LIST else d.default
            assert default == rendered, d.name
    assert TOPIC_CONFIGS_BY_NAME["retention.ms"].default_string() == "604800000"
    assert TOPIC_CONFIGS_BY_NAME["preallocate"].default_string() == "false"
    assert LogConfig().to_props()["cleanup.policy"] == "delete"


def test_broker_synonyms_and_units() -> None:
    c = LogConfig.from_props({"log.retention.hours": "1", "log.roll.hours": "2", "log.segment.bytes": "2097152",
                              "message.max.bytes": "5000", "log.cleanup.policy": "compact,delete"}, {})
    assert c.retention_ms == 3600000 and c.segment_ms == 7200000 and c.segment_bytes == 2097152
    assert c.max_message_bytes == 5000 and c.compact and c.delete
    # log.retention.ms wins over .minutes and .hours; a topic override wins over all.
    c = LogConfig.from_props({"log.retention.ms": "5", "log.retention.minutes": "1", "log.retention.hours": "1"}, {})
    assert c.retention_ms == 5
    c = LogConfig.from_props({"log.retention.ms": "5"}, {"retention.ms": "7", "cleanup.policy": "compact"})
    assert c.retention_ms == 7 and c.cleanup_policy == "compact"
    assert LogConfig.from_props({"log.retention.hours": "-1"}, {}).retention_ms == -1


@pytest.mark.parametrize("overrides", [
    {"no.such.config": "1"},
    {"segment.bytes": "1000"},  # below Kafka 4's 1 MiB minimum
    {"retention.ms": "-5"},
    {"cleanup.policy": "remove"},
    {"compression.type": "brotli"},
    {"min.cleanable.dirty.ratio": "1.5"},
    {"max.message.bytes": "abc"},
    {"preallocate": "yes"},
    {"message.timestamp.type": "Whenever"},
    {"leader.replication.throttled.replicas": "0-1"},
])
def test_invalid_values_raise(overrides: dict[str, str]) -> None:
    with pytest.raises(ValueError):
        LogConfig.from_props({}, overrides)


def test_internal_segment_bytes_allows_small_segments() -> None:
    assert LogConfig.from_props({}, {"internal.segment.bytes": "4096"}).segment_bytes == 4096
    assert "internal.segment.bytes" not in LogConfig().to_props()
