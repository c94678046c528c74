"""The metadata flow on one node: request -> LocalController -> records in `__cluster_metadata` ->
MetadataImage -> publishers (MetadataCache, ReplicaManager.apply_delta, configs, group coordinator).

Real storage in a temp dir, wired by the broker's own builder. Shows: the image replayed from the log
equals the image the admin operations built; each operation's delta says what changed; the replica
manager becomes leader with the image's leader epoch, becomes follower, or stops and deletes; a
failed append commits nothing and changes nothing; Kafka 4.3.1's kafka-dump-log decodes the log.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from kbroker.api.context import BrokerServices
from kbroker.config import KafkaConfig
from kbroker.log.checkpoints import uuid_to_base64
from kbroker.log.errors import KafkaStorageError
from kbroker.metadata.delta import MetadataDelta
from kbroker.metadata.image import ConfigResource, ConfigResourceType, MetadataImage, TopicPartition
from kbroker.metadata.loader import LoaderManifest
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.metadata_records import PartitionChangeRecord, PartitionRecord
from kbroker.protocol.records import SimpleRecord, build_batch
from kbroker.services import build_services, shutdown_services
from tests.support.sync import SyncAdmin, run_now

LIB = Path(__file__).resolve().parents[2] / ".cache" / "java" / "lib"


class Recorder:
    """A publisher that keeps every delta it is told of."""

    name = "Recorder"

    def __init__(self) -> None:
        self.deltas: list[MetadataDelta] = []

    def on_metadata_update(self, delta: MetadataDelta, image: MetadataImage, manifest: LoaderManifest) -> None:
        self.deltas.append(delta)


def _config(root: Path) -> KafkaConfig:
    return KafkaConfig({"log.dirs": str(root / "data"), "node.id": "1"})


@pytest.fixture
def services(tmp_path: Path) -> Iterator[BrokerServices]:
    s = build_services(_config(tmp_path))
    yield s
    shutdown_services(s)


def _recorder(services: BrokerServices) -> Recorder:
    rec = Recorder()
    services.controller.loader.install_publishers([rec])  # type: ignore[attr-defined]
    rec.deltas.clear()  # installing shows the current image once
    return rec


def _admin_history(admin: SyncAdmin) -> None:
    admin.create_topic("a", 3, configs={"retention.ms": "1000"})
    admin.create_topic("b", 1)
    admin.create_partitions("b", 4)
    admin.incremental_alter_topic_configs("a", [("retention.ms", 0, "2000"), ("cleanup.policy", 0, "compact")])
    admin.alter_broker_configs(False, {"log.retention.ms": "5000"})
    admin.alter_broker_configs(True, {"log.cleaner.delete.retention.ms": "7000"})
    admin.create_topic("gone", 2)
    admin.delete_topic("gone")
    run_now(admin.controller.allocate_producer_ids(1, 0))


def test_replayed_image_equals_the_image_the_operations_built(tmp_path: Path) -> None:
    s = build_services(_config(tmp_path))
    _admin_history(SyncAdmin(s.controller, s.configs))
    built = s.metadata.image
    shutdown_services(s)
    again = build_services(_config(tmp_path))
    try:
        assert again.metadata.image == built
        # The metadata log is the controller's, never one of the log manager's partitions (no
        # retention, checkpoints or cleaning for it).
        assert again.log_manager.get_log("__cluster_metadata", 0) is None
        checkpoint = (tmp_path / "data" / "recovery-point-offset-checkpoint").read_text()
        assert "__cluster_metadata" not in checkpoint
        assert again.metadata.topic("a") is not None and again.metadata.topic("gone") is None
        assert again.metadata.view.next_producer_id == 1000
        # The replay hosted the partitions again, with the topics' configs.
        for p in range(4):
            part = again.replica_manager.get_partition("b", p)
            assert part is not None
        a0 = again.replica_manager.get_partition("a", 0)
        assert a0 is not None and a0.log.config.retention_ms == 2000 and a0.log.config.compact
    finally:
        shutdown_services(again)


def test_each_operation_publishes_its_delta(services: BrokerServices) -> None:
    admin = SyncAdmin(services.controller, services.configs)
    rec = _recorder(services)

    admin.create_topic("t", 2, configs={"retention.ms": "1000"})
    d = rec.deltas[-1]
    assert d.topics_delta is not None and d.topics_delta.topic_was_created("t")
    assert sorted(d.local_changes(1).leaders) == [TopicPartition("t", 0), TopicPartition("t", 1)]
    assert d.changed_configs() == {ConfigResource(ConfigResourceType.TOPIC, "t"): {"retention.ms": "1000"}}

    admin.create_partitions("t", 3)
    d = rec.deltas[-1]
    assert d.topics_delta is not None and not d.topics_delta.topic_was_created("t")
    assert list(d.local_changes(1).leaders) == [TopicPartition("t", 2)]

    admin.incremental_alter_topic_configs("t", [("retention.ms", 1, None)])  # DELETE
    d = rec.deltas[-1]
    assert d.topics_delta is None
    assert d.changed_configs() == {ConfigResource(ConfigResourceType.TOPIC, "t"): {"retention.ms": None}}

    admin.delete_topic("t")
    d = rec.deltas[-1]
    assert d.topics_delta is not None and d.topics_delta.topic_was_deleted("t")
    assert d.local_changes(1).deletes == {TopicPartition("t", p) for p in range(3)}
    assert services.metadata.topic("t") is None


def _replay(services: BrokerServices, record: object) -> None:
    """Commit one record through the controller's log and loader, as the Raft quorum will."""
    controller = services.controller
    controller._commit([record])  # type: ignore[attr-defined]


