"""`QuorumController`: the active controller of a KRaft quorum, over a metadata log it does not own.

Kafka's `QuorumController`, sans-IO. The Raft layer (`raft_client.RaftClient`) replicates
`__cluster_metadata`; this class decides what goes into it and answers requests once it is committed:

    request -> control manager checks it against the controller's *uncommitted* image -> records
            -> replayed into that image at once (the next request sees them) -> RaftClient.append
            -> PendingOperation, completed when handle_commit reports the batch's last offset
               (or failed with NOT_CONTROLLER if leadership is lost first)

Two images are kept. The *committed* image is every batch the Raft layer has reported committed,
replayed in order; standby controllers keep only that one. The active controller also keeps its
*uncommitted* image: the committed one plus every batch it has appended since. Losing leadership
reverts to the committed image: images are immutable, so the revert is dropping a reference
(Kafka reverts its timeline data structures to the snapshot at the last committed offset; the
effect is the same, a rebuild from the committed image). A write with no records (a heartbeat that
changes nothing, validate-only) is answered once everything written before it has committed, as
Kafka's write events are.

On becoming leader (`handle_leader_change` for this node, which the Raft layer calls only after it
has delivered every batch committed before the epoch began) the controller reads the log end offset
(the next record's offset: broker epochs are registration offsets), starts broker sessions afresh
(`ClusterControlManager.activate`), and on an empty log writes the bootstrap records
(`metadata.version`, `group.version`), as Kafka's activation records do.

Periodic work is driven by `poll()` from the owner's timer, with `next_deadline_ms()` saying when
(Kafka's scheduled controller events): fence brokers whose session expired
(`broker.session.timeout.ms`, one broker per event), and, with `auto.leader.rebalance.enable`, a
preferred-leader election for imbalanced partitions every `leader.imbalance.check.interval.seconds`.

Snapshots (`handle_load_snapshot`, Kafka's `QuorumController.QuorumMetaLogListener.handleLoadSnapshot`):
a snapshot replaces the committed image whole (a standby that fell behind the leader's log start, or
any controller at start). As in Kafka, every broker registration in it counts as registered at the
snapshot's last contained offset (Kafka replays each snapshot record with that offset), which is what
an unfencing heartbeat's metadata offset is compared with. An active controller is never handed a
snapshot by the Raft layer; if it were, it renounces first (Kafka throws). Writing snapshots is the
node's `SnapshotGenerator` (kbroker/server/kraft_controller.py), from the node's committed image.

Client quotas (`ClientQuotaControlManager`, AlterClientQuotas), ACLs (`AclControlManager`: CreateAcls,
DeleteAcls -> AccessControlEntryRecord / RemoveAccessControlEntryRecord) and SCRAM credentials
(`ScramControlManager`: AlterUserScramCredentials -> UserScramCredentialRecord) are here: brokers forward
those requests in an Envelope and the controller listener authorizes the client's principal (ALTER on
the cluster) before they reach this class. Eligible leader replicas (KIP-966) apply while
`eligible.leader.replicas.version` >= 1 is finalized (`is_elr_enabled`): every partition change gets
the topic's effective min ISR (`min_insync_replicas`, clamped to the replication factor) and the flag;
see `partition_change` and `replication_control`. UpdateFeatures turns it on and off as Kafka 4.3.1 does
(`feature_control`, `ConfigurationControlManager.update_features`: on, the cluster-level
min.insync.replicas record first if absent; off, only the FeatureLevelRecord), and a bootstrap with ELR
on gets the cluster-level min.insync.replicas record (`activation_records_for_empty_log`). Not here
(yet): the controller's metrics, and a deadline per request.
"""

from __future__ import annotations

