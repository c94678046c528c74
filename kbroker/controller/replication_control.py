"""Topics and partitions on the controller: Kafka's `ReplicationControlManager`.

Validates CreateTopics, DeleteTopics and CreatePartitions in Kafka's order of checks and with Kafka
4.3's messages, and turns each into metadata records: `TopicRecord` + one `PartitionRecord` per
partition (+ a `ConfigRecord` per override) for a new topic, `PartitionRecord`s for added partitions,
`RemoveTopicRecord` for a deletion. Replica placement is the single registered broker (this node):
replicas = ISR = [node], leader = node, leader epoch 0, partition epoch 0, as Kafka's controller
writes a new partition; a replication factor above the number of registered brokers is refused with
Kafka's INVALID_REPLICATION_FACTOR message.

Bounds on one request's work (issue 19, finding 4: a CreateTopics for a million partitions hung the
broker). Kafka's controller caps the records of one user operation at `MAX_RECORDS_PER_USER_OP`
(10,000, `QuorumController`): a CreateTopics whose partitions add up to more is refused as a whole
with POLICY_VIOLATION "Excessively large number of partitions per request."
(`validate_total_number_of_partitions`, checked before anything else); a CreatePartitions whose added
partitions, counted over the request's topics, pass it fails the topic that crosses it with
UNKNOWN_SERVER_ERROR and no message (Kafka's records list is a `BoundedList` whose overflow is not an
`ApiException`; checked against Kafka 4.3.1). Kafka has no bound on the partitions one broker hosts;
kbroker adds `kbroker.max.partitions` (docs/operations.md, "Resource bounds"): each hosted partition
holds at least one file descriptor and its share of memory, and on a single node nothing else stops
a client from exhausting them. Going past it is POLICY_VIOLATION with a message naming the key.

Pure: reads the image it is given, returns a `ControllerResult`, writes nothing.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence

from kbroker.controller.broker_heartbeat_manager import (
    BrokerControlState,
    BrokerHeartbeatReply,
    HeartbeatRequest,
)
from kbroker.controller.cluster_control import ClusterControlManager
from kbroker.controller.partition_change import Election, PartitionChangeBuilder
from kbroker.controller.replica_placer import InvalidReplicationFactorError, StripedReplicaPlacer
from kbroker.controller.result import ControllerResult, MetadataRecord
from kbroker.metadata.image import (
    NO_LEADER,
    NO_LEADER_CHANGE,
    LeaderRecoveryState,
    MetadataImage,
    PartitionRegistration,
    TopicIdPartition,
)
from kbroker.metadata.views import TOPIC_RESOURCE, MetadataView, TopicInfo
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.messages.alter_partition import AlterPartitionRequest, AlterPartitionResponse
from kbroker.protocol.messages.alter_partition_reassignments import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
)
from kbroker.protocol.messages.broker_heartbeat import BrokerHeartbeatRequest
from kbroker.protocol.messages.elect_leaders import ElectLeadersRequest, ElectLeadersResponse
from kbroker.protocol.messages.list_partition_reassignments import (
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
)
from kbroker.protocol.metadata_records import (
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnregisterBrokerRecord,
)
from kbroker.protocol.topic import CLUSTER_METADATA_TOPIC_NAME as CLUSTER_METADATA_TOPIC
from kbroker.protocol.topic import INTERNAL_TOPICS

MAX_TOPIC_NAME_LENGTH = 249
# BrokerRegistrationFencingChange / BrokerRegistrationInControlledShutdownChange values.
FENCE, UNFENCE = 1, -1
IN_CONTROLLED_SHUTDOWN = 1
# QuorumController.MAX_RECORDS_PER_USER_OP: the most records one user operation may produce.
MAX_RECORDS_PER_USER_OP = 10000
EXCESSIVE_PARTITIONS_MESSAGE = "Excessively large number of partitions per request."
MAX_PARTITIONS_CONFIG = "kbroker.max.partitions"
_LEGAL_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")


def _err(code: ErrorCode, message: str | None = None) -> KafkaError:
    return KafkaError(message, error_code=code)


def validate_topic_name(name: str | None) -> None:
    """Kafka's `Topic.validate`, with Kafka 4.3's messages; raises INVALID_TOPIC_EXCEPTION."""
    problem = None
    if not name:
        problem = "the empty string is not allowed"
    elif name in (".", ".."):
        problem = f"'{name}' is not allowed"
    elif len(name) > MAX_TOPIC_NAME_LENGTH:
        problem = f"the length of '{name}' is longer than the max allowed length {MAX_TOPIC_NAME_LENGTH}"
    elif not _LEGAL_TOPIC_NAME.fullmatch(name):
        problem = f"'{name}' contains one or more characters other than ASCII alphanumerics, '.', '_' and '-'"
    if problem is not None:
        raise _err(ErrorCode.INVALID_TOPIC_EXCEPTION, f"Topic name is invalid: {problem}")


def validate_total_number_of_partitions(
    topics: Iterable[tuple[int, int]], default_num_partitions: int
) -> None:
    """Kafka's `ReplicationControlManager.validateTotalNumberOfPartitions` for one CreateTopics request.

    `topics`: (num_partitions, number of manual assignments) of each topic. A topic with assignments
    counts them; without, -1 counts `num.partitions` and a non-positive count nothing (it fails later
    on its own). Raises POLICY_VIOLATION when the total is above `MAX_RECORDS_PER_USER_OP`.
    """
    total = 0
    for num_partitions, num_assignments in topics:
        if num_assignments:
            total += num_assignments
        elif num_partitions == -1:
            total += default_num_partitions
        elif num_partitions > 0:
            total += num_partitions
    if total > MAX_RECORDS_PER_USER_OP:
        raise _err(ErrorCode.POLICY_VIOLATION, EXCESSIVE_PARTITIONS_MESSAGE)


def _collision_key(name: str) -> str:
    # Kafka's `Topic.unifyCollisionChars`: '.' and '_' collide in metric names.
    return name.replace(".", "_")


def new_topic_id() -> uuid.UUID:
    """Kafka's `Uuid.randomUuid`: never an id whose base64 form starts with '-' (command-line tools
    would take it for an option), nor the zero id."""
    while True:
        tid = uuid.uuid4()
        if tid.bytes[0] >> 2 != 62 and tid.int != 0:
            return tid


def partition_records(topic_id: uuid.UUID, partitions: Mapping[int, Sequence[int]]) -> list[MetadataRecord]:
    """A new partition as Kafka's controller writes it: the first replica leads, ISR = replicas."""
    return [
        PartitionRecord(partition_id=p, topic_id=topic_id, replicas=list(replicas), isr=list(replicas),
                        removing_replicas=[], adding_replicas=[], leader=replicas[0], leader_epoch=0,
                        partition_epoch=0)
        for p, replicas in sorted(partitions.items())
    ]


