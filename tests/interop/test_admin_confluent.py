"""Topic administration through librdkafka's AdminClient (confluent-kafka) against a real kbroker.

Covers CreateTopics (invalid configs, validate-only, a mix of valid and invalid topics in one
request), DeleteTopics, CreatePartitions, DescribeConfigs (every topic config with a source),
IncrementalAlterConfigs taking effect on the live log (a lowered max.message.bytes refuses a large
record), AlterConfigs, DeleteRecords, DescribeCluster and ListOffsets.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourceType,
)

from kbroker.log.config import TOPIC_CONFIGS
from tests.support.broker import KBroker

pytestmark = pytest.mark.interop

TIMEOUT = 30


@pytest.fixture
def admin(kbroker: KBroker) -> Iterator[AdminClient]:
    yield AdminClient({"bootstrap.servers": kbroker.bootstrap})


def _error(future: Future[Any]) -> KafkaError:
    with pytest.raises(KafkaException) as e:
        future.result(TIMEOUT)
    err: KafkaError = e.value.args[0]
    return err


def _src(entry: ConfigEntry) -> int:
    source: Any = entry.source
    return int(getattr(source, "value", source))


def _produce(bootstrap: str, topic: str, values: list[bytes], partition: int = 0,
             conf: dict[str, Any] | None = None) -> list[Any]:
    """Produce and return each delivery report's error (None on success)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, **(conf or {})})
    errors: list[Any] = []
    for v in values:
        # Keyed: a compacted topic refuses keyless records (INVALID_RECORD), as Kafka does.
        producer.produce(topic, v, key=b"k", partition=partition, on_delivery=lambda err, msg: errors.append(err))
    assert producer.flush(TIMEOUT) == 0
    return errors


def _wait_topic(admin: AdminClient, topic: str, partitions: int) -> None:
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        md = admin.list_topics(topic, timeout=TIMEOUT)
        t = md.topics.get(topic)
        if t is not None and t.error is None and len(t.partitions) == partitions:
            return
        time.sleep(0.1)
    raise AssertionError(f"topic {topic} never showed {partitions} partitions")


def test_create_and_delete_topics(admin: AdminClient) -> None:
    fs = admin.create_topics([NewTopic("alpha", 3, 1), NewTopic("beta", 1, 1, config={"retention.ms": "60000"})],
                             operation_timeout=TIMEOUT)
    for f in fs.values():
        assert f.result(TIMEOUT) is None
    _wait_topic(admin, "alpha", 3)
    err = _error(admin.create_topics([NewTopic("alpha", 1, 1)])["alpha"])
    assert err.code() == KafkaError.TOPIC_ALREADY_EXISTS
    assert "already exists" in err.str()
    assert set(admin.list_topics(timeout=TIMEOUT).topics) >= {"alpha", "beta"}

    for f in admin.delete_topics(["alpha", "beta"], operation_timeout=TIMEOUT).values():
        assert f.result(TIMEOUT) is None
    assert _error(admin.delete_topics(["alpha"])["alpha"]).code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    remaining = admin.list_topics(timeout=TIMEOUT).topics
    assert "alpha" not in remaining and "beta" not in remaining


def test_create_topics_errors_and_validate_only(admin: AdminClient) -> None:
    fs = admin.create_topics(
        [
            NewTopic("good", 2, 1, config={"cleanup.policy": "compact"}),
            NewTopic("bad-config", 1, 1, config={"retention.ms": "not-a-number"}),
            NewTopic("unknown-config", 1, 1, config={"no.such.config": "1"}),
            NewTopic("bad-rf", 1, 3),
            NewTopic("bad name!", 1, 1),
        ]
    )
    assert fs["good"].result(TIMEOUT) is None
    err = _error(fs["bad-config"])
    assert err.code() == KafkaError.INVALID_CONFIG and "retention.ms" in err.str()
    assert _error(fs["unknown-config"]).code() == KafkaError.INVALID_CONFIG
    err = _error(fs["bad-rf"])
    assert err.code() == KafkaError.INVALID_REPLICATION_FACTOR and "only 1 broker" in err.str()
    assert _error(fs["bad name!"]).code() == KafkaError.TOPIC_EXCEPTION
    topics = admin.list_topics(timeout=TIMEOUT).topics
    assert "good" in topics and "bad-config" not in topics and "bad-rf" not in topics

    fs = admin.create_topics([NewTopic("dry", 4, 1), NewTopic("dry-bad", 1, 1, config={"segment.bytes": "1"})],
                             validate_only=True)
    assert fs["dry"].result(TIMEOUT) is None
    assert _error(fs["dry-bad"]).code() == KafkaError.INVALID_CONFIG
    assert "dry" not in admin.list_topics(timeout=TIMEOUT).topics