import logging
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from kbroker.clock import Clock
from kbroker.cluster.configs import ConfigHelper
from kbroker.controller import topic_batches
from kbroker.controller.acl_control import AclControlManager, AclCreateResult, AclDeleteResult
from kbroker.controller.broker_heartbeat_manager import BrokerHeartbeatReply
from kbroker.controller.client_quota_control import (
    ClientQuotaAlteration,
    ClientQuotaAlterationResult,
    ClientQuotaControlManager,
)
from kbroker.controller.cluster_control import BrokerRegistrationReply, ClusterControlManager
from kbroker.controller.configuration_control import ConfigurationControlManager
from kbroker.controller.controller import (
    ConfigAlteration,
    Controller,
    CreatePartitionsTopic,
    GroupConfigsAlteration,
    NewTopic,
    PartitionChangeQuota,
    ProducerIdsBlock,
    TopicConfigsAlteration,
)
from kbroker.controller.delegation_token_control import DelegationTokenConfig, DelegationTokenControlManager
from kbroker.controller.feature_control import FeatureControlManager, KRaftVersionAccessor
from kbroker.controller.local_controller import SUPPORTED_FEATURES, bootstrap_records, feature_update_records
from kbroker.controller.pending import PendingOperation
from kbroker.controller.producer_id_control import ProducerIdControlManager
from kbroker.controller.raft_client import LeaderAndEpoch, NotLeaderError, RaftClient
from kbroker.controller.replica_placer import StripedReplicaPlacer
from kbroker.controller.replication_control import ReplicationControlManager
from kbroker.controller.result import ControllerResult, MetadataRecord
from kbroker.controller.scram_control import ScramControlManager
from kbroker.metadata.delta import MetadataDelta
from kbroker.metadata.image import (
    KRAFT_VERSION,
    METADATA_VERSION,
    ConfigResource,
    ConfigResourceType,
    MetadataImage,
    MetadataProvenance,
)
from kbroker.metadata.loader import MetadataBatch
from kbroker.metadata.views import MetadataView, TopicInfo
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.messages.alter_partition import AlterPartitionRequest, AlterPartitionResponse
from kbroker.protocol.messages.alter_partition_reassignments import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
)
from kbroker.protocol.messages.alter_user_scram_credentials import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
)
from kbroker.protocol.messages.broker_heartbeat import BrokerHeartbeatRequest
from kbroker.protocol.messages.broker_registration import BrokerRegistrationRequest
from kbroker.protocol.messages.controller_registration import ControllerRegistrationRequest
from kbroker.protocol.messages.create_delegation_token import (
    CreateDelegationTokenRequest,
    CreateDelegationTokenResponse,
)
from kbroker.protocol.messages.elect_leaders import ElectLeadersRequest, ElectLeadersResponse
from kbroker.protocol.messages.expire_delegation_token import (
    ExpireDelegationTokenRequest,
    ExpireDelegationTokenResponse,
)
from kbroker.protocol.messages.list_partition_reassignments import (
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
)
from kbroker.protocol.messages.renew_delegation_token import (
    RenewDelegationTokenRequest,
    RenewDelegationTokenResponse,
)
from kbroker.protocol.metadata_records import (
    ConfigRecord,
    FeatureLevelRecord,
    RegisterBrokerRecord,
    UnregisterBrokerRecord,
)
from kbroker.security.acl import AclFilter, StandardAcl

log = logging.getLogger(__name__)

T = TypeVar("T")

UNCLEAN_LEADER_ELECTION_ENABLE = "unclean.leader.election.enable"
MIN_IN_SYNC_REPLICAS = "min.insync.replicas"
ELIGIBLE_LEADER_REPLICAS_VERSION = "eligible.leader.replicas.version"


@dataclass(frozen=True, slots=True)
class QuorumControllerConfig:
    """The settings the controller reads (Kafka's keys and defaults)."""

    node_id: int
    cluster_id: str
    session_timeout_ms: int = 9000  # broker.session.timeout.ms
    # A combined node: its broker side's incarnation id (ClusterControlManager.activate ends the session
    # of this node id's registration by any other incarnation: this node's previous process).
    local_broker_incarnation_id: uuid.UUID | None = None
    unclean_leader_election_enable: bool = False  # unclean.leader.election.enable (static)
    auto_leader_rebalance_enable: bool = True  # auto.leader.rebalance.enable
    leader_imbalance_check_interval_ms: int = 300_000  # leader.imbalance.check.interval.seconds * 1000
    default_num_partitions: int = 1  # num.partitions
    default_replication_factor: int = 1  # default.replication.factor
    delete_topic_enable: bool = True  # delete.topic.enable
    max_elections_per_imbalance: int = 1000  # ReplicationControlManager.MAX_ELECTIONS_PER_IMBALANCE
    kraft_version: int = 0  # the raft layer's kraft.version, checked at broker registration
    min_insync_replicas: int = 1  # min.insync.replicas (static), under the topic and cluster-default configs
    # kbroker.max.partitions (kbroker's bound on the partitions one node hosts); -1: no bound. Set on a
    # one-voter combined node (kbroker's single node), as the LocalController applies it.
    max_partitions: int = -1
    bootstrap: tuple[MetadataRecord, ...] = field(default_factory=lambda: tuple(bootstrap_records()))
    # delegation.token.* (KIP-48): the secret key, lifetimes and the expired-token sweep interval.
    delegation_tokens: DelegationTokenConfig = field(default_factory=DelegationTokenConfig)


@dataclass(slots=True)
class _PendingWrite:
    last_offset: int
    op: PendingOperation[object]
    response: object


def _not_controller(leader: LeaderAndEpoch) -> KafkaError:
    where = "unknown" if leader.leader_id is None else str(leader.leader_id)
    return KafkaError(f"This node is not the active controller (the active controller is {where}).",
                      error_code=ErrorCode.NOT_CONTROLLER)


def _replay(image: MetadataImage, records: Sequence[MetadataRecord], base_offset: int, epoch: int,
            register_offsets: dict[int, int]) -> MetadataImage:
    """`image` after one batch; `register_offsets` learns where each RegisterBrokerRecord sits."""
    delta = MetadataDelta(image)
    for i, record in enumerate(records):
        delta.replay(record)
        if isinstance(record, RegisterBrokerRecord):
            register_offsets[record.broker_id] = base_offset + i
        elif isinstance(record, UnregisterBrokerRecord):
            register_offsets.pop(record.broker_id, None)
    last = base_offset + max(len(records), 1) - 1
    return delta.apply(MetadataProvenance(last, epoch, -1, True))


