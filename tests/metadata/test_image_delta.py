"""MetadataImage / MetadataDelta: replaying Kafka's metadata records, Kafka's semantics for each.

Replaying a log in one delta gives the image built record by record; deltas report created, deleted
and changed topics, partition additions, config changes, leader/ISR changes; ``local_changes`` tells
one broker what to lead, follow and delete (Kafka's TopicDelta.localChanges).
"""

from __future__ import annotations

import pytest

from kbroker.metadata import (
    BrokerRegistration,
    ConfigResource,
    ConfigResourceType,
    DirectoryId,
    Endpoint,
    InvalidReplicaDirectoriesError,
    LeaderRecoveryState,
    MetadataDelta,
    MetadataImage,
    MetadataProvenance,
    MetadataReplayError,
    PartitionRegistration,
    TopicPartition,
    image_records,
)
from kbroker.protocol.metadata_records.serde import decode_metadata_record, encode_metadata_record
from tests.metadata.records import (
    BAR,
    BAZ,
    DIR_A,
    DIR_B,
    FOO,
    BrokerRegistrationChangeRecord,
    FenceBrokerRecord,
    NoOpRecord,
    RemoveTopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
    broker,
    change,
    config,
    feature,
    partition,
    producer_ids,
    topic,
)

TOPIC = int(ConfigResourceType.TOPIC)
BROKER = int(ConfigResourceType.BROKER)


def replay(image: MetadataImage, *records: object) -> MetadataDelta:
    delta = MetadataDelta(image)
    delta.replay_all(records)
    return delta


def build(*records: object) -> MetadataImage:
    return replay(MetadataImage.EMPTY, *records).apply()


LOG: list[object] = [
    feature("metadata.version", 27),
    feature("kraft.version", 1),
    feature("transaction.version", 2),
    feature("group.version", 1),
    broker(1),
    broker(2, rack="r2"),
    broker(3),
    UnfenceBrokerRecord(id=1, epoch=10),
    UnfenceBrokerRecord(id=2, epoch=10),
    UnfenceBrokerRecord(id=3, epoch=10),
    topic("foo", FOO),
    partition(FOO, 0, [1, 2, 3]),
    partition(FOO, 1, [2, 3, 1]),
    config(TOPIC, "foo", "cleanup.policy", "compact"),
    topic("bar", BAR),
    partition(BAR, 0, [3, 1]),
    config(TOPIC, "bar", "retention.ms", "1000"),
    config(BROKER, "", "log.retention.ms", "5000"),
    config(BROKER, "2", "log.cleaner.threads", "2"),
    NoOpRecord(),
    change(FOO, 0, isr=[1, 2]),
    change(FOO, 1, leader=3, isr=[3, 1]),
    partition(FOO, 2, [3, 1, 2]),
    producer_ids(1000),
    RemoveTopicRecord(topic_id=BAR),
    config(TOPIC, "foo", "retention.ms", "60000"),
    config(TOPIC, "foo", "cleanup.policy", None),
    FenceBrokerRecord(id=3, epoch=10),
    feature("transaction.version", 0),
    producer_ids(2000),
]


def test_replay_in_one_delta_equals_record_by_record() -> None:
    whole = build(*LOG)
    step = MetadataImage.EMPTY
    for r in LOG:
        step = replay(step, r).apply()
    assert whole == step


