"""Topic administration through the controller: Kafka's topic-name rules, defaults, config validation
and description, create-partitions growth, and config changes handed to the live logs.

The stack is the real metadata flow (LocalController -> __cluster_metadata -> MetadataLoader ->
MetadataCache and publishers, with the real ConfigHelper) over a temp dir; the replica manager is a
small recording publisher (the real one needs the storage layer; tests/replica and the interop tests
drive the whole stack).
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from kbroker.clock import wall_clock_ms
from kbroker.cluster.config_publisher import DynamicConfigPublisher
from kbroker.cluster.configs import AlterConfigOp, ConfigHelper, ConfigSource
from kbroker.config import KafkaConfig
from kbroker.controller.local_controller import LocalController
from kbroker.controller.metadata_log import ClusterMetadataLog
from kbroker.controller.replication_control import validate_topic_name
from kbroker.log.config import LogConfig
from kbroker.metadata.cache import MetadataCache
from kbroker.metadata.delta import MetadataDelta
from kbroker.metadata.image import MetadataImage
from kbroker.metadata.loader import LoaderManifest, MetadataLoader
from kbroker.metadata.views import TopicInfo
from kbroker.protocol.errors import ErrorCode, KafkaError
from tests.support.sync import SyncAdmin


class FakeLog:
    def __init__(self, config: LogConfig) -> None:
        self.config = config
        self.updates: list[LogConfig] = []

    def update_config(self, config: LogConfig) -> None:
        self.config = config
        self.updates.append(config)


class FakePartition:
    def __init__(self, log: FakeLog) -> None:
        self.log = log


class FakeFetcherManager:
    num_fetchers = 1

    async def resize(self, n: int) -> None:
        self.num_fetchers = n


class FakeReplicaManager:
    """A metadata publisher that hosts a FakeLog per local leader partition, as ReplicaManager.apply_delta
    hosts real logs; `fail_next_add` makes the next log creation fail (a failed disk)."""

    name = "FakeReplicaManager"

    def __init__(self, helper: ConfigHelper) -> None:
        self.helper = helper
        self.partitions: dict[tuple[str, int], FakePartition] = {}
        self.offline: set[tuple[str, int]] = set()
        self.fail_next_add = False
        # What the config publisher resizes on a num.replica.fetchers change (ReplicaFetcherManager).
        self.replica_fetcher_manager = FakeFetcherManager()

    def on_metadata_update(self, delta: MetadataDelta, image: MetadataImage, manifest: LoaderManifest) -> None:
        changes = delta.local_changes(1)
        for tp in changes.deletes:
            self.partitions.pop((tp.topic, tp.partition), None)
        for tp in sorted(changes.leaders):
            key = (tp.topic, tp.partition)
            if key in self.partitions:
                continue
            if self.fail_next_add:
                self.fail_next_add = False
                self.offline.add(key)
                continue
            cfg = self.helper.config_for_topic(tp.topic)
            assert cfg is not None
            self.partitions[key] = FakePartition(FakeLog(cfg))

    def get_partition(self, topic: str, p: int) -> FakePartition | None:
        return self.partitions.get((topic, p))


def make(tmp_path: Path, **overrides: str) -> tuple[SyncAdmin, MetadataCache, FakeReplicaManager]:
    """A controller stack over `tmp_path`; called again on the same path it replays what is there."""
    props = {"log.dirs": str(tmp_path / "data")}
    props.update(overrides)
    config = KafkaConfig(props)
    cache = MetadataCache(config.node_id)
    helper = ConfigHelper(config, cache)
    rm = FakeReplicaManager(helper)
    loader = MetadataLoader()
    loader.install_publishers([cache, rm, DynamicConfigPublisher(helper, rm)])  # type: ignore[arg-type]
    controller = LocalController(
        node_id=config.node_id, metadata_log=ClusterMetadataLog(tmp_path / "meta", wall_clock_ms), loader=loader,
        cache=cache, config_helper=helper, default_num_partitions=lambda: int(config["num.partitions"]),
        default_replication_factor=lambda: int(config["default.replication.factor"]),
        delete_topic_enable=lambda: bool(config["delete.topic.enable"]),
    )
    controller.load()
    return SyncAdmin(controller, helper), cache, rm


def _t(metadata: MetadataCache, name: str) -> TopicInfo:
    info = metadata.topic(name)
    assert info is not None, name
    return info


def code_of(excinfo: pytest.ExceptionInfo[KafkaError]) -> ErrorCode:
    return excinfo.value.error_code


# -- names -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["a", "A-b_c.d", "x" * 249, "__consumer_offsets", "0"])
def test_legal_topic_names(name: str) -> None:
    validate_topic_name(name)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        # Kafka 4.3's wording, checked against the reference broker.
        ("", "Topic name is invalid: the empty string is not allowed"),
        (".", "Topic name is invalid: '.' is not allowed"),
        ("..", "Topic name is invalid: '..' is not allowed"),
        ("x" * 250, f"Topic name is invalid: the length of '{'x' * 250}' is longer than the max allowed length 249"),
        ("a b", "Topic name is invalid: 'a b' contains one or more characters other than ASCII alphanumerics, "
                "'.', '_' and '-'"),
        ("a/b", "contains one or more characters other than ASCII alphanumerics"),
        ("caf\u00e9", "contains one or more characters other than ASCII alphanumerics"),
    ],
)
def test_illegal_topic_names(tmp_path: Path, name: str, message: str) -> None:
    tm, metadata, rm = make(tmp_path)
    with pytest.raises(KafkaError) as e:
        tm.create_topic(name)
    assert code_of(e) == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert message in str(e.value)
    assert metadata.topics() == [] and rm.partitions == {}


def test_existing_and_colliding_names(tmp_path: Path) -> None:
    tm, metadata, _ = make(tmp_path)
    tm.create_topic("a.b")
    with pytest.raises(KafkaError) as e:
        tm.create_topic("a.b")
    assert code_of(e) == ErrorCode.TOPIC_ALREADY_EXISTS
    assert str(e.value) == "Topic 'a.b' already exists."
    with pytest.raises(KafkaError) as e:
        tm.create_topic("a_b")
    assert code_of(e) == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert "collides with existing topic: a.b" in str(e.value)
    with pytest.raises(KafkaError) as e:
        tm.create_topic("__cluster_metadata")
    assert code_of(e) == ErrorCode.INVALID_REQUEST


# -- defaults, partitions, replication factor ----------------------------------------------------------


def test_defaults_come_from_broker_config(tmp_path: Path) -> None:
    tm, metadata, rm = make(tmp_path, **{"num.partitions": "3"})
    info = tm.create_topic("t")
    assert (info.num_partitions, info.replication_factor) == (3, 1)
    assert metadata.topic("t") == info
    assert sorted(rm.partitions) == [("t", 0), ("t", 1), ("t", 2)]
    assert info.topic_id.int != 0 and info.topic_id.bytes[0] >> 2 != 62
    assert not info.is_internal
    assert tm.create_topic("__consumer_offsets", 2).is_internal
    # Kafka 4.3's Topic.isInternal: the three coordinator topics (share groups' too, KIP-932).
    assert tm.create_topic("__transaction_state", 1).is_internal
    assert tm.create_topic("__share_group_state", 1).is_internal
    assert not tm.create_topic("_consumer_offsets", 1).is_internal


@pytest.mark.parametrize(
    ("partitions", "rf", "code", "message"),
    [
        (0, 1, ErrorCode.INVALID_PARTITIONS, "Number of partitions was set to an invalid non-positive value."),
        (-2, 1, ErrorCode.INVALID_PARTITIONS, "Number of partitions was set to an invalid non-positive value."),
        (1, 0, ErrorCode.INVALID_REPLICATION_FACTOR,
         "Replication factor must be larger than 0, or -1 to use the default value."),
        (1, -5, ErrorCode.INVALID_REPLICATION_FACTOR,
         "Replication factor must be larger than 0, or -1 to use the default value."),
        (1, 3, ErrorCode.INVALID_REPLICATION_FACTOR,
         "Unable to replicate the partition 3 time(s): The target replication factor of 3 cannot be reached "
         "because only 1 broker(s) are registered or some brokers have all their log directories cordoned."),
        # Kafka checks the replication factor before the partition count.
        (0, 0, ErrorCode.INVALID_REPLICATION_FACTOR,
         "Replication factor must be larger than 0, or -1 to use the default value."),
    ],
)
def test_bad_counts(tmp_path: Path, partitions: int, rf: int, code: ErrorCode, message: str) -> None:
    tm, metadata, _ = make(tmp_path)
    with pytest.raises(KafkaError) as e:
        tm.create_topic("t", partitions, rf)
    assert code_of(e) == code
    assert str(e.value) == message
    assert metadata.topic("t") is None


def test_manual_assignments(tmp_path: Path) -> None:
    tm, _, rm = make(tmp_path)
    info = tm.create_topic("m", assignments={0: [1], 1: [1]})
    assert (info.num_partitions, info.replication_factor) == (2, 1)
    assert ("m", 1) in rm.partitions
    cases: list[tuple[dict[int, list[int]], int, int, ErrorCode, str]] = [
        ({0: [1]}, 2, -1, ErrorCode.INVALID_REQUEST, "numPartitions was not set to -1"),
        ({0: [1]}, -1, 1, ErrorCode.INVALID_REQUEST, "replication factor was not set to -1"),
        ({0: [2]}, -1, -1, ErrorCode.INVALID_REPLICA_ASSIGNMENT, "includes broker 2, but no such broker"),
        ({0: [1, 1]}, -1, -1, ErrorCode.INVALID_REPLICA_ASSIGNMENT, "the broker 1 more than once"),
        ({0: []}, -1, -1, ErrorCode.INVALID_REPLICA_ASSIGNMENT, "empty replica list"),
        ({1: [1]}, -1, -1, ErrorCode.INVALID_REPLICA_ASSIGNMENT,
         "partitions should be a consecutive 0-based integer sequence"),
    ]
    for assignments, n, rf, code, message in cases:
        with pytest.raises(KafkaError) as e:
            tm.create_topic("m2", n, rf, assignments=assignments)
        assert code_of(e) == code, assignments
        assert message in str(e.value)


def test_validate_only_creates_nothing(tmp_path: Path) -> None:
    tm, metadata, rm = make(tmp_path)
    info = tm.create_topic("v", 4, 1, {"retention.ms": "1000"}, validate_only=True)
    assert info.num_partitions == 4 and info.configs == {"retention.ms": "1000"}
    assert metadata.topic("v") is None and rm.partitions == {}
    tm.create_topic("v")  # the name is still free


def test_failed_log_creation_leaves_the_partition_offline(tmp_path: Path) -> None:
    """Kafka's behaviour: the topic is committed by the controller; a broker that cannot create a log
    (a failed disk) leaves that partition offline and hosts the others. (Before the controller,
    kbroker undid the whole creation.)"""
    tm, metadata, rm = make(tmp_path)
    rm.fail_next_add = True
    tm.create_topic("t", 2)
    assert _t(metadata, "t").num_partitions == 2
    assert rm.offline == {("t", 0)} and sorted(rm.partitions) == [("t", 1)]
    with pytest.raises(KafkaError) as e:
        tm.create_topic("t", 2)
    assert code_of(e) == ErrorCode.TOPIC_ALREADY_EXISTS


# -- configs at creation ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("configs", "message"),
    [
        ({"no.such.config": "1"}, "Unknown topic config name: no.such.config"),
        ({"retention.ms": "abc"}, "Invalid value abc for configuration retention.ms: Not a number of type LONG"),
        ({"max.message.bytes": "9999999999"}, "Invalid value 9999999999 for configuration max.message.bytes: "
                                              "Not a number of type INT"),
        ({"preallocate": "yes"}, "Invalid value yes for configuration preallocate: Expected value to be either "
                                 "true or false"),
        ({"cleanup.policy": "compact,shred"}, "Invalid value shred for configuration cleanup.policy: "
                                              "String must be one of: compact, delete"),
        ({"segment.bytes": "100"}, "segment.bytes"),
        ({"retention.ms": None}, "Null value not supported for topic configs: retention.ms"),
        ({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"}, "min.compaction.lag.ms"),
        ({"remote.storage.enable": "true"}, "Tiered Storage functionality is disabled"),
    ],
)
def test_invalid_configs(tmp_path: Path, configs: dict[str, str | None], message: str) -> None:
    tm, metadata, _ = make(tmp_path)
    with pytest.raises(KafkaError) as e:
        tm.create_topic("t", 1, 1, configs)
    assert code_of(e) == ErrorCode.INVALID_CONFIG
    assert message in str(e.value)
    assert metadata.topic("t") is None


def test_configs_reach_the_log(tmp_path: Path) -> None:
    tm, metadata, rm = make(tmp_path)
    tm.create_topic("t", 1, 1, {"retention.ms": "1234", "cleanup.policy": "compact,delete"})
    log = rm.partitions[("t", 0)].log
    assert log.config.retention_ms == 1234 and log.config.compact and log.config.delete
    assert _t(metadata, "t").configs == {"retention.ms": "1234", "cleanup.policy": "compact,delete"}


# -- describe ---------------------------------------------------------------------------------------------


def test_describe_sources_and_synonyms(tmp_path: Path) -> None:
    tm, _, _ = make(tmp_path, **{"log.retention.hours": "1"})
    tm.create_topic("t", 1, 1, {"max.message.bytes": "2048"})
    entries = {e.name: e for e in tm.describe_topic_configs("t", include_synonyms=True)}
    assert "internal.segment.bytes" not in entries
    assert len(entries) >= 30
    mmb = entries["max.message.bytes"]
    assert (mmb.value, mmb.source, mmb.is_default) == ("2048", ConfigSource.DYNAMIC_TOPIC_CONFIG, False)
    assert [(s.name, s.source) for s in mmb.synonyms] == [
        ("max.message.bytes", ConfigSource.DYNAMIC_TOPIC_CONFIG),
        ("message.max.bytes", ConfigSource.DEFAULT_CONFIG),
    ]
    ret = entries["retention.ms"]
    # log.retention.hours=1 set statically: the value is converted to ms, but Kafka lists synonyms only
    # from the family's primary key (log.retention.ms, set nowhere), so none, and the source is DEFAULT.
    assert (ret.value, ret.source, ret.synonyms) == ("3600000", ConfigSource.DEFAULT_CONFIG, [])
    seg = entries["segment.bytes"]
    assert (seg.value, seg.source, seg.is_default) == ("1073741824", ConfigSource.DEFAULT_CONFIG, True)
    remote = entries["remote.storage.enable"]
    assert (remote.value, remote.source, remote.synonyms) == ("false", ConfigSource.DEFAULT_CONFIG, [])
    assert all(not e.read_only and not e.sensitive for e in entries.values())
    # Without synonyms asked for, none are sent; a key filter keeps only the named configs.
    assert all(e.synonyms == [] for e in tm.describe_topic_configs("t"))
    assert [e.name for e in tm.describe_topic_configs("t", keys=["retention.ms", "nope"])] == ["retention.ms"]


# -- create partitions ------------------------------------------------------------------------------------


def test_create_partitions_only_grows(tmp_path: Path) -> None:
    tm, metadata, rm = make(tmp_path)
    tm.create_topic("g", 2)
    with pytest.raises(KafkaError) as e:
        tm.create_partitions("g", 2)
    assert code_of(e) == ErrorCode.INVALID_PARTITIONS
    assert str(e.value) == "Topic already has 2 partition(s)."
    with pytest.raises(KafkaError) as e:
        tm.create_partitions("g", 1)
    assert code_of(e) == ErrorCode.INVALID_PARTITIONS
    assert "would not be an increase" in str(e.value)
    with pytest.raises(KafkaError) as e:
        tm.create_partitions("nope", 3)
    assert code_of(e) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert tm.create_partitions("g", 5, validate_only=True).num_partitions == 5
    assert _t(metadata, "g").num_partitions == 2 and ("g", 2) not in rm.partitions
    with pytest.raises(KafkaError) as e:
        tm.create_partitions("g", 4, assignments=[[1]])
    assert code_of(e) == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    grown = tm.create_partitions("g", 4, assignments=[[1], [1]])
    assert grown.num_partitions == 4 and _t(metadata, "g").num_partitions == 4
    assert sorted(k[1] for k in rm.partitions if k[0] == "g") == [0, 1, 2, 3]
    assert _t(metadata, "g").topic_id == grown.topic_id


# -- delete -------------------------------------------------------------------------------------------------


def test_delete(tmp_path: Path) -> None:
    tm, metadata, rm = make(tmp_path)
    info = tm.create_topic("d", 2)
    tm.delete_topic("d")
    assert metadata.topic("d") is None and rm.partitions == {}
    with pytest.raises(KafkaError) as e:
        tm.delete_topic("d")
    assert code_of(e) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    with pytest.raises(KafkaError) as e:
        tm.delete_topic_by_id(info.topic_id)
    assert code_of(e) == ErrorCode.UNKNOWN_TOPIC_ID
    again = tm.create_topic("d")
    assert again.topic_id != info.topic_id
    tm.delete_topic_by_id(again.topic_id)
    assert metadata.topic_by_id(again.topic_id) is None
    tm2, _, _ = make(tmp_path / "x", **{"delete.topic.enable": "false"})
    tm2.create_topic("k")
    with pytest.raises(KafkaError) as e:
        tm2.delete_topic("k")
    assert code_of(e) == ErrorCode.TOPIC_DELETION_DISABLED


# -- altering configs on live logs ---------------------------------------------------------------------


def test_incremental_alter_applies_to_live_logs(tmp_path: Path) -> None:
    tm, metadata, rm = make(tmp_path)
    tm.create_topic("c", 2)
    logs = [rm.partitions[("c", p)].log for p in range(2)]
    tm.incremental_alter_topic_configs("c", [
        ("retention.ms", AlterConfigOp.SET, "5000"),
        ("segment.bytes", AlterConfigOp.SET, "1048576"),
        ("max.message.bytes", AlterConfigOp.SET, "1000"),
        ("cleanup.policy", AlterConfigOp.SET, "compact"),
    ])
    for log in logs:
        assert (log.config.retention_ms, log.config.segment_bytes, log.config.max_message_bytes) == (5000, 1048576, 1000)
        assert log.config.compact and not log.config.delete
    assert _t(metadata, "c").configs["retention.ms"] == "5000"
    tm.incremental_alter_topic_configs("c", [("cleanup.policy", AlterConfigOp.APPEND, "delete"),
                                             ("retention.ms", AlterConfigOp.DELETE, None)])
    assert logs[0].config.cleanup_policy == "compact,delete"
    assert logs[0].config.retention_ms == 7 * 24 * 3600 * 1000
    assert "retention.ms" not in _t(metadata, "c").configs
    tm.incremental_alter_topic_configs("c", [("cleanup.policy", AlterConfigOp.SUBTRACT, "compact")])
    assert logs[1].config.cleanup_policy == "delete"
    before = len(logs[0].updates)
    tm.incremental_alter_topic_configs("c", [("retention.ms", AlterConfigOp.SET, "1")], validate_only=True)
    assert len(logs[0].updates) == before and "retention.ms" not in _t(metadata, "c").configs


def test_incremental_alter_errors(tmp_path: Path) -> None:
    tm, metadata, rm = make(tmp_path)
    tm.create_topic("c")
    cases: list[tuple[str, list[tuple[str, int, str | None]], ErrorCode, str]] = [
        ("missing", [("retention.ms", 0, "1")], ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "does not exist"),
        ("c", [("retention.ms", 0, "x")], ErrorCode.INVALID_CONFIG, "retention.ms"),
        ("c", [("bogus", 0, "1")], ErrorCode.INVALID_CONFIG, "Unknown topic config name: bogus"),
        ("c", [("retention.ms", 2, "1")], ErrorCode.INVALID_CONFIG, "because its type is not LIST"),
        ("c", [("retention.ms", 9, "1")], ErrorCode.INVALID_REQUEST, "Unknown alter configs op type 9"),
        ("c", [("retention.ms", 0, None)], ErrorCode.INVALID_CONFIG, "Null value not supported"),
    ]
    for topic, ops, code, message in cases:
        with pytest.raises(KafkaError) as e:
            tm.incremental_alter_topic_configs(topic, ops)
        assert code_of(e) == code, ops
        assert message in str(e.value)
    assert _t(metadata, "c").configs == {}
    assert rm.partitions[("c", 0)].log.updates == []


def test_legacy_alter_replaces_all_overrides(tmp_path: Path) -> None:
    tm, metadata, rm = make(tmp_path)
    tm.create_topic("l", 1, 1, {"retention.ms": "100", "segment.ms": "200"})
    tm.alter_topic_configs("l", {"segment.ms": "300"})
    assert _t(metadata, "l").configs == {"segment.ms": "300"}
    cfg = rm.partitions[("l", 0)].log.config
    assert cfg.segment_ms == 300 and cfg.retention_ms == 7 * 24 * 3600 * 1000


def test_dynamic_broker_config_reaches_topics_without_override(tmp_path: Path) -> None:
    tm, metadata, rm = make(tmp_path)
    tm.create_topic("plain")
    tm.create_topic("own", 1, 1, {"retention.ms": "42"})
    tm.alter_broker_configs(False, {"log.retention.ms": "9000"})
    assert rm.partitions[("plain", 0)].log.config.retention_ms == 9000
    assert rm.partitions[("own", 0)].log.config.retention_ms == 42
    entry = {e.name: e for e in tm.describe_topic_configs("plain", include_synonyms=True)}["retention.ms"]
    assert (entry.value, entry.source) == ("9000", ConfigSource.DYNAMIC_BROKER_CONFIG)
    assert [(s.name, s.source) for s in entry.synonyms] == [
        ("log.retention.ms", ConfigSource.DYNAMIC_BROKER_CONFIG), ("log.retention.hours", ConfigSource.DEFAULT_CONFIG)]
    tm.alter_broker_configs(True, {"log.retention.ms": "7000"})
    assert tm.dynamic_broker_configs(True) == {"log.retention.ms": "7000"}
    assert tm.dynamic_broker_configs(False) == {"log.retention.ms": "9000"}
    tm.alter_broker_configs(False, {"log.retention.ms": None})
    assert rm.partitions[("plain", 0)].log.config.retention_ms == 7000
    # Persisted in __cluster_metadata: a new stack replaying the same log sees the same levels.
    _, again, _ = make(tmp_path)
    assert again.broker_configs == metadata.broker_configs
    # Kafka's refusals, checked against the reference broker: INVALID_REQUEST, keys as a Java list.
    with pytest.raises(KafkaError) as e:
        tm.alter_broker_configs(False, {"log.dirs": "/tmp/x"})
    assert code_of(e) == ErrorCode.INVALID_REQUEST
    assert str(e.value) == "Cannot update these configs dynamically: [log.dirs]"
    with pytest.raises(KafkaError) as e:
        tm.alter_broker_configs(False, {"log.retention.ms": "soon"})
    assert code_of(e) == ErrorCode.INVALID_REQUEST
    assert str(e.value) == "Invalid value soon for configuration log.retention.ms: Not a number of type LONG"
    # A key the broker does not know is kept as a custom config, as Kafka does.
    tm.alter_broker_configs(False, {"custom.key": "1"})
    assert tm.dynamic_broker_configs(False)["custom.key"] == "1"


def test_metadata_image_survives_reload(tmp_path: Path) -> None:
    tm, metadata, _ = make(tmp_path)
    info = tm.create_topic("p", 3, 1, {"retention.ms": "5"})
    _, again, _ = make(tmp_path)
    loaded = again.topic("p")
    assert loaded is not None and loaded.topic_id == info.topic_id and loaded.configs == {"retention.ms": "5"}
    assert isinstance(loaded.topic_id, uuid.UUID)


