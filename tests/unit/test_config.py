"""KafkaConfig: Kafka's server.properties keys, defaults, parsing, overrides, precedence, validation."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from kbroker.config import (
    CONFIG_DEFS,
    DEFAULT_CONFIG,
    STATIC_BROKER_CONFIG,
    ConfigError,
    KafkaConfig,
    parse_properties,
)
from kbroker.log.config import LogConfig


def test_defaults_are_kafkas_and_a_local_single_node() -> None:
    c = KafkaConfig.load()
    assert c.node_id == 1
    assert [str(e) for e in c.listeners] == ["PLAINTEXT://127.0.0.1:9092"]
    assert c.advertised_listeners == c.listeners
    assert c.log_dirs == [Path("./data").absolute()]
    assert c["num.partitions"] == 1
    assert c["default.replication.factor"] == 1
    assert c["auto.create.topics.enable"] is True
    assert c["message.max.bytes"] == 1048588
    assert c["socket.request.max.bytes"] == 104857600
    assert c["queued.max.requests"] == 500
    assert c["log.segment.bytes"] == 1073741824
    assert c["log.index.interval.bytes"] == 4096
    assert c["log.retention.check.interval.ms"] == 300000
    assert c["compression.type"] == "producer"
    assert c["log.message.timestamp.type"] == "CreateTime"
    assert c["offsets.topic.num.partitions"] == 50
    assert c["group.initial.rebalance.delay.ms"] == 3000
    assert c["log.cleanup.policy"] == ["delete"]
    assert LogConfig.from_props(c.broker_props()).retention_ms == 168 * 3600 * 1000
    assert c["kbroker.sendfile.enable"] is True
    assert c.source("num.partitions") == DEFAULT_CONFIG


def test_properties_file_parsing(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text(
        "# a comment\n"
        "! another comment\n"
        "node.id=3\n"
        "listeners = PLAINTEXT://localhost:19092\n"
        "log.dirs:/tmp/a,\\\n"
        "    /tmp/b\n"
        "num.partitions 4\n"
        "   auto.create.topics.enable=false   \n"
        "process.roles=broker,controller\n"
        "controller.quorum.voters=3@localhost:9093\n"
    )
    c = KafkaConfig.load(path)
    assert c.node_id == 3
    assert c.listeners[0].host == "localhost" and c.listeners[0].port == 19092
    assert c.log_dirs == [Path("/tmp/a"), Path("/tmp/b")]
    assert c["num.partitions"] == 4
    assert c["auto.create.topics.enable"] is False
    assert c.source("num.partitions") == STATIC_BROKER_CONFIG


def test_java_properties_escapes() -> None:
    props = parse_properties("a\\:b=c\\u0041\\td\nkey\\ with\\ space:value\nempty=\n")
    assert props == {"a:b": "cA\td", "key with space": "value", "empty": ""}


def test_overrides_win_over_the_file(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text("num.partitions=4\nlog.dir=/tmp/x\n")
    c = KafkaConfig.load(path, {"num.partitions": "7", "log.dirs": "/tmp/y"})
    assert c["num.partitions"] == 7
    assert c.log_dirs == [Path("/tmp/y")]  # log.dirs wins over log.dir


@pytest.mark.parametrize(
    ("props", "expected_ms"),
    [
        ({}, 168 * 3_600_000),
        ({"log.retention.hours": "1"}, 3_600_000),
        ({"log.retention.hours": "1", "log.retention.minutes": "5"}, 300_000),
        ({"log.retention.hours": "1", "log.retention.minutes": "5", "log.retention.ms": "1234"}, 1234),
        ({"log.retention.ms": "-1"}, -1),
        ({"log.retention.minutes": "-1", "log.retention.hours": "2"}, -1),
    ],
)
def test_retention_precedence_ms_minutes_hours(props: dict[str, str], expected_ms: int) -> None:
    c = KafkaConfig(props)
    # The one broker-to-topic config resolver is LogConfig.from_props (the synonym table).
    assert LogConfig.from_props(c.broker_props()).retention_ms == expected_ms
    assert LogConfig.from_props(c.broker_props()).to_props()["retention.ms"] == str(expected_ms)


def test_topic_defaults_follow_broker_synonyms() -> None:
    c = KafkaConfig(
        {
            "log.segment.bytes": "2097152",
            "message.max.bytes": "5000",
            "log.roll.hours": "2",
            "log.cleanup.policy": "compact,delete",
            "compression.type": "zstd",
        }
    )
    d = LogConfig.from_props(c.broker_props()).to_props()
    assert d["segment.bytes"] == "2097152"
    assert d["max.message.bytes"] == "5000"
    assert d["segment.ms"] == str(2 * 3_600_000)
    assert d["cleanup.policy"] == "compact,delete"
    assert d["compression.type"] == "zstd"


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        (
            "num.partitions",
            "abc",
            "Invalid value abc for configuration num.partitions: Not a number of type INT",
        ),
        ("num.partitions", "0", "Value must be at least 1"),
        ("auto.create.topics.enable", "yes", "Expected value to be either true or false"),
        ("log.segment.bytes", "1000", "Value must be at least 1048576"),
        ("compression.type", "brotli", "String must be one of"),
        ("log.message.timestamp.type", "Wallclock", "String must be one of"),
        ("socket.request.max.bytes", "99999999999", "Not a number of type INT"),
        ("listeners", "nonsense", "listener must be NAME://HOST:PORT"),
        ("listeners", "SSL://127.0.0.1:9093", "listener needs a keystore"),
        ("listeners", "FOO://127.0.0.1:9093", "no security protocol defined for listener FOO"),
        ("listeners", "SASL_PLAINTEXT://127.0.0.1:9093", "GSSAPI not implemented"),
        ("advertised.listeners", "PLAINTEXT://0.0.0.0:9092", "nonroutable meta-address"),
        ("log.cleaner.min.cleanable.ratio", "2", "no more than 1"),
    ],
)
def test_invalid_values_are_refused(key: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        KafkaConfig({key: value})


def test_broker_id_must_match_node_id() -> None:
    assert KafkaConfig({"broker.id": "5"}).node_id == 5
    with pytest.raises(ConfigError, match="broker.id"):
        KafkaConfig({"broker.id": "5", "node.id": "6"})


def test_unknown_keys_are_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="kbroker.config"):
        c = KafkaConfig.load(None, {"no.such.key": "1", "num.partitions": "2"})
    assert c.unknown_keys == ["no.such.key"]
    assert "no.such.key" in caplog.text and "not used" in caplog.text


def test_missing_config_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="Cannot read config file"):
        KafkaConfig.load(tmp_path / "missing.properties")


def test_config_defs_are_complete_for_describe_configs() -> None:
    c = KafkaConfig({"num.partitions": "3"})
    for name, d in CONFIG_DEFS.items():
        assert d.name == name and d.type in {"int", "long", "short", "double", "boolean", "string", "list"}
        assert name in c
    assert CONFIG_DEFS["message.max.bytes"].dynamic_update
    assert not CONFIG_DEFS["node.id"].dynamic_update
    assert c.value_as_string("log.cleanup.policy") == "delete"
    assert c.value_as_string("auto.create.topics.enable") == "true"
    assert c.broker_props()["num.partitions"] == "3"


def test_port_zero_takes_the_bound_port() -> None:
    from kbroker.config import Endpoint

    c = KafkaConfig({"listeners": "PLAINTEXT://127.0.0.1:0"})
    c.set_bound_ports([Endpoint("PLAINTEXT", "127.0.0.1", 45678, "PLAINTEXT")])
    assert [str(e) for e in c.listeners] == ["PLAINTEXT://127.0.0.1:45678"]
    assert [str(e) for e in c.advertised_listeners] == ["PLAINTEXT://127.0.0.1:45678"]


def test_every_key_is_documented() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text()
    missing = [name for name in CONFIG_DEFS if f"| `{name}` |" not in doc]
    assert not missing, f"docs/configuration.md lacks {missing}"


def test_kafkas_sample_server_properties(tmp_path: Path) -> None:
    from tests.support.broker import KAFKA_SAMPLE_SERVER_PROPERTIES

    path = tmp_path / "server.properties"
    path.write_text(KAFKA_SAMPLE_SERVER_PROPERTIES)
    c = KafkaConfig.load(path)
    # The controller listener is not bound (no controller RPCs); an empty host binds every interface.
    assert [(e.name, e.host, e.port) for e in c.listeners] == [("PLAINTEXT", "", 9092)]
    assert [str(e) for e in c.advertised_listeners] == ["PLAINTEXT://localhost:9092"]
    assert c.log_dirs == [Path("/tmp/kraft-combined-logs")]
    assert c.unknown_keys == []  # the share coordinator's keys are known since share groups (KIP-932)
