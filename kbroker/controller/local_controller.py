"""`LocalController`: the controller of a single node, over its own `__cluster_metadata` log.

Each operation runs the control manager's checks against the image the brokers serve, appends the
resulting records as one batch, fsyncs it (the record is committed: a single voter's high watermark
is its flushed end), and hands the batch to the `MetadataLoader`, which builds the next image and
tells the publishers (metadata cache, replica manager, configs, group coordinator) before the
request is answered. Commits are synchronous inside the operation, so the controller's view and the
brokers' image never differ; the Raft controller (issue 13) keeps an uncommitted view of its own and
answers when the quorum's high watermark passes the batch, behind the same `Controller` interface.

At start (`load`) it loads the newest snapshot of the log, if any, and replays the log after it into
the loader. On an empty log it writes the bootstrap records: those of `bootstrap.checkpoint` in the
metadata log directory (written by `kbroker storage format` or `kafka-storage format`; feature levels
kbroker does not implement are dropped with a warning), else `metadata.version` and `group.version`
as `kbroker storage format` would; and first migrates a legacy `__kbroker_metadata.json` if one is
there (`legacy_migration`). A `SnapshotGenerator` publisher writes a snapshot every
`metadata.log.max.record.bytes.between.snapshots` bytes / `metadata.log.max.snapshot.interval.ms`,
and each commit lets the metadata log apply its snapshot retention (`ClusterMetadataLog.maybe_clean`).
After the network is up the broker registers (`register_broker`): `RegisterBrokerRecord` + `UnfenceBrokerRecord`
with a new broker epoch (the registration's offset) and incarnation id.

A failed append (a full or failed disk) raises `KafkaStorageError` before anything is applied: the
request gets KAFKA_STORAGE_ERROR and the image is unchanged.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from kbroker.clock import Clock, wall_clock_ms
from kbroker.cluster.configs import ConfigHelper
from kbroker.controller import topic_batches
from kbroker.controller.acl_control import AclControlManager, AclCreateResult, AclDeleteResult
from kbroker.controller.client_quota_control import (
    ClientQuotaAlteration,
    ClientQuotaAlterationResult,
    ClientQuotaControlManager,
)
from kbroker.controller.configuration_control import ConfigurationControlManager
from kbroker.controller.controller import (
    Controller,
    CreatePartitionsTopic,
    NewTopic,
    PartitionChangeQuota,
    ProducerIdsBlock,
)
from kbroker.controller.delegation_token_control import DelegationTokenConfig, DelegationTokenControlManager
from kbroker.controller.feature_control import FeatureControlManager
from kbroker.controller.legacy_migration import read_legacy_records, retire
from kbroker.controller.metadata_log import ClusterMetadataLog, snapshot_provenance
from kbroker.controller.producer_id_control import ProducerIdControlManager
from kbroker.controller.replication_control import ReplicationControlManager
from kbroker.controller.result import ControllerResult, MetadataRecord
from kbroker.controller.scram_control import ScramControlManager
from kbroker.metadata.cache import MetadataCache
from kbroker.metadata.image import MetadataImage
from kbroker.metadata.loader import MetadataLoader
from kbroker.metadata.snapshot_generator import SnapshotGenerator
from kbroker.metadata.views import MetadataView, TopicInfo
from kbroker.protocol.errors import KafkaError
from kbroker.protocol.messages.alter_user_scram_credentials import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
)
from kbroker.protocol.messages.create_delegation_token import (
    CreateDelegationTokenRequest,
    CreateDelegationTokenResponse,
)
from kbroker.protocol.messages.elect_leaders import ElectLeadersRequest, ElectLeadersResponse
from kbroker.protocol.messages.expire_delegation_token import (
    ExpireDelegationTokenRequest,
    ExpireDelegationTokenResponse,
)
from kbroker.protocol.messages.renew_delegation_token import (
    RenewDelegationTokenRequest,
    RenewDelegationTokenResponse,
)
from kbroker.protocol.metadata_records import (
    FeatureLevelRecord,
    RegisterBrokerRecord,
    UnfenceBrokerRecord,
)
from kbroker.security.acl import AclFilter, StandardAcl
from kbroker.snapshot.bootstrap import read_bootstrap_file

log = logging.getLogger(__name__)

# Apache Kafka 4.3's production levels (MetadataVersion.LATEST_PRODUCTION = 4.3-IV0, GroupVersion.GV_1).
METADATA_VERSION_LEVEL = 30
GROUP_VERSION_LEVEL = 1
# TransactionVersion TV_2 (KIP-890 part 2), what Kafka 4.3's format finalizes for a new cluster.
TRANSACTION_VERSION_LEVEL = 2
# EligibleLeaderReplicasVersion ELRV_1 (KIP-966), what Kafka 4.3's format finalizes for a new cluster.
ELIGIBLE_LEADER_REPLICAS_VERSION_LEVEL = 1
# SecurityProtocol ids as BrokerEndpoint.SecurityProtocol stores them.
SECURITY_PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}


# Feature levels kbroker implements (its broker registers these ranges): a bootstrap.checkpoint may
# finalize others (Kafka 4.3's format enables transaction.version 2, share.version 1, ...), which a
# kbroker node drops rather than claim them.
SUPPORTED_FEATURES = {"metadata.version": (7, METADATA_VERSION_LEVEL), "group.version": (0, GROUP_VERSION_LEVEL),
                      "eligible.leader.replicas.version": (0, ELIGIBLE_LEADER_REPLICAS_VERSION_LEVEL),
                      "transaction.version": (0, TRANSACTION_VERSION_LEVEL)}


def feature_update_records(node_id: int, image: MetadataImage,
                           updates: Mapping[str, tuple[int, int]]) -> list[MetadataRecord]:
    """Kafka's `FeatureControlManager.updateFeatures` for the features kbroker implements
    (SUPPORTED_FEATURES), shared by the single node's and the quorum's controller: `updates` maps a
    feature to (max level, upgrade type); see `feature_control` for the checks. metadata.version is
    not changed here."""
    return FeatureControlManager(node_id, SUPPORTED_FEATURES).update_features(image, updates)


def bootstrap_records(transaction_version: int = 0, eligible_leader_replicas_version: int = 0) -> list[MetadataRecord]:
    """The feature levels an unformatted metadata log starts with. kbroker's single node finalizes
    `transaction.version` 2 (KIP-890 part 2, what Kafka 4.3 finalizes for a new cluster); a kbroker
    controller quorum without a `bootstrap.checkpoint` leaves it at 0 (transactions version 2 across
    brokers is not proven yet: docs/transactions.md) — `kbroker storage format` writes 2. Likewise
    `eligible.leader.replicas.version` (KIP-966): 1 on the single node (and a lone combined voter), 0 on an
    unformatted quorum; `kbroker storage format` writes 1 as Kafka's does."""
    records: list[MetadataRecord] = [
        FeatureLevelRecord(name="metadata.version", feature_level=METADATA_VERSION_LEVEL)]
    if eligible_leader_replicas_version > 0:
        records.append(FeatureLevelRecord(name="eligible.leader.replicas.version",
                                          feature_level=eligible_leader_replicas_version))
    records.append(FeatureLevelRecord(name="group.version", feature_level=GROUP_VERSION_LEVEL))
    if transaction_version > 0:
        records.append(FeatureLevelRecord(name="transaction.version", feature_level=transaction_version))
    return records