def test_apply_delta_leader_epoch_follower_and_delete(services: BrokerServices) -> None:
    admin = SyncAdmin(services.controller, services.configs)
    info = admin.create_topic("t", 1)
    rm = services.replica_manager
    part = rm.get_partition("t", 0)
    assert part is not None and part.leader_epoch == 0

    # A new leader election (the same node re-elected): the leader epoch moves to 1, and the next
    # produce is stamped with it in the log's leader-epoch cache.
    _replay(services, PartitionChangeRecord(topic_id=info.topic_id, partition_id=0, leader=1))
    part = rm.get_partition("t", 0)
    assert part is not None and part.leader_epoch == 1 and part.partition_epoch == 1
    rm.append_records(1000, 1, False, {("t", 0): memoryview(bytearray(build_batch([SimpleRecord(b"x")])))})
    assert part.log.leader_epoch_cache.latest_epoch == 1

    # Another broker (2) becomes leader and this one follows: no longer served here, log kept.
    _replay(services, PartitionChangeRecord(topic_id=info.topic_id, partition_id=0, replicas=[2, 1], isr=[2, 1],
                                            leader=2))
    assert rm.get_partition("t", 0) is None and rm.followers[("t", 0)] == 2
    assert rm.missing_partition_error("t", 0) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert services.log_manager.get_log("t", 0) is not None

    # Moved off this broker entirely: stopped and the log deleted.
    _replay(services, PartitionChangeRecord(topic_id=info.topic_id, partition_id=0, replicas=[2], isr=[2]))
    assert ("t", 0) not in rm.followers and services.log_manager.get_log("t", 0) is None

    # A partition registered with another leader from the start is a follower here.
    _replay(services, PartitionRecord(topic_id=info.topic_id, partition_id=1, replicas=[3, 1], isr=[3, 1],
                                      leader=3, leader_epoch=4, partition_epoch=0))
    assert rm.followers[("t", 1)] == 3 and rm.get_partition("t", 1) is None


def test_failed_append_commits_nothing(services: BrokerServices, monkeypatch: pytest.MonkeyPatch) -> None:
    admin = SyncAdmin(services.controller, services.configs)
    metadata_log = services.controller.metadata_log  # type: ignore[attr-defined]
    end = metadata_log.end_offset
    image = services.metadata.image

    def disk_full(records: object) -> object:
        raise KafkaStorageError("No space left on device")

    monkeypatch.setattr(metadata_log, "append", disk_full)
    with pytest.raises(KafkaError) as e:
        admin.create_topic("t", 1)
    assert e.value.error_code == ErrorCode.KAFKA_STORAGE_ERROR
    assert services.metadata.image is image and services.metadata.topic("t") is None
    assert services.replica_manager.get_partition("t", 0) is None
    monkeypatch.undo()
    assert metadata_log.end_offset == end
    admin.create_topic("t", 1)  # the name is still free
    assert services.replica_manager.get_partition("t", 0) is not None


def test_validate_only_writes_nothing(services: BrokerServices) -> None:
    admin = SyncAdmin(services.controller, services.configs)
    end = services.controller.metadata_log.end_offset  # type: ignore[attr-defined]
    info = admin.create_topic("v", 4, configs={"retention.ms": "10"}, validate_only=True)
    assert info.num_partitions == 4 and services.metadata.topic("v") is None
    assert services.controller.metadata_log.end_offset == end  # type: ignore[attr-defined]