def test_the_replayed_image() -> None:
    image = build(*LOG)
    assert image.features.metadata_version == 27
    # kraft.version belongs to the raft layer: Kafka's FeaturesDelta ignores it too.
    assert dict(image.features.finalized_versions) == {"group.version": 1}
    assert sorted(image.cluster.brokers) == [1, 2, 3]
    assert [b.fenced for _, b in sorted(image.cluster.brokers.items())] == [False, False, True]
    b2 = image.cluster.broker(2)
    assert b2 is not None and b2.rack == "r2" and b2.endpoint("PLAINTEXT") == Endpoint("PLAINTEXT", 0, "b2", 9092)
    assert image.topic("bar") is None and image.topic_by_id(BAR) is None
    foo = image.topic("foo")
    assert foo is not None and foo.id == FOO and image.topic_by_id(FOO) is foo
    assert sorted(foo.partitions) == [0, 1, 2]
    p0 = image.partition("foo", 0)
    assert p0 == PartitionRegistration(
        replicas=(1, 2, 3), isr=(1, 2), leader=1, leader_epoch=0, partition_epoch=1,
        directories=(DirectoryId.MIGRATING,) * 3,
    )  # fmt: skip
    p1 = image.partition("foo", 1)
    assert p1 is not None and (p1.leader, p1.leader_epoch, p1.partition_epoch, p1.isr) == (3, 1, 1, (3, 1))
    assert dict(image.topic_config("foo")) == {"retention.ms": "60000"}
    assert dict(image.topic_config("bar")) == {}  # removed with the topic
    assert ConfigResource(ConfigResourceType.TOPIC, "bar") not in image.configs.configs
    assert dict(image.cluster_broker_config()) == {"log.retention.ms": "5000"}
    assert dict(image.broker_config(2)) == {"log.cleaner.threads": "2"} and dict(image.broker_config(1)) == {}
    assert image.producer_ids.next_producer_id == 2000


def test_records_through_the_wire_format_replay_to_the_same_image() -> None:
    """Every record of the log encoded (Kafka's frame) and decoded replays to the same image."""
    decoded = [decode_metadata_record(encode_metadata_record(r)) for r in LOG]
    assert decoded == LOG
    assert build(*decoded) == build(*LOG)


def test_image_records_rebuild_the_image() -> None:
    image = replay(MetadataImage.EMPTY, *LOG).apply(MetadataProvenance(41, 3, 1234))
    rebuilt = replay(MetadataImage.EMPTY, *image_records(image)).apply(image.provenance)
    assert rebuilt == image


def test_images_are_immutable_and_shared() -> None:
    before = build(*LOG)
    delta = replay(before, config(BROKER, "", "log.retention.ms", "1"))
    after = delta.apply()
    assert dict(before.cluster_broker_config()) == {"log.retention.ms": "5000"}
    assert after.topics is before.topics and after.cluster is before.cluster  # unchanged parts are shared
    with pytest.raises(TypeError):
        after.topics.topics_by_name["x"] = after.topics.topics_by_name["foo"]  # type: ignore[index]
    with pytest.raises(AttributeError):
        after.provenance = MetadataProvenance.EMPTY  # type: ignore[misc]
    assert MetadataImage.EMPTY.is_empty() and not after.is_empty()


# -- topics ---------------------------------------------------------------------------------------------


def test_create_topic_delta() -> None:
    base = build(broker(1), broker(2))
    delta = replay(base, topic("foo", FOO), partition(FOO, 0, [1, 2]), partition(FOO, 1, [2, 1]))
    td = delta.topics_delta
    assert td is not None
    assert td.created_topic_ids() == {FOO} and td.topic_was_created("foo") and not td.topic_was_deleted("foo")
    foo = td.changed_topic(FOO)
    assert foo is not None and foo.new_partitions() == [0, 1] and foo.has_partitions_with_assignment_changes()
    assert delta.configs_delta is None and delta.cluster_delta is None
    image = delta.apply()
    assert image.partition("foo", 1) is not None


def test_delete_topic_delta_drops_its_configs() -> None:
    base = build(topic("foo", FOO), partition(FOO, 0, [1]), config(TOPIC, "foo", "retention.ms", "1"))
    delta = replay(base, RemoveTopicRecord(topic_id=FOO))
    td = delta.topics_delta
    assert td is not None and td.deleted_topic_ids == {FOO} and td.topic_was_deleted("foo")
    assert [t.name for t in td.deleted_topics()] == ["foo"]
    assert delta.changed_configs() == {ConfigResource(ConfigResourceType.TOPIC, "foo"): {"retention.ms": None}}
    image = delta.apply()
    assert image.topic("foo") is None and image.configs.is_empty()