def activation_records_for_empty_log(bootstrap: Sequence[MetadataRecord],
                                     min_insync_replicas: int) -> list[MetadataRecord]:
    """Kafka's `ActivationRecordsGenerator.recordsForEmptyLog`: the bootstrap records, and with
    eligible.leader.replicas.version > 0 among them a cluster-level min.insync.replicas ConfigRecord
    (the static value), which ELR needs (KIP-966: broker-level values are not allowed with it)."""
    records = list(bootstrap)
    elr = any(isinstance(r, FeatureLevelRecord) and r.name == ELIGIBLE_LEADER_REPLICAS_VERSION and r.feature_level > 0
              for r in records)
    if elr:
        records.append(ConfigRecord(resource_type=int(ConfigResourceType.BROKER), resource_name="",
                                    name=MIN_IN_SYNC_REPLICAS, value=str(min_insync_replicas)))
    return records


class QuorumController(Controller):
    """Kafka's QuorumController: the `Controller` the APIs call, and the Raft layer's listener."""

    def __init__(
        self,
        config: QuorumControllerConfig,
        raft: RaftClient,
        config_helper: ConfigHelper,
        *,
        clock: Clock,
        placer: StripedReplicaPlacer | None = None,
        kraft: KRaftVersionAccessor | None = None,
    ) -> None:
        self.config = config
        # The Raft layer's kraft.version and its upgrade (KIP-853); None: `config.kraft_version`, fixed.
        self.kraft = kraft
        self.node_id = config.node_id
        self.raft = raft
        self.clock = clock
        # The committed state (every controller) and the active controller's uncommitted state.
        self.committed_image = MetadataImage.EMPTY
        self.committed_offset = -1
        self._committed_register_offsets: dict[int, int] = {}
        self.image = MetadataImage.EMPTY
        self._register_offsets: dict[int, int] = {}
        self._view = MetadataView(self.image, self.node_id)
        # Leadership.
        self.leader = LeaderAndEpoch(None, 0)
        self.active_epoch: int | None = None
        self.next_write_offset = 0
        self.last_written_offset = -1
        self._pending: deque[_PendingWrite] = deque()
        # Scheduled work (ms on `clock`).
        self._next_rebalance_ms: int | None = None

        def view() -> MetadataView:
            if self._view.image is not self.image:
                self._view = MetadataView(self.image, self.node_id)
            return self._view

        self.cluster = ClusterControlManager(
            lambda: self.image, cluster_id=config.cluster_id, clock=clock,
            session_timeout_ms=config.session_timeout_ms,
            local_broker_incarnation_id=config.local_broker_incarnation_id, local_node_id=config.node_id,
            broker_shutdown_handler=lambda b, clean, records: self.replication.handle_broker_shutdown(
                b, clean, records))
        self.replication = ReplicationControlManager(
            view, config_helper.validate_topic_configs, node_id=config.node_id,
            default_num_partitions=lambda: config.default_num_partitions,
            default_replication_factor=lambda: config.default_replication_factor,
            delete_topic_enable=lambda: config.delete_topic_enable,
            cluster=self.cluster, placer=placer,
            unclean_leader_election_enabled=self.unclean_leader_election_enabled,
            eligible_leader_replicas_enabled=self.is_elr_enabled,
            min_insync_replicas=self.min_insync_replicas,
            max_partitions=(lambda: config.max_partitions) if config.max_partitions >= 0 else None,
        )
        self.configuration = ConfigurationControlManager(
            view, config_helper, node_id=config.node_id, eligible_leader_replicas_enabled=self.is_elr_enabled,
            static_min_insync_replicas=lambda: config.min_insync_replicas)
        self.producer_ids = ProducerIdControlManager(view)
        self.client_quotas = ClientQuotaControlManager(lambda: self.image.client_quotas)
        self.acls = AclControlManager(lambda: self.image.acls)
        self.scram = ScramControlManager(lambda: self.image.scram)
        self.delegation_tokens = DelegationTokenControlManager(lambda: self.image.delegation_tokens,
                                                               config.delegation_tokens, clock,
                                                               lambda: self.image.features.metadata_version)
        self._next_token_sweep_ms: int | None = None

    # -- state -----------------------------------------------------------------------------------------

    def is_active(self) -> bool:
        return self.active_epoch is not None

    def unclean_leader_election_enabled(self, topic: str) -> bool:
        """Topic override, else the cluster-wide dynamic broker default, else the static config."""
        configs = self.image.configs
        value = configs.topic_config(topic).get(UNCLEAN_LEADER_ELECTION_ENABLE)
        if value is None:
            value = configs.config_map(ConfigResource(ConfigResourceType.BROKER, "")).get(
                UNCLEAN_LEADER_ELECTION_ENABLE)
        if value is None:
            return self.config.unclean_leader_election_enable
        return value.strip().lower() == "true"

    def is_elr_enabled(self) -> bool:
        """Kafka's `FeatureControlManager.isElrFeatureEnabled`: eligible.leader.replicas.version >= 1
        finalized in the (uncommitted) image (KIP-966)."""
        return self.image.features.finalized_versions.get(ELIGIBLE_LEADER_REPLICAS_VERSION, 0) >= 1

    def min_insync_replicas(self, topic: str) -> int:
        """The topic's min.insync.replicas: topic override, else the cluster-wide dynamic default, else the
        static config (Kafka's `ConfigurationControlManager.getTopicConfig`)."""
        configs = self.image.configs
        value = configs.topic_config(topic).get(MIN_IN_SYNC_REPLICAS)
        if value is None:
            value = configs.config_map(ConfigResource(ConfigResourceType.BROKER, "")).get(MIN_IN_SYNC_REPLICAS)
        try:
            return int(value) if value is not None else self.config.min_insync_replicas
        except ValueError:
            return self.config.min_insync_replicas

    def finalized_features(self) -> dict[str, int]:
        features = self.image.features
        finalized = dict(features.finalized_versions)
        if features.metadata_version is not None:
            finalized[METADATA_VERSION] = features.metadata_version
        finalized[KRAFT_VERSION] = self.kraft.kraft_version() if self.kraft is not None else self.config.kraft_version
        return finalized

    # -- the Raft listener -----------------------------------------------------------------------------

    def handle_commit(self, batches: Sequence[MetadataBatch]) -> None:
        for batch in batches:
            if batch.records:  # a control batch (no records) only moves the committed offset
                self.committed_image = _replay(self.committed_image, batch.records, batch.base_offset, batch.epoch,
                                               self._committed_register_offsets)
            self.committed_offset = batch.last_offset
        if not self.is_active():
            self._revert_to_committed()
        self._complete_committed()

    def handle_load_snapshot(self, records: Sequence[MetadataRecord], last_contained_offset: int, epoch: int,
                             last_contained_log_time_ms: int = -1) -> None:
        """Replace the committed state with a snapshot's records (everything up to `last_contained_offset`)."""
        if self.is_active():
            log.error("Asked to load a snapshot ending at %d while active at epoch %s; renouncing",
                      last_contained_offset + 1, self.active_epoch)
            self._renounce()
        delta = MetadataDelta(MetadataImage.EMPTY)
        offsets: dict[int, int] = {}
        for record in records:
            delta.replay(record)
            if isinstance(record, RegisterBrokerRecord):
                offsets[record.broker_id] = last_contained_offset
            elif isinstance(record, UnregisterBrokerRecord):
                offsets.pop(record.broker_id, None)
        self.committed_image = delta.apply(MetadataProvenance(last_contained_offset, epoch, last_contained_log_time_ms,
                                                              True))
        self._committed_register_offsets = offsets
        self.committed_offset = last_contained_offset
        self._revert_to_committed()
        log.info("Loaded a snapshot ending at offset %d (epoch %d): %d brokers, %d topics", last_contained_offset + 1,
                 epoch, len(self.committed_image.cluster.brokers), len(self.committed_image.topics.topics_by_id))
        self._complete_committed()

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        self.leader = leader
        if leader.is_leader(self.node_id):
            if self.active_epoch != leader.epoch:
                if self.is_active():
                    self._renounce()
                self._claim(leader.epoch)
        elif self.is_active():
            self._renounce()

    def _claim(self, epoch: int) -> None:
        log.info("Becoming the active controller at epoch %d, committed offset %d", epoch, self.committed_offset)
        self.active_epoch = epoch
        self._revert_to_committed()
        self.next_write_offset = self.raft.log_end_offset()
        self.last_written_offset = self.next_write_offset - 1
        self.cluster.activate()
        if self.config.auto_leader_rebalance_enable:
            self._next_rebalance_ms = self.clock() + self.config.leader_imbalance_check_interval_ms
        if self.delegation_tokens.is_enabled():
            self._next_token_sweep_ms = self.clock() + self.config.delegation_tokens.expiry_check_interval_ms
        if self.committed_image.features.metadata_version is None:
            # An empty log: the bootstrap records (Kafka's ActivationRecordsGenerator).
            self._write("bootstrap", lambda: ControllerResult(None, activation_records_for_empty_log(
                self.config.bootstrap, self.config.min_insync_replicas)))

    def _renounce(self) -> None:
        log.info("Renouncing leadership at epoch %s; reverting to committed offset %d",
                 self.active_epoch, self.committed_offset)
        self.active_epoch = None
        self.cluster.deactivate()
        self._next_rebalance_ms = None
        self._next_token_sweep_ms = None
        pending, self._pending = self._pending, deque()
        error = _not_controller(self.leader)
        for write in pending:
            write.op.fail(error)
        self._revert_to_committed()

    def _revert_to_committed(self) -> None:
        self.image = self.committed_image
        self._register_offsets = dict(self._committed_register_offsets)

    def _complete_committed(self) -> None:
        while self._pending and self._pending[0].last_offset <= self.committed_offset:
            write = self._pending.popleft()
            write.op.complete(write.response)

    # -- writing ---------------------------------------------------------------------------------------

    def _write(
        self, name: str, generate: Callable[[], ControllerResult[T]],
        on_batch_end: Callable[[int], None] | None = None,
    ) -> PendingOperation[T]:
        """Run `generate` against the uncommitted image, append its records, and answer on commit."""
        if self.active_epoch is None:
            return PendingOperation.failed(_not_controller(self.leader), name)
        epoch = self.active_epoch
        # The Raft layer appends control batches of its own between ours (KIP-853: the VotersRecord of an
        # AddRaftVoter / RemoveRaftVoter): the next write goes at the log's end, not after our last batch.
        self.next_write_offset = max(self.next_write_offset, self.raft.log_end_offset())
        try:
            result = generate()
        except KafkaError as e:
            return PendingOperation.failed(e, name)
        except Exception as e:  # noqa: BLE001 - a bug: our state may be half-changed
            return self._fault(name, e)
        # generate() may have had the Raft layer append a control batch (a kraft.version upgrade's
        # KRaftVersionRecord + VotersRecord): our records go after it.
        self.next_write_offset = max(self.next_write_offset, self.raft.log_end_offset())
        op: PendingOperation[T] = PendingOperation(name)
        if result.records:
            base = self.next_write_offset
            offsets = dict(self._register_offsets)
            try:
                image = _replay(self.image, result.records, base, epoch, offsets)
            except Exception as e:  # noqa: BLE001 - records our own image refuses: never append them
                return self._fault(name, e)
            try:
                last = self.raft.append(epoch, result.records)
            except NotLeaderError:
                self._renounce()
                return PendingOperation.failed(_not_controller(self.leader), name)
            if last != base + len(result.records) - 1:
                # The log and our offsets disagree: our image cannot be trusted; step down (Kafka
                # treats this as a fault and renounces).
                log.error("%s: appended at %d, expected %d; renouncing", name, last, base + len(result.records) - 1)
                self._renounce()
                self.raft.resign(epoch)
                return PendingOperation.failed(_not_controller(self.leader), name)
            self.image, self._register_offsets = image, offsets
            self.last_written_offset = last
            self.next_write_offset = last + 1
        if on_batch_end is not None:
            on_batch_end(self.last_written_offset)
        if self.last_written_offset <= self.committed_offset:
            op.complete(result.response)
        else:
            self._pending.append(_PendingWrite(self.last_written_offset, op, result.response))  # type: ignore[arg-type]
        return op

    def _fault(self, name: str, error: Exception) -> PendingOperation[T]:
        """An unexpected error in a write (Kafka's EventHandlerExceptionInfo: not an ApiException, so it
        causes a failover): step down so a controller with a clean state takes over."""
        log.error("%s failed unexpectedly; renouncing leadership", name, exc_info=error)
        epoch = self.active_epoch
        self._renounce()
        if epoch is not None:
            self.raft.resign(epoch)
        return PendingOperation.failed(KafkaError(f"{name} failed: {error}",
                                                  error_code=ErrorCode.UNKNOWN_SERVER_ERROR), name)

    def _read(self, name: str, read: Callable[[], T]) -> PendingOperation[T]:
        if self.active_epoch is None:
            return PendingOperation.failed(_not_controller(self.leader), name)
        op: PendingOperation[T] = PendingOperation(name)
        try:
            op.complete(read())
        except KafkaError as e:
            op.fail(e)
        return op

    # -- periodic work ---------------------------------------------------------------------------------

    def next_deadline_ms(self) -> int | None:
        """When `poll` has work next (None: nothing scheduled; not active)."""
        if self.cluster.heartbeat_manager is None:
            return None
        deadlines = [d for d in (self.cluster.heartbeat_manager.next_check_time_ms(), self._next_rebalance_ms,
                                 self._next_token_sweep_ms)
                     if d is not None]
        return min(deadlines) if deadlines else None

    def poll(self) -> list[PendingOperation[int | None]]:
        """Run the scheduled work that is due: fence brokers whose session expired (one per write),
        then preferred-leader balancing. Returns the writes it started (a fencing answers the fenced
        broker's id)."""
        started: list[PendingOperation[int | None]] = []
        while self.is_active() and self.cluster.heartbeats().find_one_stale_broker() is not None:
            op = self._write("maybeFenceStaleBroker",
                                                       self.replication.maybe_fence_one_stale_broker)
            started.append(op)
            if op.done() and op.exception() is not None:
                break
        now = self.clock()
        if self.is_active() and self._next_rebalance_ms is not None and now >= self._next_rebalance_ms:
            more = [False]

            def balance() -> ControllerResult[int | None]:
                result = self.replication.maybe_balance_partition_leaders(self.config.max_elections_per_imbalance)
                more[0] = result.response
                return ControllerResult(None, result.records)

            started.append(self._write("maybeBalancePartitionLeaders", balance))
            self._next_rebalance_ms = now if more[0] else now + self.config.leader_imbalance_check_interval_ms
        if self.is_active() and self.delegation_tokens.is_enabled():
            # QuorumController.maybeScheduleNextExpiredDelegationTokenSweep: every
            # delegation.token.expiry.check.interval.ms while tokens are enabled.
            interval = self.config.delegation_tokens.expiry_check_interval_ms
            if self._next_token_sweep_ms is not None and now >= self._next_token_sweep_ms:
                self._next_token_sweep_ms = now + interval
                started.append(self._write("sweepExpiredDelegationTokens", lambda: ControllerResult(
                    None, self.delegation_tokens.sweep_expired_delegation_tokens())))
        return started

    # -- cluster operations (typed service methods) ----------------------------------------------------

    def register_broker_request(self, request: BrokerRegistrationRequest) -> PendingOperation[BrokerRegistrationReply]:
        return self._write("registerBroker", lambda: self.cluster.register_broker(
            request, self.next_write_offset, self.finalized_features()))

    def register_controller_request(self, request: ControllerRegistrationRequest) -> PendingOperation[None]:
        return self._write("registerController", lambda: self.cluster.register_controller(
            request, self.finalized_features()))

    def broker_heartbeat(self, request: BrokerHeartbeatRequest) -> PendingOperation[BrokerHeartbeatReply]:
        broker_id = request.broker_id
        in_controlled_shutdown = [False]

        def generate() -> ControllerResult[BrokerHeartbeatReply]:
            offset = self._register_offsets.get(broker_id)
            if offset is None:
                raise KafkaError(f"Receive a heartbeat from broker {broker_id} before registration",
                                 error_code=ErrorCode.STALE_BROKER_EPOCH)
            result = self.replication.process_broker_heartbeat(request, offset)
            in_controlled_shutdown[0] = result.response.in_controlled_shutdown
            return result

        def batch_end(offset: int) -> None:
            if in_controlled_shutdown[0]:
                self.cluster.heartbeats().maybe_update_controlled_shutdown_offset(broker_id, offset)

        return self._write("processBrokerHeartbeat", generate, batch_end)

    def alter_partition_request(self, request: AlterPartitionRequest, version: int
                                ) -> PendingOperation[AlterPartitionResponse]:
        return self._write("alterPartition", lambda: self.replication.alter_partition(request, version))

    def unregister_broker_request(self, broker_id: int) -> PendingOperation[None]:
        def generate() -> ControllerResult[None]:
            result = self.replication.unregister_broker(broker_id)
            heartbeats = self.cluster.heartbeats()
            heartbeats.remove(broker_id)
            return result

        return self._write("unregisterBroker", generate)

    def elect_leaders_request(self, request: ElectLeadersRequest) -> PendingOperation[ElectLeadersResponse]:
        return self._write("electLeaders", lambda: self.replication.elect_leaders(request))

    def alter_partition_reassignments_request(
        self, request: AlterPartitionReassignmentsRequest
    ) -> PendingOperation[AlterPartitionReassignmentsResponse]:
        return self._write("alterPartitionReassignments",
                           lambda: self.replication.alter_partition_reassignments(request))

    def list_partition_reassignments_request(
        self, request: ListPartitionReassignmentsRequest
    ) -> PendingOperation[ListPartitionReassignmentsResponse]:
        """A read of the committed state (Kafka's appendReadEvent at the last stable offset)."""
        return self._read("listPartitionReassignments", lambda: self.replication.list_partition_reassignments(
            request.topics, self.committed_image))

    def allocate_producer_ids_request(self, broker_id: int, broker_epoch: int) -> PendingOperation[ProducerIdsBlock]:
        def generate() -> ControllerResult[ProducerIdsBlock]:
            self.cluster.check_broker_epoch(broker_id, broker_epoch)
            return self.producer_ids.generate_next_producer_id(broker_id, broker_epoch)

        return self._write("allocateProducerIds", generate)

    # -- Controller (what the API handlers await) ------------------------------------------------------

    async def process_broker_registration(self, request: BrokerRegistrationRequest) -> BrokerRegistrationReply:
        return await self.register_broker_request(request)

    async def register_controller(self, request: ControllerRegistrationRequest) -> None:
        return await self.register_controller_request(request)

    async def process_broker_heartbeat(self, request: BrokerHeartbeatRequest) -> BrokerHeartbeatReply:
        return await self.broker_heartbeat(request)

    async def alter_partition(self, request: AlterPartitionRequest, version: int) -> AlterPartitionResponse:
        return await self.alter_partition_request(request, version)

    async def unregister_broker(self, broker_id: int) -> None:
        await self.unregister_broker_request(broker_id)

    async def elect_leaders(self, request: ElectLeadersRequest) -> ElectLeadersResponse:
        return await self.elect_leaders_request(request)

    async def alter_partition_reassignments(
        self, request: AlterPartitionReassignmentsRequest
    ) -> AlterPartitionReassignmentsResponse:
        return await self.alter_partition_reassignments_request(request)

    async def list_partition_reassignments(
        self, request: ListPartitionReassignmentsRequest
    ) -> ListPartitionReassignmentsResponse:
        return await self.list_partition_reassignments_request(request)

    async def allocate_producer_ids(self, broker_id: int, broker_epoch: int) -> ProducerIdsBlock:
        return await self.allocate_producer_ids_request(broker_id, broker_epoch)

    async def create_acls(self, acls: Sequence[StandardAcl]) -> list[AclCreateResult]:
        acls = list(acls)
        return await self._write("createAcls", lambda: self.acls.create_acls(acls))

    async def delete_acls(self, filters: Sequence[AclFilter]) -> list[AclDeleteResult]:
        filters = list(filters)
        return await self._write("deleteAcls", lambda: self.acls.delete_acls(filters))

    async def alter_user_scram_credentials(
        self, request: AlterUserScramCredentialsRequest
    ) -> AlterUserScramCredentialsResponse:
        return await self._write("alterUserScramCredentials", lambda: self.scram.alter_credentials(request))

    async def create_delegation_token(
        self, requester: str, request: CreateDelegationTokenRequest
    ) -> CreateDelegationTokenResponse:
        return await self._write("createDelegationToken",
                                 lambda: self.delegation_tokens.create_delegation_token(requester, request))

    async def renew_delegation_token(
        self, principal: str, request: RenewDelegationTokenRequest
    ) -> RenewDelegationTokenResponse:
        return await self._write("renewDelegationToken",
                                 lambda: self.delegation_tokens.renew_delegation_token(principal, request))

    async def expire_delegation_token(
        self, principal: str, request: ExpireDelegationTokenRequest
    ) -> ExpireDelegationTokenResponse:
        return await self._write("expireDelegationToken",
                                 lambda: self.delegation_tokens.expire_delegation_token(principal, request))

    def _write_each(self, name: str, generates: Sequence[Callable[[], list[MetadataRecord]]],
                    validate_only: bool = False) -> PendingOperation[list[KafkaError | None]]:
        """One controller event for a whole request (Kafka's `deleteTopics`, `incrementalAlterConfigs`,
        `legacyAlterConfigs` write events): every resource's records are generated against the same
        uncommitted image (the resources are distinct: the API layer answered duplicates), those of the
        resources that passed their checks are appended as one batch and commit together, and each
        resource is answered with its own error (None: done). Validate-only writes nothing."""
        def generate() -> ControllerResult[list[KafkaError | None]]:
            outcomes: list[KafkaError | None] = []
            records: list[MetadataRecord] = []
            for g in generates:
                try:
                    produced = g()
                except KafkaError as e:
                    outcomes.append(e)
                    continue
                outcomes.append(None)
                if not validate_only:
                    records.extend(produced)
            return ControllerResult(outcomes, records)

        return self._write(name, generate)

    async def delete_topics(self, names: Sequence[str]) -> list[KafkaError | None]:
        replication = self.replication

        def deletion(name: str) -> Callable[[], list[MetadataRecord]]:
            return lambda: replication.delete_topic(name).records

        return await self._write_each("deleteTopics", [deletion(n) for n in names])

    async def alter_configs(self, alterations: Sequence[ConfigAlteration],
                            validate_only: bool = False) -> list[KafkaError | None]:
        configuration = self.configuration

        def alteration(a: ConfigAlteration) -> Callable[[], list[MetadataRecord]]:
            if isinstance(a, TopicConfigsAlteration):
                if a.replace is not None:
                    replace = a.replace
                    return lambda: configuration.alter_topic_configs(a.name, replace).records
                return lambda: configuration.incremental_alter_topic_configs(a.name, a.ops).records
            if isinstance(a, GroupConfigsAlteration):
                return lambda: configuration.incremental_alter_group_configs(a.group_id, a.ops).records
            return lambda: configuration.alter_broker_configs(a.default, a.changes, a.broker_id).records

        legacy = any(isinstance(a, TopicConfigsAlteration) and a.replace is not None for a in alterations)
        return await self._write_each("legacyAlterConfigs" if legacy else "incrementalAlterConfigs",
                                      [alteration(a) for a in alterations], validate_only)

    async def create_topics(self, topics: Sequence[NewTopic], validate_only: bool = False,
                            quota: PartitionChangeQuota | None = None) -> list[TopicInfo | KafkaError]:
        """Kafka's `QuorumController.createTopics`: one write event, one atomic batch, per-topic errors,
        answered on commit; validate-only appends nothing."""
        if not topics:
            return []
        replication = self.replication

        def generate() -> ControllerResult[list[TopicInfo | KafkaError]]:
            result = topic_batches.create_topics(replication, topics, quota)
            return ControllerResult(result.response) if validate_only else result

        return await self._write("createTopics", generate)

    async def create_partitions_all(self, topics: Sequence[CreatePartitionsTopic], validate_only: bool = False,
                                    quota: PartitionChangeQuota | None = None) -> list[TopicInfo | KafkaError]:
        """Kafka's `QuorumController.createPartitions`: as `create_topics`, one batch per request."""
        if not topics:
            return []
        replication = self.replication

        def generate() -> ControllerResult[list[TopicInfo | KafkaError]]:
            result = topic_batches.create_partitions(replication, topics, quota)
            return ControllerResult(result.response) if validate_only else result

        return await self._write("createPartitions", generate)

    def _topic_write(self, name: str, generate: Callable[[], ControllerResult[TopicInfo]],
                     validate_only: bool) -> PendingOperation[TopicInfo]:
        if validate_only:
            return self._write(name, lambda: ControllerResult(generate().response))
        return self._write(name, generate)

    async def create_new_topic(self, topic: NewTopic, validate_only: bool = False) -> TopicInfo:
        return await self._topic_write("createTopics", lambda: self.replication.create_topic(
            topic.name, topic.num_partitions, topic.replication_factor, topic.configs, topic.assignments),
            validate_only)

    async def delete_topic(self, name: str) -> TopicInfo:
        return await self._write("deleteTopics", lambda: self.replication.delete_topic(name))

    async def delete_topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo:
        return await self._write("deleteTopics", lambda: self.replication.delete_topic_by_id(topic_id))

    async def create_partitions(
        self, name: str, new_total: int, validate_only: bool = False,
        assignments: Sequence[Sequence[int]] | None = None, records_in_request: int = 0,
    ) -> TopicInfo:
        return await self._topic_write("createPartitions", lambda: self.replication.create_partitions(
            name, new_total, assignments, records_in_request), validate_only)

    async def incremental_alter_topic_configs(
        self, name: str, ops: Iterable[tuple[str, int, str | None]], validate_only: bool = False
    ) -> TopicInfo:
        ops = list(ops)
        return await self._topic_write("incrementalAlterConfigs", lambda: self.configuration.
                                       incremental_alter_topic_configs(name, ops), validate_only)

    async def alter_topic_configs(
        self, name: str, configs: Mapping[str, str | None], validate_only: bool = False
    ) -> TopicInfo:
        return await self._topic_write("legacyAlterConfigs", lambda: self.configuration.alter_topic_configs(
            name, configs), validate_only)

    async def incremental_alter_group_configs(
        self, group_id: str, ops: Iterable[tuple[str, int, str | None]], validate_only: bool = False
    ) -> None:
        ops = list(ops)

        def generate() -> ControllerResult[None]:
            result = self.configuration.incremental_alter_group_configs(group_id, ops)
            return ControllerResult(None) if validate_only else result

        await self._write("incrementalAlterConfigs", generate)

    async def alter_broker_configs(
        self, default: bool, changes: Mapping[str, str | None], validate_only: bool = False,
        broker_id: int | None = None,
    ) -> None:
        def generate() -> ControllerResult[None]:
            result = self.configuration.alter_broker_configs(default, changes, broker_id)
            return ControllerResult(None) if validate_only else result

        await self._write("incrementalAlterConfigs", generate)

    async def alter_client_quotas(
        self, alterations: Sequence[ClientQuotaAlteration], validate_only: bool = False
    ) -> list[ClientQuotaAlterationResult]:
        def generate() -> ControllerResult[list[ClientQuotaAlterationResult]]:
            result = self.client_quotas.alter_client_quotas(alterations)
            return ControllerResult(result.response) if validate_only else result

        return await self._write("alterClientQuotas", generate)

    async def update_features(self, updates: Mapping[str, tuple[int, int]], validate_only: bool = False) -> None:
        """UpdateFeatures (Kafka's `QuorumController.updateFeatures`): the FeatureControlManager's checks
        (`feature_control`) against the latest image, then `ConfigurationControlManager.update_features`
        (the ELR safety records ahead of an eligible.leader.replicas.version upgrade); nothing is written
        when validating."""
        def generate() -> ControllerResult[None]:
            if self.kraft is None:
                records = feature_update_records(self.config.node_id, self.image, updates)
            else:
                records = FeatureControlManager(
                    self.config.node_id, {**SUPPORTED_FEATURES, KRAFT_VERSION: (0, 1)}, self.kraft,
                    self.active_epoch if self.active_epoch is not None else -1,
                ).update_features(self.image, updates, validate_only)
            return ControllerResult(None, self.configuration.update_features(records, updates, validate_only))

        await self._write("updateFeatures", generate)

    def register_broker(self, listeners: Sequence[tuple[str, str, int, str]], rack: str | None) -> int:
        raise KafkaError("In a KRaft cluster a broker registers with BrokerRegistration "
                         "(process_broker_registration), not through the local controller.",
                         error_code=ErrorCode.INVALID_REQUEST)

    def close(self) -> None:
        """Nothing to release: the Raft layer owns the log. Pending answers fail with NOT_CONTROLLER."""
        if self.is_active():
            self._renounce()
