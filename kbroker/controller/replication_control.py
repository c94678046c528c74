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

from kbroker.controller.result import ControllerResult, MetadataRecord
from kbroker.metadata.views import TOPIC_RESOURCE, MetadataView, TopicInfo
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.metadata_records import (
    ConfigRecord,
    PartitionRecord,
    RemoveTopicRecord,
    TopicRecord,
)
from kbroker.protocol.topic import CLUSTER_METADATA_TOPIC_NAME as CLUSTER_METADATA_TOPIC
from kbroker.protocol.topic import INTERNAL_TOPICS

MAX_TOPIC_NAME_LENGTH = 249
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
    ) -> None:
        self._view = view
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
            if b != self.node_id:
                raise _err(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                           f"The manual partition assignment includes broker {b}, but no such broker is registered.")
        if replication_factor is not None and replication_factor != len(broker_ids):
            raise _err(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"The manual partition assignment includes a partition with {len(broker_ids)} replica(s), "
                f"but this is not consistent with previous partitions, which have {replication_factor} replica(s).",
            )

    def _place(self, partitions: range, replication_factor: int) -> dict[int, list[int]]:
        """Kafka's `StripedReplicaPlacer` over the registered brokers: here, one."""
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
        records += partition_records(info.topic_id, placement)
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
        return ControllerResult(grown, partition_records(info.topic_id, placement))