def test_topic_created_and_removed_in_one_delta_leaves_no_trace() -> None:
    delta = replay(MetadataImage.EMPTY, topic("foo", FOO), partition(FOO, 0, [1]), RemoveTopicRecord(topic_id=FOO))
    td = delta.topics_delta
    assert td is not None and not td.created_topics and not td.deleted_topic_ids and not td.changed_topics
    assert delta.apply().topics.is_empty()


def test_topic_deleted_and_recreated_under_the_same_name() -> None:
    base = build(topic("foo", FOO), partition(FOO, 0, [1]))
    delta = replay(base, RemoveTopicRecord(topic_id=FOO), topic("foo", BAZ), partition(BAZ, 0, [1]))
    td = delta.topics_delta
    assert td is not None and td.deleted_topic_ids == {FOO} and td.created_topics == {"foo": BAZ}
    image = delta.apply()
    foo = image.topic("foo")
    assert foo is not None and foo.id == BAZ and image.topic_by_id(FOO) is None


def test_add_partitions_delta() -> None:
    base = build(topic("foo", FOO), partition(FOO, 0, [1, 2]))
    delta = replay(base, partition(FOO, 1, [2, 1]), partition(FOO, 2, [1, 2]))
    td = delta.topics_delta
    assert td is not None and not td.created_topics
    foo = td.changed_topic(FOO)
    assert foo is not None and foo.new_partitions() == [1, 2]
    assert sorted(delta.apply().topics.get_topic(FOO).partitions) == [0, 1, 2]  # type: ignore[union-attr]


def test_config_change_delta() -> None:
    base = build(config(TOPIC, "foo", "a", "1"), config(TOPIC, "foo", "b", "2"), config(BROKER, "", "x", "1"))
    delta = replay(base, config(TOPIC, "foo", "a", None), config(TOPIC, "foo", "c", "3"), config(BROKER, "", "x", None))
    assert delta.configs_delta is not None
    assert delta.configs_delta.changed_resources() == {
        ConfigResource(ConfigResourceType.TOPIC, "foo"),
        ConfigResource(ConfigResourceType.BROKER, ""),
    }
    image = delta.apply()
    assert dict(image.topic_config("foo")) == {"b": "2", "c": "3"}
    assert ConfigResource(ConfigResourceType.BROKER, "") not in image.configs.configs  # emptied: gone
    with pytest.raises(MetadataReplayError):
        replay(base, config(99, "x", "a", "1"))


# -- PartitionChangeRecord semantics ----------------------------------------------------------------------


def test_partition_change_no_change_fields() -> None:
    base = build(topic("foo", FOO), partition(FOO, 0, [1, 2, 3], leader_epoch=4, partition_epoch=9))
    p = replay(base, change(FOO, 0)).apply().partition("foo", 0)
    # Nothing but the partition epoch changes: null arrays, leader -2, leader recovery state -1.
    assert p == PartitionRegistration(
        replicas=(1, 2, 3), isr=(1, 2, 3), leader=1, leader_epoch=4, partition_epoch=10,
        directories=(DirectoryId.MIGRATING,) * 3,
    )  # fmt: skip


def test_partition_change_leader_and_isr() -> None:
    base = build(topic("foo", FOO), partition(FOO, 0, [1, 2, 3], leader_epoch=4, partition_epoch=9))
    img = replay(base, change(FOO, 0, isr=[1, 3])).apply()
    p = img.partition("foo", 0)
    assert p is not None and (p.leader, p.leader_epoch, p.partition_epoch, p.isr) == (1, 4, 10, (1, 3))
    img = replay(img, change(FOO, 0, leader=3, isr=[3])).apply()
    p = img.partition("foo", 0)
    assert p is not None and (p.leader, p.leader_epoch, p.partition_epoch, p.isr) == (3, 5, 11, (3,))
    # Setting the same leader still bumps the leader epoch (Kafka's controller uses it to fence).
    img = replay(img, change(FOO, 0, leader=3)).apply()
    p = img.partition("foo", 0)
    assert p is not None and (p.leader, p.leader_epoch, p.partition_epoch) == (3, 6, 12)
    # No leader, recovering (unclean election, KIP-704).
    img = replay(img, change(FOO, 0, leader=-1, leader_recovery_state=1)).apply()
    p = img.partition("foo", 0)
    assert p is not None and not p.has_leader() and p.leader_recovery_state == LeaderRecoveryState.RECOVERING
    img = replay(img, change(FOO, 0, leader=2)).apply()
    p = img.partition("foo", 0)
    assert p is not None and p.leader_recovery_state == LeaderRecoveryState.RECOVERING  # -1: unchanged