def bootstrap_records_from(metadata_log_dir: Path, transaction_version: int = 0,
                           eligible_leader_replicas_version: int = 0) -> list[MetadataRecord]:
    """The records of `<metadata.log.dir>/bootstrap.checkpoint` (Kafka's BootstrapDirectory.read), kept
    to what kbroker implements; `bootstrap_records(transaction_version)` when there is no such file."""
    bootstrap = read_bootstrap_file(metadata_log_dir)
    if bootstrap is None:
        return bootstrap_records(transaction_version, eligible_leader_replicas_version)
    records: list[MetadataRecord] = []
    for r in bootstrap.records:
        if isinstance(r, FeatureLevelRecord):
            lo_hi = SUPPORTED_FEATURES.get(r.name)
            if lo_hi is None or not lo_hi[0] <= r.feature_level <= lo_hi[1]:
                log.warning("Ignoring %s=%d of %s: kbroker supports %s", r.name, r.feature_level, bootstrap.source,
                            f"levels {lo_hi[0]}-{lo_hi[1]}" if lo_hi else "no level of it")
                continue
        records.append(r)
    log.info("Bootstrapping the metadata log from %s", bootstrap.source)
    return records


class LocalController(Controller):
    """Validates, commits and publishes metadata changes of one node."""

    def __init__(
        self,
        *,
        node_id: int,
        metadata_log: ClusterMetadataLog,
        loader: MetadataLoader,
        cache: MetadataCache,
        config_helper: ConfigHelper,
        default_num_partitions: Callable[[], int],
        default_replication_factor: Callable[[], int],
        delete_topic_enable: Callable[[], bool],
        max_partitions: Callable[[], int] | None = None,
        delegation_tokens: DelegationTokenConfig | None = None,
        clock: Clock = wall_clock_ms,
    ) -> None:
        self.node_id = node_id
        self.metadata_log = metadata_log
        self.loader = loader
        self.cache = cache
        self.broker_epoch = -1

        def view() -> MetadataView:
            return cache.view

        self.replication = ReplicationControlManager(
            view, config_helper.validate_topic_configs, node_id=node_id,
            default_num_partitions=default_num_partitions,
            default_replication_factor=default_replication_factor,
            delete_topic_enable=delete_topic_enable,
            max_partitions=max_partitions,
        )
        self.configuration = ConfigurationControlManager(view, config_helper, node_id=node_id)
        self.producer_ids = ProducerIdControlManager(view)
        self.scram = ScramControlManager(lambda: cache.image.scram)
        self.acls = AclControlManager(lambda: cache.image.acls)
        self.client_quotas = ClientQuotaControlManager(lambda: cache.image.client_quotas)
        self.delegation_tokens = DelegationTokenControlManager(
            lambda: cache.image.delegation_tokens, delegation_tokens or DelegationTokenConfig(), clock,
            lambda: cache.image.features.metadata_version)

    # -- start-up ------------------------------------------------------------------------------------

    def load(self, legacy_metadata_file: Path | None = None) -> None:
        """Load the newest snapshot, replay the log after it into the loader; bootstrap (and migrate a
        legacy JSON image) when the log is empty."""
        self._install_snapshot_generator()
        start_offset = 0
        latest = self.metadata_log.latest_snapshot()
        if latest is not None:
            snapshot_id, contents = latest
            self.loader.handle_load_snapshot(contents.records, snapshot_provenance(snapshot_id, contents))
            start_offset = snapshot_id.offset
            log.info("Loaded snapshot %s (%d records) of %s", snapshot_id, len(contents.records),
                     self.metadata_log.directory)
        replayed = 0
        for batch in self.metadata_log.read_all(start_offset):
            self.loader.handle_commit([batch])
            replayed += len(batch.records)
        if self.metadata_log.end_offset > 0:
            log.info("Loaded %d metadata records from %s", replayed, self.metadata_log.directory)
            self.metadata_log.maybe_clean(force=True)
            return
        records = bootstrap_records_from(self.metadata_log.directory.parent, TRANSACTION_VERSION_LEVEL,
                                         ELIGIBLE_LEADER_REPLICAS_VERSION_LEVEL)
        migrated = legacy_metadata_file is not None and legacy_metadata_file.exists()
        if migrated:
            assert legacy_metadata_file is not None
            records += read_legacy_records(legacy_metadata_file, self.node_id)
        self._commit(records)
        if migrated:
            assert legacy_metadata_file is not None
            target = retire(legacy_metadata_file)
            log.info("Migrated %d topics from %s into %s; the old file is now %s",
                     len(self.cache.topics()), legacy_metadata_file, self.metadata_log.directory, target)

    def register_broker(self, listeners: Sequence[tuple[str, str, int, str]], rack: str | None) -> int:
        """Register this node (fenced), then unfence it: the new broker epoch.

        `listeners`: (name, host, port, security protocol) of each bound listener.
        """
        self.broker_epoch = self.metadata_log.end_offset
        endpoints = [RegisterBrokerRecord.BrokerEndpoint(name=n, host=h, port=p,
                                                         security_protocol=SECURITY_PROTOCOL_IDS.get(sp, 0))
                     for n, h, p, sp in listeners]
        features = [RegisterBrokerRecord.BrokerFeature(name="metadata.version", min_supported_version=7,
                                                       max_supported_version=METADATA_VERSION_LEVEL),
                    RegisterBrokerRecord.BrokerFeature(name="group.version", min_supported_version=0,
                                                       max_supported_version=GROUP_VERSION_LEVEL),
                    RegisterBrokerRecord.BrokerFeature(name="transaction.version", min_supported_version=0,
                                                       max_supported_version=TRANSACTION_VERSION_LEVEL),
                    RegisterBrokerRecord.BrokerFeature(name="eligible.leader.replicas.version", min_supported_version=0,
                                                       max_supported_version=ELIGIBLE_LEADER_REPLICAS_VERSION_LEVEL)]
        self._commit([
            RegisterBrokerRecord(broker_id=self.node_id, incarnation_id=uuid.uuid4(), broker_epoch=self.broker_epoch,
                                 end_points=endpoints, features=features, rack=rack, fenced=True),
            UnfenceBrokerRecord(id=self.node_id, epoch=self.broker_epoch),
        ])
        return self.broker_epoch

    # -- commit --------------------------------------------------------------------------------------

    def _commit(self, records: list[MetadataRecord]) -> None:
        if not records:
            return
        self.loader.handle_commit([self.metadata_log.append(records)])
        self.metadata_log.maybe_clean()

    # -- snapshots (kbroker.snapshot) ----------------------------------------------------------------

    def _install_snapshot_generator(self) -> None:
        if any(p.name == "SnapshotGenerator" for p in self.loader.publishers):
            return
        cfg = self.metadata_log.config
        self.loader.install_publishers([SnapshotGenerator(
            self._emit_snapshot, max_bytes_since_last_snapshot=cfg.max_bytes_between_snapshots,
            max_time_since_last_snapshot_ms=cfg.max_snapshot_interval_ms, time_ms=self.metadata_log.time_ms,
            fault_handler=lambda msg, e: log.error("%s: %s", msg, e, exc_info=e))])

    def _emit_snapshot(self, image: MetadataImage, reason: str) -> None:
        self.metadata_log.create_snapshot(image, reason)

    def _apply(self, result: ControllerResult[TopicInfo], validate_only: bool) -> TopicInfo:
        if not validate_only:
            self._commit(result.records)
        return result.response

    # -- Controller ----------------------------------------------------------------------------------

    async def create_new_topic(self, topic: NewTopic, validate_only: bool = False) -> TopicInfo:
        result = self.replication.create_topic(topic.name, topic.num_partitions, topic.replication_factor,
                                               topic.configs, topic.assignments)
        return self._apply(result, validate_only)

    async def create_topics(self, topics: Sequence[NewTopic], validate_only: bool = False,
                            quota: PartitionChangeQuota | None = None) -> list[TopicInfo | KafkaError]:
        result = topic_batches.create_topics(self.replication, topics, quota)
        if not validate_only:
            self._commit(result.records)
        return result.response

    async def create_partitions_all(self, topics: Sequence[CreatePartitionsTopic], validate_only: bool = False,
                                    quota: PartitionChangeQuota | None = None) -> list[TopicInfo | KafkaError]:
        result = topic_batches.create_partitions(self.replication, topics, quota)
        if not validate_only:
            self._commit(result.records)
        return result.response

    async def delete_topic(self, name: str) -> TopicInfo:
        return self._apply(self.replication.delete_topic(name), False)

    async def delete_topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo:
        return self._apply(self.replication.delete_topic_by_id(topic_id), False)

    async def create_partitions(
        self, name: str, new_total: int, validate_only: bool = False,
        assignments: Sequence[Sequence[int]] | None = None, records_in_request: int = 0,
    ) -> TopicInfo:
        result = self.replication.create_partitions(name, new_total, assignments, records_in_request)
        return self._apply(result, validate_only)

    async def incremental_alter_topic_configs(
        self, name: str, ops: Iterable[tuple[str, int, str | None]], validate_only: bool = False
    ) -> TopicInfo:
        return self._apply(self.configuration.incremental_alter_topic_configs(name, ops), validate_only)

    async def alter_topic_configs(
        self, name: str, configs: Mapping[str, str | None], validate_only: bool = False
    ) -> TopicInfo:
        return self._apply(self.configuration.alter_topic_configs(name, configs), validate_only)

    async def incremental_alter_group_configs(
        self, group_id: str, ops: Iterable[tuple[str, int, str | None]], validate_only: bool = False
    ) -> None:
        result = self.configuration.incremental_alter_group_configs(group_id, ops)
        if not validate_only:
            self._commit(result.records)

    async def alter_broker_configs(
        self, default: bool, changes: Mapping[str, str | None], validate_only: bool = False,
        broker_id: int | None = None,
    ) -> None:
        result = self.configuration.alter_broker_configs(default, changes, broker_id)
        if not validate_only:
            self._commit(result.records)

    async def update_features(self, updates: Mapping[str, tuple[int, int]], validate_only: bool = False) -> None:
        """UpdateFeatures (`kafka-features upgrade / downgrade / disable`), Kafka's FeatureControlManager
        rules for the features this node implements (SUPPORTED_FEATURES): an unknown feature or a level
        outside the supported range, or a downgrade with upgrade type UPGRADE, is INVALID_UPDATE_VERSION
        and nothing is written; level 0 removes the feature. metadata.version is not changed here."""
        records = feature_update_records(self.node_id, self.loader.image, updates)
        if not validate_only:
            self._commit(records)

    async def allocate_producer_ids(self, broker_id: int, broker_epoch: int) -> ProducerIdsBlock:
        result = self.producer_ids.generate_next_producer_id(broker_id, broker_epoch)
        self._commit(result.records)
        return result.response

    async def alter_user_scram_credentials(
        self, request: AlterUserScramCredentialsRequest
    ) -> AlterUserScramCredentialsResponse:
        result = self.scram.alter_credentials(request)
        self._commit(result.records)
        return result.response

    async def create_delegation_token(
        self, requester: str, request: CreateDelegationTokenRequest
    ) -> CreateDelegationTokenResponse:
        result = self.delegation_tokens.create_delegation_token(requester, request)
        self._commit(result.records)
        return result.response

    async def renew_delegation_token(
        self, principal: str, request: RenewDelegationTokenRequest
    ) -> RenewDelegationTokenResponse:
        result = self.delegation_tokens.renew_delegation_token(principal, request)
        self._commit(result.records)
        return result.response

    async def expire_delegation_token(
        self, principal: str, request: ExpireDelegationTokenRequest
    ) -> ExpireDelegationTokenResponse:
        result = self.delegation_tokens.expire_delegation_token(principal, request)
        self._commit(result.records)
        return result.response

    def sweep_expired_delegation_tokens(self) -> None:
        self._commit(self.delegation_tokens.sweep_expired_delegation_tokens())

    async def alter_client_quotas(
        self, alterations: Sequence[ClientQuotaAlteration], validate_only: bool = False
    ) -> list[ClientQuotaAlterationResult]:
        result = self.client_quotas.alter_client_quotas(alterations)
        if not validate_only:
            self._commit(result.records)
        return result.response

    async def create_acls(self, acls: Sequence[StandardAcl]) -> list[AclCreateResult]:
        result = self.acls.create_acls(acls)
        self._commit(result.records)
        return result.response

    async def delete_acls(self, filters: Sequence[AclFilter]) -> list[AclDeleteResult]:
        result = self.acls.delete_acls(filters)
        self._commit(result.records)
        return result.response

    async def elect_leaders(self, request: ElectLeadersRequest) -> ElectLeadersResponse:
        """One node leads every partition it hosts: each election is not needed (or cannot be had)."""
        result = self.replication.elect_leaders(request)
        self._commit(result.records)
        return result.response

    def close(self) -> None:
        self.metadata_log.close()
