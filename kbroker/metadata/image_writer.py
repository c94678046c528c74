"""An image as the records that rebuild it (Kafka's ``MetadataImage.write`` with an ``ImageWriter``).

``image_records(image)`` lists records whose replay on ``MetadataImage.EMPTY`` gives back ``image``
(provenance aside; and with `eligible.leader.replicas.version` off, partitions' leftover ELRs, which
Kafka's snapshots leave out too): what a snapshot holds, and what a publisher installed late is shown (a delta from
the empty image). Order as Kafka writes a snapshot: features (metadata.version first), cluster
(controllers, brokers), topics (each TopicRecord followed by its PartitionRecords), configs, producer
ids.

Sans-IO; imports only the image and the generated record classes.
"""

from __future__ import annotations

import uuid

from kbroker.metadata.image import (
    METADATA_VERSION,
    BrokerRegistration,
    ControllerRegistration,
    MetadataImage,
    PartitionRegistration,
)
from kbroker.protocol.metadata_records.access_control_entry_record import AccessControlEntryRecord
from kbroker.protocol.metadata_records.client_quota_record import ClientQuotaRecord
from kbroker.protocol.metadata_records.config_record import ConfigRecord
from kbroker.protocol.metadata_records.delegation_token_record import DelegationTokenRecord
from kbroker.protocol.metadata_records.feature_level_record import FeatureLevelRecord
from kbroker.protocol.metadata_records.partition_record import PartitionRecord
from kbroker.protocol.metadata_records.producer_ids_record import ProducerIdsRecord
from kbroker.protocol.metadata_records.register_broker_record import RegisterBrokerRecord
from kbroker.protocol.metadata_records.register_controller_record import RegisterControllerRecord
from kbroker.protocol.metadata_records.topic_record import TopicRecord
from kbroker.protocol.metadata_records.user_scram_credential_record import UserScramCredentialRecord

ELIGIBLE_LEADER_REPLICAS_VERSION = "eligible.leader.replicas.version"


def broker_record(b: BrokerRegistration) -> RegisterBrokerRecord:
    return RegisterBrokerRecord(
        broker_id=b.id,
        is_migrating_zk_broker=b.is_migrating_zk_broker,
        incarnation_id=b.incarnation_id,
        broker_epoch=b.epoch,
        end_points=[
            RegisterBrokerRecord.BrokerEndpoint(
                name=e.listener_name, host=e.host, port=e.port, security_protocol=e.security_protocol
            )
            for e in b.listeners.values()
        ],
        features=[
            RegisterBrokerRecord.BrokerFeature(name=n, min_supported_version=v.min, max_supported_version=v.max)
            for n, v in b.supported_features.items()
        ],
        rack=b.rack,
        fenced=b.fenced,
        in_controlled_shutdown=b.in_controlled_shutdown,
        log_dirs=list(b.directories),
        cordoned_log_dirs=None if b.cordoned_directories is None else list(b.cordoned_directories),
    )


def controller_record(c: ControllerRegistration) -> RegisterControllerRecord:
    return RegisterControllerRecord(
        controller_id=c.id,
        incarnation_id=c.incarnation_id,
        zk_migration_ready=c.zk_migration_ready,
        end_points=[
            RegisterControllerRecord.ControllerEndpoint(
                name=e.listener_name, host=e.host, port=e.port, security_protocol=e.security_protocol
            )
            for e in c.listeners.values()
        ],
        features=[
            RegisterControllerRecord.ControllerFeature(
                name=n, min_supported_version=v.min, max_supported_version=v.max
            )
            for n, v in c.supported_features.items()
        ],
    )


def partition_record(topic_id: uuid.UUID, index: int, p: PartitionRegistration,
                     eligible_leader_replicas_enabled: bool = True) -> PartitionRecord:
    """`eligible_leader_replicas_enabled` False (the feature off in the image) leaves the ELR and
    last-known ELR out, as Kafka's `PartitionRegistration.toRecord` with its ImageWriterOptions does: a
    snapshot taken after ELR was turned off drops the ELRs the partitions had not yet shed."""
    elr = eligible_leader_replicas_enabled
    return PartitionRecord(
        partition_id=index,
        topic_id=topic_id,
        replicas=list(p.replicas),
        isr=list(p.isr),
        removing_replicas=list(p.removing_replicas),
        adding_replicas=list(p.adding_replicas),
        leader=p.leader,
        leader_recovery_state=int(p.leader_recovery_state),
        leader_epoch=p.leader_epoch,
        partition_epoch=p.partition_epoch,
        directories=list(p.directories),
        eligible_leader_replicas=list(p.elr) if p.elr and elr else None,
        last_known_elr=list(p.last_known_elr) if p.last_known_elr and elr else None,
    )


def image_records(image: MetadataImage) -> list[object]:
    out: list[object] = []
    features = image.features
    elr_enabled = features.level(ELIGIBLE_LEADER_REPLICAS_VERSION) >= 1
    if features.metadata_version is not None:
        out.append(FeatureLevelRecord(name=METADATA_VERSION, feature_level=features.metadata_version))
    for name, level in sorted(features.finalized_versions.items()):
        out.append(FeatureLevelRecord(name=name, feature_level=level))
    for _, c in sorted(image.cluster.controllers.items()):
        out.append(controller_record(c))
    for _, b in sorted(image.cluster.brokers.items()):
        out.append(broker_record(b))
    for topic in sorted(image.topics.topics_by_id.values(), key=lambda t: t.name):
        out.append(TopicRecord(name=topic.name, topic_id=topic.id))
        for index, p in sorted(topic.partitions.items()):
            out.append(partition_record(topic.id, index, p, elr_enabled))
    for resource, config in sorted(image.configs.configs.items()):
        for key, value in sorted(config.items()):
            out.append(
                ConfigRecord(resource_type=int(resource.type), resource_name=resource.name, name=key, value=value)
            )
    if not image.producer_ids.is_empty():
        out.append(ProducerIdsRecord(broker_id=-1, next_producer_id=image.producer_ids.next_producer_id))
    for acl_id, acl in sorted(image.acls.acls.items()):
        out.append(AccessControlEntryRecord(id=acl_id, resource_type=acl.resource_type,
                                            resource_name=acl.resource_name, pattern_type=acl.pattern_type,
                                            principal=acl.principal, host=acl.host, operation=acl.operation,
                                            permission_type=acl.permission_type))
    for (mechanism, user), cred in sorted(image.scram.credentials.items()):
        out.append(UserScramCredentialRecord(name=user, mechanism=mechanism, salt=cred.salt,
                                             stored_key=cred.stored_key, server_key=cred.server_key,
                                             iterations=cred.iterations))
    for token_id, token in sorted(image.delegation_tokens.tokens.items()):
        out.append(DelegationTokenRecord(owner=token.owner, requester=token.requester, renewers=list(token.renewers),
                                         issue_timestamp=token.issue_timestamp, max_timestamp=token.max_timestamp,
                                         expiration_timestamp=token.expiration_timestamp, token_id=token_id))
    for entity, quotas in sorted(image.client_quotas.entities.items(), key=lambda e: repr(e[0])):
        for quota_key, quota_value in sorted(quotas.items()):
            out.append(ClientQuotaRecord(
                entity=[ClientQuotaRecord.EntityData(entity_type=t, entity_name=n) for t, n in entity],
                key=quota_key, value=quota_value, remove=False))
    return out