def test_partition_change_reassignment_and_directories() -> None:
    base = build(topic("foo", FOO), partition(FOO, 0, [1, 2], directories=[DIR_A, DIR_B]))
    # Kafka's controller sends directories with every replica change (UNASSIGNED for a new replica).
    img = replay(base, change(FOO, 0, replicas=[1, 2, 3], adding_replicas=[3],
                              directories=[DIR_A, DIR_B, DirectoryId.UNASSIGNED])).apply()  # fmt: skip
    p = img.partition("foo", 0)
    assert p is not None and p.is_reassigning() and p.adding_replicas == (3,)
    assert p.directories == (DIR_A, DIR_B, DirectoryId.UNASSIGNED) and p.directory(3) == DirectoryId.UNASSIGNED
    img = replay(img, change(FOO, 0, replicas=[3, 2], adding_replicas=[], directories=[DIR_B, DIR_A])).apply()
    p = img.partition("foo", 0)
    assert p is not None and not p.is_reassigning() and p.directory(3) == DIR_B and p.directory(1) is None
    # Without directories they stay as they were (Kafka's merge), unless all MIGRATING: then they
    # follow the replica count.
    img = replay(img, change(FOO, 0, isr=[3])).apply()
    assert img.partition("foo", 0).directories == (DIR_B, DIR_A)  # type: ignore[union-attr]
    migrating = build(topic("foo", FOO), partition(FOO, 0, [1, 2]), change(FOO, 0, replicas=[1, 2, 3]))
    assert migrating.partition("foo", 0).directories == (DirectoryId.MIGRATING,) * 3  # type: ignore[union-attr]
    with pytest.raises(InvalidReplicaDirectoriesError):
        replay(base, change(FOO, 0, replicas=[1, 2, 3], directories=[DIR_A, DIR_B]))
    with pytest.raises(InvalidReplicaDirectoriesError):
        replay(build(topic("foo", FOO)), partition(FOO, 0, [1, 2], directories=[DIR_A]))


def test_eligible_leader_replicas() -> None:
    base = build(topic("foo", FOO), partition(FOO, 0, [1, 2, 3]))
    img = replay(base, change(FOO, 0, isr=[1], eligible_leader_replicas=[2], last_known_elr=[3])).apply()
    p = img.partition("foo", 0)
    assert p is not None and (p.elr, p.last_known_elr) == ((2,), (3,))


def test_partition_records_for_unknown_topics_fail() -> None:
    with pytest.raises(MetadataReplayError):
        replay(MetadataImage.EMPTY, partition(FOO, 0, [1]))
    with pytest.raises(MetadataReplayError):
        replay(build(topic("foo", FOO)), change(FOO, 3, leader=1))
    with pytest.raises(MetadataReplayError):
        replay(MetadataImage.EMPTY, RemoveTopicRecord(topic_id=FOO))
    with pytest.raises(TypeError):
        replay(MetadataImage.EMPTY, object())


# -- local changes ------------------------------------------------------------------------------------------