def test_create_partitions(admin: AdminClient) -> None:
    admin.create_topics([NewTopic("grow", 1, 1)])["grow"].result(TIMEOUT)
    assert admin.create_partitions([NewPartitions("grow", 4)])["grow"].result(TIMEOUT) is None
    _wait_topic(admin, "grow", 4)
    err = _error(admin.create_partitions([NewPartitions("grow", 2)])["grow"])
    assert err.code() == KafkaError.INVALID_PARTITIONS
    assert _error(admin.create_partitions([NewPartitions("missing", 2)])["missing"]).code() == \
        KafkaError.UNKNOWN_TOPIC_OR_PART
    assert admin.create_partitions([NewPartitions("grow", 9)], validate_only=True)["grow"].result(TIMEOUT) is None
    assert len(admin.list_topics("grow", timeout=TIMEOUT).topics["grow"].partitions) == 4


def test_describe_configs_lists_every_topic_config(admin: AdminClient, kbroker: KBroker) -> None:
    admin.create_topics([NewTopic("desc", 1, 1, config={"retention.ms": "3600000"})])["desc"].result(TIMEOUT)
    res = ConfigResource(ResourceType.TOPIC, "desc")
    configs: dict[str, ConfigEntry] = admin.describe_configs([res])[res].result(TIMEOUT)
    expected = {d.name for d in TOPIC_CONFIGS if not d.internal}
    assert set(configs) == expected
    assert configs["retention.ms"].value == "3600000"
    assert _src(configs["retention.ms"]) == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert _src(configs["segment.bytes"]) == ConfigSource.DEFAULT_CONFIG.value
    assert configs["segment.bytes"].is_default
    assert configs["cleanup.policy"].value == "delete"
    # min.insync.replicas: the cluster-level default the controller writes when ELR (KIP-966) is on, as
    # Kafka 4.3's does (KAFKA-16540), so DYNAMIC_DEFAULT_BROKER_CONFIG (tests/differential/test_vs_kafka.py).
    assert _src(configs["min.insync.replicas"]) == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
    for name, entry in configs.items():
        if name != "min.insync.replicas":
            assert _src(entry) in {ConfigSource.DEFAULT_CONFIG.value, ConfigSource.DYNAMIC_TOPIC_CONFIG.value,
                                    ConfigSource.STATIC_BROKER_CONFIG.value}, entry

    broker = ConfigResource(ResourceType.BROKER, "1")
    bconfigs: dict[str, ConfigEntry] = admin.describe_configs([broker])[broker].result(TIMEOUT)
    assert _src(bconfigs["log.dirs"]) == ConfigSource.STATIC_BROKER_CONFIG.value
    assert bconfigs["log.dirs"].is_read_only
    assert bconfigs["num.partitions"].value == "1"
    assert _src(bconfigs["message.max.bytes"]) == ConfigSource.DEFAULT_CONFIG.value

    missing = ConfigResource(ResourceType.TOPIC, "nope")
    assert _error(admin.describe_configs([missing])[missing]).code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_incremental_alter_configs_takes_effect(admin: AdminClient, kbroker: KBroker) -> None:
    admin.create_topics([NewTopic("small", 1, 1)])["small"].result(TIMEOUT)
    _wait_topic(admin, "small", 1)
    assert _produce(kbroker.bootstrap, "small", [b"x" * 5000]) == [None]

    res = ConfigResource(ResourceType.TOPIC, "small", incremental_configs=[
        ConfigEntry("max.message.bytes", "1024", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
    ])
    assert admin.incremental_alter_configs([res])[res].result(TIMEOUT) is None
    described = admin.describe_configs([ConfigResource(ResourceType.TOPIC, "small")])
    configs = next(iter(described.values())).result(TIMEOUT)
    assert configs["max.message.bytes"].value == "1024"
    assert configs["cleanup.policy"].value == "delete,compact"

    [error] = _produce(kbroker.bootstrap, "small", [b"y" * 5000], conf={"compression.type": "none"})
    assert error is not None and error.code() == KafkaError.MSG_SIZE_TOO_LARGE
    assert _produce(kbroker.bootstrap, "small", [b"z" * 100], conf={"compression.type": "none"}) == [None]

    bad = ConfigResource(ResourceType.TOPIC, "small", incremental_configs=[
        ConfigEntry("retention.ms", "soon", incremental_operation=AlterConfigOpType.SET)])
    assert _error(admin.incremental_alter_configs([bad])[bad]).code() == KafkaError.INVALID_CONFIG

    dry = ConfigResource(ResourceType.TOPIC, "small", incremental_configs=[
        ConfigEntry("max.message.bytes", "99999", incremental_operation=AlterConfigOpType.SET)])
    assert admin.incremental_alter_configs([dry], validate_only=True)[dry].result(TIMEOUT) is None
    configs = next(iter(admin.describe_configs([ConfigResource(ResourceType.TOPIC, "small")]).values())).result(TIMEOUT)
    assert configs["max.message.bytes"].value == "1024"

    reset = ConfigResource(ResourceType.TOPIC, "small", incremental_configs=[
        ConfigEntry("max.message.bytes", None, incremental_operation=AlterConfigOpType.DELETE)])
    assert admin.incremental_alter_configs([reset])[reset].result(TIMEOUT) is None
    assert _produce(kbroker.bootstrap, "small", [b"w" * 5000]) == [None]


def test_legacy_alter_configs(admin: AdminClient) -> None:
    admin.create_topics([NewTopic("legacy", 1, 1, config={"retention.ms": "1000"})])["legacy"].result(TIMEOUT)
    res = ConfigResource(ResourceType.TOPIC, "legacy", set_config={"segment.ms": "600000"})
    with pytest.warns(DeprecationWarning):
        fs = admin.alter_configs([res])
    assert fs[res].result(TIMEOUT) is None
    configs = next(iter(admin.describe_configs([ConfigResource(ResourceType.TOPIC, "legacy")]).values())).result(TIMEOUT)
    assert configs["segment.ms"].value == "600000"
    assert _src(configs["retention.ms"]) == ConfigSource.DEFAULT_CONFIG.value  # replaced, not merged


def test_delete_records_and_list_offsets(admin: AdminClient, kbroker: KBroker) -> None:
    admin.create_topics([NewTopic("dr", 1, 1)])["dr"].result(TIMEOUT)
    _wait_topic(admin, "dr", 1)
    assert _produce(kbroker.bootstrap, "dr", [str(i).encode() for i in range(10)]) == [None] * 10
    tp = TopicPartition("dr", 0)
    latest = admin.list_offsets({tp: OffsetSpec.latest()})[tp].result(TIMEOUT)
    assert latest.offset == 10
    deleted = admin.delete_records([TopicPartition("dr", 0, 4)])
    result = next(iter(deleted.values())).result(TIMEOUT)
    assert result.low_watermark == 4
    earliest = admin.list_offsets({tp: OffsetSpec.earliest()})[tp].result(TIMEOUT)
    assert earliest.offset == 4
    # Beyond the high watermark: OFFSET_OUT_OF_RANGE; the log start does not move.
    err = _error(next(iter(admin.delete_records([TopicPartition("dr", 0, 11)]).values())))
    assert err.code() == KafkaError.OFFSET_OUT_OF_RANGE
    assert admin.list_offsets({tp: OffsetSpec.earliest()})[tp].result(TIMEOUT).offset == 4
    # -1 deletes everything below the high watermark.
    result = next(iter(admin.delete_records([TopicPartition("dr", 0, -1)]).values())).result(TIMEOUT)
    assert result.low_watermark == 10


def test_describe_cluster(admin: AdminClient, kbroker: KBroker) -> None:
    cluster = admin.describe_cluster(include_authorized_operations=True).result(TIMEOUT)
    assert cluster.cluster_id
    assert [n.id for n in cluster.nodes] == [1]
    assert cluster.nodes[0].port == kbroker.port
    assert cluster.controller is not None and cluster.controller.id == 1
    assert cluster.authorized_operations


def test_topic_and_broker_configs_survive_restart(kbroker: KBroker) -> None:
    admin = AdminClient({"bootstrap.servers": kbroker.bootstrap})
    admin.create_topics([NewTopic("kept", 2, 1, config={"max.message.bytes": "1024"})])["kept"].result(TIMEOUT)
    broker = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[
        ConfigEntry("log.retention.ms", "1234567", incremental_operation=AlterConfigOpType.SET)])
    assert admin.incremental_alter_configs([broker])[broker].result(TIMEOUT) is None
    assert kbroker.stop() == 0
    kbroker.start()
    admin = AdminClient({"bootstrap.servers": kbroker.bootstrap})
    _wait_topic(admin, "kept", 2)
    res = ConfigResource(ResourceType.TOPIC, "kept")
    configs = admin.describe_configs([res])[res].result(TIMEOUT)
    assert configs["max.message.bytes"].value == "1024"
    assert configs["retention.ms"].value == "1234567"
    assert _src(configs["retention.ms"]) == ConfigSource.DYNAMIC_BROKER_CONFIG.value
    # The override is live on the reopened log, not just remembered in the metadata image.
    [error] = _produce(kbroker.bootstrap, "kept", [b"x" * 5000], conf={"compression.type": "none"})
    assert error is not None and error.code() == KafkaError.MSG_SIZE_TOO_LARGE