@pytest.mark.java
@pytest.mark.skipif(shutil.which("java") is None, reason="java is not installed")
@pytest.mark.skipif(not list(LIB.glob("kafka-tools-*.jar")), reason="Kafka jars not resolved: run scripts/java-deps.sh")
def test_kafka_dump_log_decodes_the_metadata_log(tmp_path: Path) -> None:
    s = build_services(_config(tmp_path))
    try:
        admin = SyncAdmin(s.controller, s.configs)
        info = admin.create_topic("orders", 2, configs={"retention.ms": "1000"})
        admin.alter_broker_configs(True, {"log.retention.ms": "5000"})
        admin.delete_topic("orders")
        run_now(s.controller.allocate_producer_ids(1, 0))
    finally:
        shutdown_services(s)
    segment = tmp_path / "data" / "__cluster_metadata-0" / "00000000000000000000.log"
    proc = subprocess.run(["java", "-cp", f"{LIB}/*", "org.apache.kafka.tools.DumpLogSegments",
                           "--cluster-metadata-decoder", "--files", str(segment)],
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "Exception" not in out + proc.stderr, (out + proc.stderr)[-3000:]
    payloads = [line.split("payload: ", 1)[1] for line in out.splitlines() if "payload: " in line]
    types = [p.split('"type":"', 1)[1].split('"', 1)[0] for p in payloads]
    # metadata.version, eligible.leader.replicas.version (1: KIP-966), group.version and transaction.version
    # (2: KIP-890 part 2), as Kafka 4.3 bootstraps.
    assert types[:4] == ["FEATURE_LEVEL_RECORD"] * 4
    assert '"name":"eligible.leader.replicas.version","featureLevel":1' in payloads[1]
    assert '"name":"transaction.version","featureLevel":2' in payloads[3]
    assert types[4:] == ["TOPIC_RECORD", "CONFIG_RECORD", "PARTITION_RECORD", "PARTITION_RECORD", "CONFIG_RECORD",
                         "REMOVE_TOPIC_RECORD", "PRODUCER_IDS_RECORD"], types
    assert '"name":"orders"' in payloads[4] and '"featureLevel":30' in payloads[0]
    assert '"resourceType":4,"resourceName":"","name":"log.retention.ms","value":"5000"' in payloads[8]
    assert '"nextProducerId":1000' in payloads[-1]
    # Every batch is valid and stamped with the single voter's epoch.
    batches = [line for line in out.splitlines() if line.startswith("baseOffset:")]
    assert batches and all("isvalid: true" in b and "partitionLeaderEpoch: 1" in b for b in batches)
    assert f'"topicId":"{uuid_to_base64(info.topic_id)}"' in payloads[4]


def test_batch_written_but_not_durable_is_cut_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fsync of a metadata batch fails after its bytes were written: the request fails with
    KAFKA_STORAGE_ERROR, the batch is cut off the log, and a restart does not replay it."""
    s = build_services(_config(tmp_path))
    try:
        admin = SyncAdmin(s.controller, s.configs)
        metadata_log = s.controller.metadata_log  # type: ignore[attr-defined]
        end = metadata_log.end_offset

        def fsync_fails(*args: object, **kwargs: object) -> None:
            raise KafkaStorageError("Input/output error")

        monkeypatch.setattr(metadata_log.log, "flush", fsync_fails)
        with pytest.raises(KafkaError) as e:
            admin.create_topic("t", 1)
        assert e.value.error_code == ErrorCode.KAFKA_STORAGE_ERROR
        monkeypatch.undo()
        assert metadata_log.end_offset == end and s.metadata.topic("t") is None
    finally:
        shutdown_services(s)
    again = build_services(_config(tmp_path))
    try:
        assert again.metadata.topic("t") is None  # the failed batch is not replayed
        SyncAdmin(again.controller, again.configs).create_topic("t", 1)
        assert again.metadata.topic("t") is not None
    finally:
        shutdown_services(again)


def test_batch_that_cannot_be_cut_off_is_fatal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    s = build_services(_config(tmp_path))
    fatal: list[str] = []
    try:
        metadata_log = s.controller.metadata_log  # type: ignore[attr-defined]
        metadata_log.on_fatal = fatal.append

        def fails(*args: object, **kwargs: object) -> None:
            raise KafkaStorageError("Input/output error")

        monkeypatch.setattr(metadata_log.log, "flush", fails)
        monkeypatch.setattr(metadata_log.log, "truncate_to", fails)
        with pytest.raises(KafkaError):
            SyncAdmin(s.controller, s.configs).create_topic("t", 1)
        assert len(fatal) == 1 and "cannot be cut back" in fatal[0]
    finally:
        monkeypatch.undo()
        shutdown_services(s)