class ReplicationControlManager:
    """Creates, deletes and grows topics as records, checking them against the current image."""

    def __init__(
        self,
        view: Callable[[], MetadataView],
        validate_topic_configs: Callable[[Mapping[str, str | None]], dict[str, str]],
        *,
        node_id: int,
        default_num_partitions: Callable[[], int],
        default_replication_factor: Callable[[], int],
        delete_topic_enable: Callable[[], bool],
        max_partitions: Callable[[], int] | None = None,
        cluster: ClusterControlManager | None = None,
        placer: StripedReplicaPlacer | None = None,
        unclean_leader_election_enabled: Callable[[str], bool] | None = None,
        eligible_leader_replicas_enabled: Callable[[], bool] | None = None,
        min_insync_replicas: Callable[[str], int] | None = None,
    ) -> None:
        self._view = view
        # Cluster mode (the quorum controller): brokers come from the image's registrations. Without
        # it, the single node's placement: every replica list is [node_id].
        self.cluster = cluster
        self.placer = placer if placer is not None else StripedReplicaPlacer()
        self._unclean = unclean_leader_election_enabled or (lambda _topic: False)
        # KIP-966: Kafka's `FeatureControlManager.isElrFeatureEnabled` (eligible.leader.replicas.version
        # finalized >= 1) and the topic's configured min.insync.replicas (topic, cluster default, static).
        self._elr_enabled = eligible_leader_replicas_enabled or (lambda: False)
        self._min_insync_replicas = min_insync_replicas or (lambda _topic: 1)
        self._validate_topic_configs = validate_topic_configs
        self.node_id = node_id
        self._default_num_partitions = default_num_partitions
        self._default_replication_factor = default_replication_factor
        self._delete_topic_enable = delete_topic_enable
        self._max_partitions = max_partitions

    # -- validation ------------------------------------------------------------------------------

    def _check_partition_limit(self, view: MetadataView, adding: int) -> None:
        """`kbroker.max.partitions`: the partitions this (single) node hosts, after the change."""
        limit = -1 if self._max_partitions is None else self._max_partitions()
        if limit < 0:
            return
        hosted = sum(t.num_partitions for t in view.topics())
        if hosted + adding > limit:
            raise _err(ErrorCode.POLICY_VIOLATION,
                       f"Adding {adding} partition(s) would exceed the limit of {limit} partitions on this "
                       f"broker ({MAX_PARTITIONS_CONFIG}); it hosts {hosted}.")

    def _check_name_free(self, view: MetadataView, name: str) -> None:
        if view.topic(name) is not None:
            raise _err(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        key = _collision_key(name)
        for other in view.topics():
            if _collision_key(other.name) == key:
                raise _err(ErrorCode.INVALID_TOPIC_EXCEPTION,
                           f"Topic '{name}' collides with existing topic: {other.name}")

    def _validate_assignment(self, broker_ids: Sequence[int], replication_factor: int | None) -> None:
        """Kafka's `validateManualPartitionAssignment` against the registered brokers (this node)."""
        if not broker_ids:
            raise _err(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                       "The manual partition assignment includes an empty replica list.")
        seen: set[int] = set()
        for b in broker_ids:
            if b in seen:
                raise _err(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                           f"The manual partition assignment includes the broker {b} more than once.")
            seen.add(b)
            registered = self.node_id == b if self.cluster is None else self.cluster.registration(b) is not None
            if not registered:
                raise _err(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                           f"The manual partition assignment includes broker {b}, but no such broker is registered.")
        if replication_factor is not None and replication_factor != len(broker_ids):
            raise _err(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"The manual partition assignment includes a partition with {len(broker_ids)} replica(s), "
                f"but this is not consistent with previous partitions, which have {replication_factor} replica(s).",
            )

    def _place(self, partitions: range, replication_factor: int) -> dict[int, list[int]]:
        """Kafka's `StripedReplicaPlacer` over the registered brokers (one on a single node)."""
        if self.cluster is not None:
            try:
                placed = self.placer.place(len(partitions), replication_factor, self.cluster.usable_brokers())
            except InvalidReplicationFactorError as e:
                raise _err(ErrorCode.INVALID_REPLICATION_FACTOR,
                           f"Unable to replicate the partition {replication_factor} time(s): {e}") from None
            return dict(zip(partitions, placed, strict=True))
        if replication_factor > 1:
            raise _err(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                f"Unable to replicate the partition {replication_factor} time(s): The target replication "
                f"factor of {replication_factor} cannot be reached because only 1 broker(s) are registered "
                "or some brokers have all their log directories cordoned.",
            )
        return {p: [self.node_id] for p in partitions}

    # -- create / delete / grow -------------------------------------------------------------------

    def create_topic(
        self,
        name: str,
        num_partitions: int = -1,
        replication_factor: int = -1,
        configs: Mapping[str, str | None] | None = None,
        assignments: Mapping[int, Sequence[int]] | None = None,
    ) -> ControllerResult[TopicInfo]:
        """Create a topic the way Kafka's controller does, in its order of checks.

        Name rules, then existence and '.'/'_' collisions, then configs, then the manual assignment or
        the partition count and replication factor (-1 = `num.partitions` / `default.replication.factor`).
        """
        view = self._view()
        validate_topic_name(name)
        if name == CLUSTER_METADATA_TOPIC:
            raise _err(ErrorCode.INVALID_REQUEST, f"Creation of internal topic {name} is prohibited.")
        self._check_name_free(view, name)
        clean = self._validate_topic_configs(configs or {})
        if assignments:
            if replication_factor != -1:
                raise _err(ErrorCode.INVALID_REQUEST, "A manual partition assignment was specified, "
                           "but replication factor was not set to -1.")
            if num_partitions != -1:
                raise _err(ErrorCode.INVALID_REQUEST, "A manual partition assignment was specified, "
                           "but numPartitions was not set to -1.")
            rf: int | None = None
            for _, broker_ids in sorted(assignments.items()):
                self._validate_assignment(broker_ids, rf)
                rf = len(broker_ids)
            if sorted(assignments) != list(range(len(assignments))):
                raise _err(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                           "partitions should be a consecutive 0-based integer sequence")
            placement = {p: list(b) for p, b in assignments.items()}
            num_partitions, replication_factor = len(assignments), rf or 1
        else:
            if replication_factor < -1 or replication_factor == 0:
                raise _err(ErrorCode.INVALID_REPLICATION_FACTOR,
                           "Replication factor must be larger than 0, or -1 to use the default value.")
            if num_partitions < -1 or num_partitions == 0:
                raise _err(ErrorCode.INVALID_PARTITIONS,
                           "Number of partitions was set to an invalid non-positive value.")
            if num_partitions == -1:
                num_partitions = self._default_num_partitions()
            if replication_factor == -1:
                replication_factor = self._default_replication_factor()
            placement = self._place(range(num_partitions), replication_factor)
        self._check_partition_limit(view, num_partitions)
        info = TopicInfo(name=name, topic_id=new_topic_id(), num_partitions=num_partitions,
                         replication_factor=replication_factor, configs=clean,
                         is_internal=name in INTERNAL_TOPICS)
        records: list[MetadataRecord] = [TopicRecord(name=name, topic_id=info.topic_id)]
        records += [ConfigRecord(resource_type=TOPIC_RESOURCE, resource_name=name, name=k, value=v)
                    for k, v in sorted(clean.items())]
        records += self._partition_records(info.topic_id, placement, manual=bool(assignments),
                                           replication_factor=replication_factor)
        return ControllerResult(info, records)

    def existing(self, name: str) -> TopicInfo:
        info = self._view().topic(name)
        if info is None:
            raise _err(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        return info

    def delete_topic(self, name: str) -> ControllerResult[TopicInfo]:
        """Delete a topic; UNKNOWN_TOPIC_OR_PARTITION when it does not exist."""
        if not self._delete_topic_enable():
            raise _err(ErrorCode.TOPIC_DELETION_DISABLED, "Topic deletion is disabled.")
        info = self.existing(name)
        return ControllerResult(info, [RemoveTopicRecord(topic_id=info.topic_id)])

    def delete_topic_by_id(self, topic_id: uuid.UUID) -> ControllerResult[TopicInfo]:
        info = self._view().topic_by_id(topic_id)
        if info is None:
            raise _err(ErrorCode.UNKNOWN_TOPIC_ID)
        return self.delete_topic(info.name)

    def create_partitions(
        self, name: str, new_total: int, assignments: Sequence[Sequence[int]] | None = None,
        records_in_request: int = 0,
    ) -> ControllerResult[TopicInfo]:
        """Grow a topic to `new_total` partitions (Kafka never shrinks one).

        `records_in_request`: partitions the same CreatePartitions request already added (or, validate
        only, would add) for its earlier topics; with this topic's they may not pass
        `MAX_RECORDS_PER_USER_OP`.
        """
        info = self.existing(name)
        current = info.num_partitions
        if new_total == current:
            raise _err(ErrorCode.INVALID_PARTITIONS, f"Topic already has {current} partition(s).")
        if new_total < current:
            raise _err(ErrorCode.INVALID_PARTITIONS, f"The topic {name} currently has {current} partition(s); "
                       f"{new_total} would not be an increase.")
        added = new_total - current
        if assignments is not None:
            if len(assignments) != added:
                raise _err(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"Attempted to add {added} additional "
                           f"partition(s), but only {len(assignments)} assignment(s) were specified.")
            for broker_ids in assignments:
                self._validate_assignment(broker_ids, info.replication_factor)
            placement = {current + i: list(b) for i, b in enumerate(assignments)}
        else:
            placement = self._place(range(current, new_total), info.replication_factor)
        if records_in_request + added > MAX_RECORDS_PER_USER_OP:
            # Kafka: BoundedListTooLongException, not an ApiException -> UNKNOWN_SERVER_ERROR, no message.
            raise KafkaError(None, error_code=ErrorCode.UNKNOWN_SERVER_ERROR)
        self._check_partition_limit(self._view(), added)
        grown = TopicInfo(info.name, info.topic_id, new_total, info.replication_factor,
                          dict(info.configs), info.is_internal)
        records = self._partition_records(info.topic_id, placement, manual=assignments is not None,
                                          replication_factor=info.replication_factor)
        return ControllerResult(grown, records)

    def _partition_records(self, topic_id: uuid.UUID, placement: Mapping[int, Sequence[int]], *, manual: bool,
                           replication_factor: int) -> list[MetadataRecord]:
        """New partitions' records. On one node: replicas = ISR, the first replica leads. In a cluster
        (Kafka's `buildPartitionRegistration`): the ISR is the active replicas, the first of them leads,
        each replica gets its broker's default directory."""
        cluster = self.cluster
        if cluster is None:
            return partition_records(topic_id, placement)
        records: list[MetadataRecord] = []
        for p, replicas in sorted(placement.items()):
            isr = [r for r in replicas if cluster.is_active(r)]
            if not isr:
                if manual:
                    raise _err(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "All brokers specified in the manual partition "
                               f"assignment for partition {p} are fenced or in controlled shutdown.")
                raise _err(ErrorCode.INVALID_REPLICATION_FACTOR, f"Unable to replicate the partition "
                           f"{replication_factor} time(s): All brokers are currently fenced or in controlled shutdown.")
            records.append(PartitionRecord(
                partition_id=p, topic_id=topic_id, replicas=list(replicas), isr=isr, removing_replicas=[],
                adding_replicas=[], leader=isr[0], leader_epoch=0, partition_epoch=0,
                directories=[cluster.default_dir(r) for r in replicas]))
        return records

    # -- leadership and ISR (cluster mode) -----------------------------------------------------------
    #
    # Kafka's ReplicationControlManager also owns every partition change driven by brokers: fencing,
    # unfencing, controlled shutdown, unregistration, AlterPartition, ElectLeaders and preferred-leader
    # balancing. Each goes through `PartitionChangeBuilder`. Kafka keeps a BrokersToIsrs index; this
    # scans the image (a few thousand partitions cost well under a millisecond per broker event).

    def _cluster(self) -> ClusterControlManager:
        if self.cluster is None:
            raise RuntimeError("no cluster control: a single-node controller has no broker lifecycle")
        return self.cluster

    def _image(self) -> MetadataImage:
        return self._view().image

    def partitions_with_broker_in_isr(self, broker_id: int) -> list[TopicIdPartition]:
        return [TopicIdPartition(t.id, i) for t in self._image().topics for i, p in sorted(t.partitions.items())
                if broker_id in p.isr]

    def partitions_with_broker_in_elr(self, broker_id: int) -> list[TopicIdPartition]:
        """Kafka's `BrokersToElrs.partitionsWithBrokerInElr`."""
        return [TopicIdPartition(t.id, i) for t in self._image().topics for i, p in sorted(t.partitions.items())
                if broker_id in p.elr]

    def is_elr_enabled(self) -> bool:
        return self._elr_enabled()

    def topic_effective_min_isr(self, topic_name: str) -> int:
        """Kafka's `getTopicEffectiveMinIsr`: min(min.insync.replicas, the topic's replication factor)."""
        min_isr = self._min_insync_replicas(topic_name)
        topic = self._image().topics.topics_by_name.get(topic_name)
        if topic is None or not topic.partitions:
            return min_isr
        # Kafka reads the first partition it iterates: partition 0 here, with no scan (this runs once per
        # partition moved, e.g. for each of a broker's partitions in a controlled shutdown).
        first = topic.partitions.get(0)
        if first is None:
            first = topic.partitions[min(topic.partitions)]
        return min(min_isr, len(first.replicas))

    def partitions_with_no_leader(self) -> list[TopicIdPartition]:
        return [TopicIdPartition(t.id, i) for t in self._image().topics for i, p in sorted(t.partitions.items())
                if p.leader == NO_LEADER]

    def has_leaderships(self, broker_id: int) -> bool:
        return any(p.leader == broker_id for t in self._image().topics for p in t.partitions.values())

    def _acceptor(self, partition: PartitionRegistration, base: Callable[[int], bool]) -> Callable[[int], bool]:
        """Kafka's LeaderAcceptor: `base` and the replica's directory online on its broker."""
        cluster = self._cluster()

        def accept(broker_id: int) -> bool:
            return base(broker_id) and cluster.has_online_dir(broker_id, partition.directory(broker_id))

        return accept

    def _builder(self, topic_name: str, topic_id: uuid.UUID, index: int, partition: PartitionRegistration,
                 base: Callable[[int], bool] | None = None) -> PartitionChangeBuilder:
        cluster = self._cluster()
        builder = PartitionChangeBuilder(partition, topic_id, index,
                                         self._acceptor(partition, base or cluster.is_active),
                                         default_dir=cluster.default_dir,
                                         min_isr=self.topic_effective_min_isr(topic_name),
                                         eligible_leader_replicas_enabled=self.is_elr_enabled())
        if self._unclean(topic_name):
            builder.set_election(Election.UNCLEAN)
        return builder

    def generate_leader_and_isr_updates(
        self, broker_to_remove: int, broker_to_add: int, records: list[MetadataRecord],
        partitions: Sequence[TopicIdPartition], broker_with_unclean_shutdown: int = NO_LEADER,
    ) -> None:
        """Kafka's `generateLeaderAndIsrUpdates`: drop `broker_to_remove` from each partition's ISR and
        never elect it; accept `broker_to_add` as a leader although the image still shows it fenced;
        `broker_with_unclean_shutdown` (KIP-966) leaves the ISR and the ELR and is never elected."""
        cluster = self._cluster()
        gone = (broker_to_remove, broker_with_unclean_shutdown)

        def acceptable(r: int) -> bool:
            return r not in gone and (r == broker_to_add or cluster.is_active(r))

        image = self._image()
        for tp in partitions:
            topic = image.topics.topics_by_id[tp.topic_id]
            partition = topic.partitions[tp.partition]
            builder = self._builder(topic.name, topic.id, tp.partition, partition, acceptable)
            if broker_with_unclean_shutdown != NO_LEADER:
                builder.set_unclean_shutdown_replicas([broker_with_unclean_shutdown])
            builder.set_target_isr([r for r in partition.isr if r not in gone])
            record = builder.build()
            if record is not None:
                records.append(record)

    def handle_broker_fenced(self, broker_id: int, records: list[MetadataRecord]) -> None:
        """Remove it from every ISR (electing new leaders), then fence it: Kafka 4.3 writes a
        BrokerRegistrationChangeRecord(fenced=1) (FenceBrokerRecord before metadata.version 3.3-IV2)."""
        registration = self._cluster().registration(broker_id)
        if registration is None:
            raise RuntimeError(f"Can't find broker registration for broker {broker_id}")
        self.generate_leader_and_isr_updates(broker_id, NO_LEADER, records,
                                             self.partitions_with_broker_in_isr(broker_id))
        records.append(BrokerRegistrationChangeRecord(broker_id=broker_id, broker_epoch=registration.epoch,
                                                      fenced=FENCE))

    def handle_broker_unfenced(self, broker_id: int, broker_epoch: int, records: list[MetadataRecord]) -> None:
        """Unfence it, then give it the leaderless partitions it can lead."""
        records.append(BrokerRegistrationChangeRecord(broker_id=broker_id, broker_epoch=broker_epoch,
                                                      fenced=UNFENCE))
        self.generate_leader_and_isr_updates(NO_LEADER, broker_id, records, self.partitions_with_no_leader())

    def handle_broker_in_controlled_shutdown(self, broker_id: int, broker_epoch: int,
                                             records: list[MetadataRecord]) -> None:
        """Mark it in controlled shutdown, then move its leaderships away and drop it from ISRs."""
        if not self._cluster().in_controlled_shutdown(broker_id):
            records.append(BrokerRegistrationChangeRecord(broker_id=broker_id, broker_epoch=broker_epoch,
                                                          in_controlled_shutdown=IN_CONTROLLED_SHUTDOWN))
        self.generate_leader_and_isr_updates(broker_id, NO_LEADER, records,
                                             self.partitions_with_broker_in_isr(broker_id))

    def handle_broker_shutdown(self, broker_id: int, clean: bool, records: list[MetadataRecord]) -> None:
        """A broker's previous incarnation is gone (it re-registered). With ELR and an unclean shutdown
        (its registration did not name the epoch it shut down with: it may have lost unflushed records)
        it leaves every ISR and every ELR (Kafka's `handleBrokerUncleanShutdown`); otherwise it leaves
        the ISRs as if fenced, and stays in the ELRs it is in (KIP-966)."""
        if self.is_elr_enabled() and not clean:
            self.generate_leader_and_isr_updates(NO_LEADER, NO_LEADER, records,
                                                 self.partitions_with_broker_in_isr(broker_id), broker_id)
            self.generate_leader_and_isr_updates(NO_LEADER, NO_LEADER, records,
                                                 self.partitions_with_broker_in_elr(broker_id), broker_id)
        else:
            self.generate_leader_and_isr_updates(broker_id, NO_LEADER, records,
                                                 self.partitions_with_broker_in_isr(broker_id))

    def handle_broker_unregistered(self, broker_id: int, broker_epoch: int, records: list[MetadataRecord]) -> None:
        self.generate_leader_and_isr_updates(broker_id, NO_LEADER, records,
                                             self.partitions_with_broker_in_isr(broker_id))
        self.generate_leader_and_isr_updates(broker_id, NO_LEADER, records,
                                             self.partitions_with_broker_in_elr(broker_id))
        records.append(UnregisterBrokerRecord(broker_id=broker_id, broker_epoch=broker_epoch))

    def handle_directories_offline(self, broker_id: int, broker_epoch: int, offline: list[uuid.UUID],
                                   records: list[MetadataRecord]) -> None:
        """Log directories a broker reports offline in its heartbeat (KIP-858): its replicas there
        leave their ISRs (electing new leaders), and its registration keeps only the online ones
        (BrokerRegistrationChangeRecord v2 with `log_dirs`). Directories already offline change nothing."""
        registration = self._cluster().registration(broker_id)
        if registration is None:
            return
        newly_offline = [d for d in registration.directories if d in offline]
        if not newly_offline:
            return
        image = self._image()
        for directory in newly_offline:
            partitions = [TopicIdPartition(t.id, i) for t in image.topics for i, p in sorted(t.partitions.items())
                          if p.directory(broker_id) == directory]
            self.generate_leader_and_isr_updates(broker_id, NO_LEADER, records, partitions)
        online = [d for d in registration.directories if d not in offline]
        records.append(BrokerRegistrationChangeRecord(broker_id=broker_id, broker_epoch=broker_epoch, log_dirs=online))

    def unregister_broker(self, broker_id: int) -> ControllerResult[None]:
        """UnregisterBroker (KIP-500): BROKER_ID_NOT_REGISTERED for an unknown id."""
        registration = self._cluster().registration(broker_id)
        if registration is None:
            raise _err(ErrorCode.BROKER_ID_NOT_REGISTERED, f"Broker ID {broker_id} is not currently registered")
        records: list[MetadataRecord] = []
        self.handle_broker_unregistered(broker_id, registration.epoch, records)
        return ControllerResult(None, records)

    def process_broker_heartbeat(
        self, request: BrokerHeartbeatRequest, register_broker_record_offset: int
    ) -> ControllerResult[BrokerHeartbeatReply]:
        """Kafka's `processBrokerHeartbeat`: the broker's next state, its records, and the reply."""
        cluster = self._cluster()
        cluster.check_broker_epoch(request.broker_id, request.broker_epoch)
        heartbeats = cluster.heartbeats()
        broker_id = request.broker_id
        states = heartbeats.calculate_next_broker_state(
            broker_id,
            HeartbeatRequest(request.current_metadata_offset, request.want_fence, request.want_shut_down),
            register_broker_record_offset, self.has_leaderships(broker_id))
        records: list[MetadataRecord] = []
        if states.current is not states.next:
            if states.next in (BrokerControlState.FENCED, BrokerControlState.SHUTDOWN_NOW):
                self.handle_broker_fenced(broker_id, records)
            elif states.next is BrokerControlState.UNFENCED:
                self.handle_broker_unfenced(broker_id, request.broker_epoch, records)
            elif states.next is BrokerControlState.CONTROLLED_SHUTDOWN:
                self.handle_broker_in_controlled_shutdown(broker_id, request.broker_epoch, records)
        heartbeats.touch(broker_id, states.next.fenced, request.current_metadata_offset)
        if request.offline_log_dirs:
            self.handle_directories_offline(broker_id, request.broker_epoch, list(request.offline_log_dirs), records)
        reply = BrokerHeartbeatReply(
            is_caught_up=request.current_metadata_offset >= register_broker_record_offset,
            is_fenced=states.next.fenced,
            in_controlled_shutdown=states.next.in_controlled_shutdown,
            should_shut_down=states.next.should_shut_down,
        )
        return ControllerResult(reply, records)

    def maybe_fence_one_stale_broker(self) -> ControllerResult[int | None]:
        """Fence the one broker whose session expired longest ago, if any (one per event, so each
        fencing's effect is visible before the next, as Kafka)."""
        heartbeats = self._cluster().heartbeats()
        broker_id = heartbeats.find_one_stale_broker()
        records: list[MetadataRecord] = []
        if broker_id is not None:
            self.handle_broker_fenced(broker_id, records)
            heartbeats.fence(broker_id)
        return ControllerResult(broker_id, records)

    # -- AlterPartition ----------------------------------------------------------------------------

    def alter_partition(self, request: AlterPartitionRequest, version: int) -> ControllerResult[AlterPartitionResponse]:
        """AlterPartition (KIP-497, v2-3 as Kafka 4.3): a leader's ISR change, fenced by epochs."""
        cluster = self._cluster()
        cluster.check_broker_epoch(request.broker_id, request.broker_epoch)
        image = self._image()
        response = AlterPartitionResponse(error_code=0, topics=[])
        records: list[MetadataRecord] = []
        for topic_data in request.topics:
            out_topic = AlterPartitionResponse.TopicData(topic_id=topic_data.topic_id, partitions=[])
            response.topics.append(out_topic)
            topic = image.topics.topics_by_id.get(topic_data.topic_id)
            if topic is None:
                for pd in topic_data.partitions:
                    out_topic.partitions.append(AlterPartitionResponse.PartitionData(
                        partition_index=pd.partition_index, error_code=int(ErrorCode.UNKNOWN_TOPIC_ID)))
                continue
            for pd in topic_data.partitions:
                new_isr = ([AlterPartitionRequest.BrokerState(broker_id=b, broker_epoch=-1) for b in pd.new_isr]
                           if version < 3 else list(pd.new_isr_with_epochs))
                partition = topic.partitions.get(pd.partition_index)
                error = self._validate_alter_partition(request.broker_id, partition, pd, new_isr)
                if error is not ErrorCode.NONE:
                    out_topic.partitions.append(AlterPartitionResponse.PartitionData(
                        partition_index=pd.partition_index, error_code=int(error)))
                    continue
                assert partition is not None
                builder = self._builder(topic.name, topic.id, pd.partition_index, partition)
                builder.set_target_isr([b.broker_id for b in new_isr])
                builder.set_target_leader_recovery_state(LeaderRecoveryState.of(pd.leader_recovery_state))
                record = builder.build()
                if record is not None:
                    records.append(record)
                    partition = partition.merge(record)
                    if record.leader not in (request.broker_id, NO_LEADER_CHANGE):
                        # Completing a reassignment moved leadership: the old leader must refresh.
                        out_topic.partitions.append(AlterPartitionResponse.PartitionData(
                            partition_index=pd.partition_index, error_code=int(ErrorCode.NEW_LEADER_ELECTED)))
                        continue
                out_topic.partitions.append(AlterPartitionResponse.PartitionData(
                    partition_index=pd.partition_index, error_code=0, leader_id=partition.leader,
                    leader_epoch=partition.leader_epoch, isr=list(partition.isr),
                    leader_recovery_state=int(partition.leader_recovery_state),
                    partition_epoch=partition.partition_epoch))
        return ControllerResult(response, records)

    def _validate_alter_partition(
        self, broker_id: int, partition: PartitionRegistration | None, data: AlterPartitionRequest.PartitionData,
        new_isr: Sequence[AlterPartitionRequest.BrokerState],
    ) -> ErrorCode:
        """Kafka 4.3's `validateAlterPartitionData`, in its order."""
        if partition is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        # Epochs above ours: this controller is behind (no longer active); the leader should find the new one.
        if data.leader_epoch > partition.leader_epoch or data.partition_epoch > partition.partition_epoch:
            return ErrorCode.NOT_CONTROLLER
        if data.leader_epoch < partition.leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        if broker_id != partition.leader:
            return ErrorCode.INVALID_REQUEST
        if data.partition_epoch < partition.partition_epoch:
            return ErrorCode.INVALID_UPDATE_VERSION
        isr = [b.broker_id for b in new_isr]
        if len(set(isr)) != len(isr) or any(r not in partition.replicas for r in isr):
            return ErrorCode.INVALID_REQUEST  # Replicas.validateIsr
        if partition.leader not in isr:
            return ErrorCode.INVALID_REQUEST  # the ISR must keep its leader
        recovery = data.leader_recovery_state
        if recovery == LeaderRecoveryState.RECOVERING and len(isr) > 1:
            return ErrorCode.INVALID_REQUEST
        if partition.leader_recovery_state == LeaderRecoveryState.RECOVERED and recovery == LeaderRecoveryState.RECOVERING:
            return ErrorCode.INVALID_REQUEST
        cluster = self._cluster()
        for b in new_isr:
            registration = cluster.registration(b.broker_id)
            if (registration is None or registration.in_controlled_shutdown or registration.fenced
                    or (b.broker_epoch != -1 and registration.epoch != b.broker_epoch)):
                return ErrorCode.INELIGIBLE_REPLICA
        return ErrorCode.NONE

    # -- ElectLeaders and balancing ----------------------------------------------------------------

    def elect_leaders(self, request: ElectLeadersRequest) -> ControllerResult[ElectLeadersResponse]:
        """ElectLeaders (KIP-460): preferred (0) or unclean (1) election per partition; every
        partition when `topic_partitions` is null (then without the ELECTION_NOT_NEEDED ones)."""
        try:
            election = {0: Election.PREFERRED, 1: Election.UNCLEAN}[request.election_type]
        except KeyError:
            raise _err(ErrorCode.INVALID_REQUEST, f"Unknown election type {request.election_type}") from None
        records: list[MetadataRecord] = []
        response = ElectLeadersResponse(error_code=0, replica_election_results=[])
        image = self._image()
        Result = ElectLeadersResponse.ReplicaElectionResult
        PartitionResult = ElectLeadersResponse.PartitionResult
        if request.topic_partitions is None:
            for name in sorted(image.topics.topics_by_name):
                result = Result(topic=name, partition_result=[])
                response.replica_election_results.append(result)
                for index in sorted(image.topics.topics_by_name[name].partitions):
                    code, message = self.elect_leader(name, index, election, records)
                    if code is not ErrorCode.ELECTION_NOT_NEEDED:
                        result.partition_result.append(PartitionResult(partition_id=index, error_code=int(code),
                                                                       error_message=message))
        else:
            for tp in request.topic_partitions:
                result = Result(topic=tp.topic, partition_result=[])
                response.replica_election_results.append(result)
                for index in tp.partitions:
                    code, message = self.elect_leader(tp.topic, index, election, records)
                    result.partition_result.append(PartitionResult(partition_id=index, error_code=int(code),
                                                                   error_message=message))
        return ControllerResult(response, records)

    def elect_leader(self, topic_name: str, index: int, election: Election,
                     records: list[MetadataRecord]) -> tuple[ErrorCode, str | None]:
        """One partition's election: (error, message) as Kafka's `electLeader` answers it."""
        topic = self._image().topics.topics_by_name.get(topic_name)
        if topic is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such topic as {topic_name}"
        partition = topic.partitions.get(index)
        if partition is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such partition as {topic_name}-{index}"
        if (election is Election.PREFERRED and partition.leader == partition.replicas[0]) or \
                (election is Election.UNCLEAN and partition.leader != NO_LEADER):
            return ErrorCode.ELECTION_NOT_NEEDED, ELECTION_MESSAGES[ErrorCode.ELECTION_NOT_NEEDED]
        if self.cluster is None:  # one node: its only replica leads, or nothing can
            code = (ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE if election is Election.PREFERRED
                    else ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE)
            return code, ELECTION_MESSAGES[code]
        builder = self._builder(topic.name, topic.id, index, partition).set_election(election)
        record = builder.build()
        if record is None:
            code = (ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE if election is Election.PREFERRED
                    else ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE)
            return code, ELECTION_MESSAGES[code]
        records.append(record)
        return ErrorCode.NONE, None

    def imbalanced_partitions(self) -> list[TopicIdPartition]:
        """Partitions led by a replica other than their preferred (first) one."""
        return [TopicIdPartition(t.id, i) for t in self._image().topics for i, p in sorted(t.partitions.items())
                if p.replicas and p.leader != p.replicas[0]]

    def maybe_balance_partition_leaders(self, max_elections: int = 1000) -> ControllerResult[bool]:
        """Kafka's `maybeBalancePartitionLeaders` (`auto.leader.rebalance.enable`): a preferred election
        for each partition not led by its preferred replica, at most `max_elections` at a time; the
        response says whether there may be more (the batch was full)."""
        records: list[MetadataRecord] = []
        image = self._image()
        for tp in self.imbalanced_partitions():
            if len(records) >= max_elections:
                break
            topic = image.topics.topics_by_id[tp.topic_id]
            partition = topic.partitions[tp.partition]
            record = self._builder(topic.name, topic.id, tp.partition, partition).set_election(
                Election.PREFERRED).build()
            if record is not None:
                records.append(record)
        return ControllerResult(len(records) >= max_elections, records)

    # -- reassignment (KIP-455) --------------------------------------------------------------------

    def alter_partition_reassignments(
        self, request: AlterPartitionReassignmentsRequest
    ) -> ControllerResult[AlterPartitionReassignmentsResponse]:
        """Start (replicas given) or cancel (replicas null) reassignments, one result per partition.

        Starting one writes replicas = target + removing, adding = target - current, removing =
        current - target; the adding replicas catch up and join the ISR by AlterPartition, and the
        builder completes the reassignment (drops the removing ones) once every target replica is in
        the ISR. Cancelling reverts to the original replicas (an unclean revert needs
        `unclean.leader.election.enable`)."""
        Response = AlterPartitionReassignmentsResponse
        response = Response(allow_replication_factor_change=request.allow_replication_factor_change, error_code=0,
                            error_message=None, responses=[])
        records: list[MetadataRecord] = []
        for topic in request.topics:
            out = Response.ReassignableTopicResponse(name=topic.name, partitions=[])
            response.responses.append(out)
            for target in topic.partitions:
                code, message = ErrorCode.NONE, None
                try:
                    record = self._alter_partition_reassignment(topic.name, target,
                                                                request.allow_replication_factor_change)
                except KafkaError as e:
                    code, message = e.error_code, str(e) or None
                else:
                    if record is not None:
                        records.append(record)
                out.partitions.append(Response.ReassignablePartitionResponse(
                    partition_index=target.partition_index, error_code=int(code), error_message=message))
        return ControllerResult(response, records)

    def _alter_partition_reassignment(
        self, topic_name: str, target: AlterPartitionReassignmentsRequest.ReassignablePartition, allow_rf_change: bool,
    ) -> PartitionChangeRecord | None:
        topic = self._image().topics.topics_by_name.get(topic_name)
        if topic is None:
            raise _err(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find a topic named {topic_name}.")
        part = topic.partitions.get(target.partition_index)
        if part is None:
            raise _err(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                       f"Unable to find partition {topic_name}:{target.partition_index}.")
        if target.replicas is None:
            return self._cancel_partition_reassignment(topic_name, topic.id, target.partition_index, part)
        wanted = list(target.replicas)
        self._validate_assignment(wanted, None)
        if not allow_rf_change:
            current_rf = len(part.replicas)
            if part.is_reassigning():
                current_rf = len((set(part.replicas) | set(part.adding_replicas)) - set(part.removing_replicas))
            if current_rf != len(wanted):
                raise _err(ErrorCode.INVALID_REPLICATION_FACTOR,
                           f"The replication factor is changed from {current_rf} to {len(wanted)}")
        current = list(part.replicas)
        removing = sorted(set(current) - set(wanted))
        adding = sorted(set(wanted) - set(current))
        replicas = wanted + removing
        cluster = self._cluster()
        builder = PartitionChangeBuilder(part, topic.id, target.partition_index,
                                         self._acceptor(part, cluster.is_active), default_dir=cluster.default_dir,
                                         min_isr=self.topic_effective_min_isr(topic.name),
                                         eligible_leader_replicas_enabled=self.is_elr_enabled())
        if replicas != current:
            builder.set_target_replicas(replicas)
        if removing:
            builder.set_target_removing(removing)
        if adding:
            builder.set_target_adding(adding)
        return builder.build()

    def _cancel_partition_reassignment(self, topic_name: str, topic_id: uuid.UUID, index: int,
                                       part: PartitionRegistration) -> PartitionChangeRecord | None:
        if not part.is_reassigning():
            raise _err(ErrorCode.NO_REASSIGNMENT_IN_PROGRESS)
        original = [r for r in part.replicas if r not in part.adding_replicas]
        isr = [r for r in part.isr if r not in part.adding_replicas]
        if not isr:
            if not original:
                raise _err(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                           "Invalid replica assignment: addingReplicas contains all replicas.")
            isr = [original[0]]
            if not self._unclean(topic_name):
                raise _err(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                           f"Unable to revert partition assignment for {topic_name}:{index} because it would "
                           "require an unclean leader election.")
        builder = self._builder(topic_name, topic_id, index, part)
        return (builder.set_target_isr(isr).set_target_replicas(original).set_target_removing([])
                .set_target_adding([]).build())

    def list_partition_reassignments(
        self, topics: Sequence[ListPartitionReassignmentsRequest.ListPartitionReassignmentsTopics] | None,
        image: MetadataImage | None = None,
    ) -> ListPartitionReassignmentsResponse:
        """The ongoing reassignments in `image` (default: the current one; Kafka reads the committed
        state), every topic when `topics` is null; unknown names are skipped."""
        Response = ListPartitionReassignmentsResponse
        response = Response(error_code=0, error_message=None, topics=[])
        image = image if image is not None else self._image()
        wanted: list[tuple[str, list[int] | None]] = (
            [(name, None) for name in sorted(image.topics.topics_by_name)] if topics is None
            else [(t.name, list(t.partition_indexes)) for t in topics])
        for name, indexes in wanted:
            topic = image.topics.topics_by_name.get(name)
            if topic is None:
                continue
            ongoing = [Response.OngoingPartitionReassignment(
                partition_index=i, replicas=list(p.replicas), adding_replicas=list(p.adding_replicas),
                removing_replicas=list(p.removing_replicas))
                for i in (sorted(topic.partitions) if indexes is None else indexes)
                if (p := topic.partitions.get(i)) is not None and p.is_reassigning()]
            if ongoing:
                response.topics.append(Response.OngoingTopicReassignment(name=name, partitions=ongoing))
        return response


# Kafka's ApiError(Errors) messages for election results (Errors' default messages, not kbroker's).
ELECTION_MESSAGES: dict[ErrorCode, str] = {
    ErrorCode.ELECTION_NOT_NEEDED: "Leader election not needed for topic partition.",
    ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE: "The preferred leader was not available.",
    ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE: "Eligible topic partition leaders are not available.",
}