def test_local_changes_leader_follower_and_delete() -> None:
    base = build(
        topic("foo", FOO),
        partition(FOO, 0, [1, 2]),  # 1 leads
        partition(FOO, 1, [2, 1]),  # 1 follows
        partition(FOO, 2, [2, 3]),  # 1 not a replica
        partition(FOO, 3, [1, 3]),  # 1 leads, unchanged below
    )
    delta = replay(
        base,
        change(FOO, 0, isr=[1]),  # ISR shrink: still leader, same leader epoch
        change(FOO, 1, leader=1),  # 1 elected
        change(FOO, 2, replicas=[2, 1], isr=[2, 1]),  # 1 added as a follower
        topic("bar", BAR),
        partition(BAR, 0, [3, 1]),  # new, 1 follows
        partition(BAR, 1, [1]),  # new, 1 leads
    )
    local = delta.local_changes(1)
    foo0, foo1, foo2 = TopicPartition("foo", 0), TopicPartition("foo", 1), TopicPartition("foo", 2)
    bar0, bar1 = TopicPartition("bar", 0), TopicPartition("bar", 1)
    assert set(local.leaders) == {foo0, foo1, bar1}
    assert set(local.elected_leaders) == {foo1, bar1}  # foo-0 kept its leader epoch
    assert set(local.followers) == {foo2, bar0}
    assert not local.deletes
    assert local.leaders[foo1].topic_id == FOO and local.leaders[foo1].partition.leader_epoch == 1
    assert local.topic_ids == {"foo": FOO, "bar": BAR}
    # Broker 3 lost nothing but sees bar-0 as leader.
    assert set(delta.local_changes(3).leaders) == {bar0}

    after = delta.apply()
    delta2 = replay(after, change(FOO, 0, replicas=[2], isr=[2], leader=2), RemoveTopicRecord(topic_id=BAR))
    local2 = delta2.local_changes(1)
    assert local2.deletes == {foo0, bar0, bar1}
    assert not local2.leaders and not local2.followers
    assert delta2.local_changes(2).elected_leaders.keys() == {foo0}


def test_local_changes_report_directory_assignments() -> None:
    base = build(topic("foo", FOO))
    delta = replay(base, partition(FOO, 0, [1, 2], directories=[DIR_A, DIR_B]))
    assert delta.local_changes(2).directory_ids == {(FOO, 0): DIR_B}


# -- cluster, features, producer ids -------------------------------------------------------------------------


def test_broker_lifecycle_and_epochs() -> None:
    image = build(broker(1, epoch=10))
    b = image.cluster.broker(1)
    assert isinstance(b, BrokerRegistration) and b.fenced and b.epoch == 10
    image = replay(image, UnfenceBrokerRecord(id=1, epoch=10)).apply()
    assert image.cluster.unfenced_brokers()[0].id == 1
    image = replay(image, BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=10, in_controlled_shutdown=1)).apply()
    b = image.cluster.broker(1)
    assert b is not None and b.in_controlled_shutdown and not b.fenced
    image = replay(image, BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=10, fenced=1,
                                                         log_dirs=[DIR_B, DIR_A])).apply()  # fmt: skip
    b = image.cluster.broker(1)
    assert b is not None and b.fenced and b.directories == tuple(sorted((DIR_A, DIR_B)))
    for stale in (
        FenceBrokerRecord(id=1, epoch=9),
        UnfenceBrokerRecord(id=1, epoch=11),
        UnregisterBrokerRecord(broker_id=1, broker_epoch=9),
        UnfenceBrokerRecord(id=7, epoch=10),
        BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=10, fenced=5),
    ):
        with pytest.raises(MetadataReplayError):
            replay(image, stale)
    # Re-registering (a restart) replaces the registration with the new epoch.
    image = replay(image, broker(1, epoch=20, fenced=True)).apply()
    b = image.cluster.broker(1)
    assert b is not None and b.epoch == 20 and not b.in_controlled_shutdown
    image = replay(image, UnregisterBrokerRecord(broker_id=1, broker_epoch=20)).apply()
    assert image.cluster.broker(1) is None


def test_features_and_producer_ids() -> None:
    image = build(feature("metadata.version", 20), feature("group.version", 1))
    assert (image.features.level("metadata.version"), image.features.level("group.version")) == (20, 1)
    image = replay(image, feature("metadata.version", 27), feature("group.version", 0)).apply()
    assert image.features.metadata_version == 27 and dict(image.features.finalized_versions) == {}
    with pytest.raises(MetadataReplayError):
        replay(image, feature("metadata.version", 6))  # below 3.3-IV3
    assert dict(replay(image, feature("kraft.version", 1)).apply().features.finalized_versions) == {}
    assert image.producer_ids.is_empty()
    image = replay(image, producer_ids(1000), producer_ids(2000)).apply()
    assert image.producer_ids.next_producer_id == 2000
