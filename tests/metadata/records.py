"""Record builders for the metadata tests (Kafka's generated record classes, filled in)."""

from __future__ import annotations

import uuid

from kbroker.protocol.metadata_records.broker_registration_change_record import BrokerRegistrationChangeRecord
from kbroker.protocol.metadata_records.config_record import ConfigRecord
from kbroker.protocol.metadata_records.feature_level_record import FeatureLevelRecord
from kbroker.protocol.metadata_records.fence_broker_record import FenceBrokerRecord
from kbroker.protocol.metadata_records.no_op_record import NoOpRecord
from kbroker.protocol.metadata_records.partition_change_record import PartitionChangeRecord
from kbroker.protocol.metadata_records.partition_record import PartitionRecord
from kbroker.protocol.metadata_records.producer_ids_record import ProducerIdsRecord
from kbroker.protocol.metadata_records.register_broker_record import RegisterBrokerRecord
from kbroker.protocol.metadata_records.remove_topic_record import RemoveTopicRecord
from kbroker.protocol.metadata_records.topic_record import TopicRecord
from kbroker.protocol.metadata_records.unfence_broker_record import UnfenceBrokerRecord
from kbroker.protocol.metadata_records.unregister_broker_record import UnregisterBrokerRecord

FOO = uuid.UUID("00000000-0000-0000-0000-0000000000f0")
BAR = uuid.UUID("00000000-0000-0000-0000-0000000000ba")
BAZ = uuid.UUID("00000000-0000-0000-0000-0000000000bb")
DIR_A = uuid.UUID("11111111-0000-0000-0000-00000000000a")
DIR_B = uuid.UUID("11111111-0000-0000-0000-00000000000b")

__all__ = [
    "BrokerRegistrationChangeRecord",
    "ConfigRecord",
    "FenceBrokerRecord",
    "NoOpRecord",
    "PartitionChangeRecord",
    "RemoveTopicRecord",
    "UnfenceBrokerRecord",
    "UnregisterBrokerRecord",
]


def topic(name: str, topic_id: uuid.UUID) -> TopicRecord:
    return TopicRecord(name=name, topic_id=topic_id)


def partition(
    topic_id: uuid.UUID,
    index: int,
    replicas: list[int],
    leader: int | None = None,
    isr: list[int] | None = None,
    leader_epoch: int = 0,
    partition_epoch: int = 0,
    directories: list[uuid.UUID] | None = None,
) -> PartitionRecord:
    return PartitionRecord(
        partition_id=index,
        topic_id=topic_id,
        replicas=replicas,
        isr=list(replicas) if isr is None else isr,
        leader=replicas[0] if leader is None else leader,
        leader_epoch=leader_epoch,
        partition_epoch=partition_epoch,
        directories=directories or [],
    )


def change(topic_id: uuid.UUID, index: int, **fields: object) -> PartitionChangeRecord:
    record = PartitionChangeRecord(partition_id=index, topic_id=topic_id)
    for name, value in fields.items():
        assert hasattr(record, name), name
        setattr(record, name, value)
    return record


def broker(node_id: int, epoch: int = 10, fenced: bool = True, rack: str | None = None) -> RegisterBrokerRecord:
    return RegisterBrokerRecord(
        broker_id=node_id,
        incarnation_id=uuid.UUID(int=1000 + node_id),
        broker_epoch=epoch,
        end_points=[
            RegisterBrokerRecord.BrokerEndpoint(name="PLAINTEXT", host=f"b{node_id}", port=9092, security_protocol=0)
        ],
        features=[
            RegisterBrokerRecord.BrokerFeature(name="metadata.version", min_supported_version=7,
                                               max_supported_version=27),
        ],  # fmt: skip
        rack=rack,
        fenced=fenced,
    )


def config(resource_type: int, resource_name: str, name: str, value: str | None) -> ConfigRecord:
    return ConfigRecord(resource_type=resource_type, resource_name=resource_name, name=name, value=value)


def feature(name: str, level: int) -> FeatureLevelRecord:
    return FeatureLevelRecord(name=name, feature_level=level)


def producer_ids(next_id: int, broker_id: int = 1, broker_epoch: int = 10) -> ProducerIdsRecord:
    return ProducerIdsRecord(broker_id=broker_id, broker_epoch=broker_epoch, next_producer_id=next_id)
