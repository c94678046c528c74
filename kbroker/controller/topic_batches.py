"""CreateTopics and CreatePartitions as one controller result per request (issue 12).

Kafka's `ReplicationControlManager.createTopics` / `createPartitions` handle every topic of a request
in one controller event and return `ControllerResult.atomicOf(records, results)`: the records of the
topics that passed their checks go to the log as one atomic batch, each topic is answered with its own
error, and the QuorumController answers once that batch commits (validate-only: the same checks, no
records, `withoutRecords()`). These functions are that step, sans-IO, over a
ReplicationControlManager: the QuorumController appends their records with `_write`, the
LocalController commits them in one go.

Every topic is checked against the same image (the names are distinct: the API layer answered the
duplicates), in request order. After a topic passed its checks, `quota` (Kafka's
`ControllerRequestContext.applyPartitionChangeQuota`, KIP-599) is applied with the partitions it adds;
a THROTTLING_QUOTA_EXCEEDED from it fails that topic only. CreatePartitions counts the partitions of
the earlier topics towards MAX_RECORDS_PER_USER_OP (validate-only too, as Kafka counts them before
dropping the records).

Imports: controller/ modules and metadata views only.
"""

from __future__ import annotations

from collections.abc import Sequence

from kbroker.controller.controller import CreatePartitionsTopic, NewTopic, PartitionChangeQuota
from kbroker.controller.replication_control import ReplicationControlManager
from kbroker.controller.result import ControllerResult, MetadataRecord
from kbroker.metadata.views import TopicInfo
from kbroker.protocol.errors import KafkaError

Outcomes = list[TopicInfo | KafkaError]


def create_topics(replication: ReplicationControlManager, topics: Sequence[NewTopic],
                  quota: PartitionChangeQuota | None = None) -> ControllerResult[Outcomes]:
    """Every topic's records (those that passed) and its outcome, in request order."""
    outcomes: Outcomes = []
    records: list[MetadataRecord] = []
    for t in topics:
        try:
            result = replication.create_topic(t.name, t.num_partitions, t.replication_factor, t.configs,
                                              t.assignments)
            if quota is not None:
                quota(result.response.num_partitions)
        except KafkaError as e:
            outcomes.append(e)
            continue
        outcomes.append(result.response)
        records.extend(result.records)
    return ControllerResult(outcomes, records)


def create_partitions(replication: ReplicationControlManager, topics: Sequence[CreatePartitionsTopic],
                      quota: PartitionChangeQuota | None = None) -> ControllerResult[Outcomes]:
    """Every topic's new partitions (those that passed) and its outcome, in request order."""
    outcomes: Outcomes = []
    records: list[MetadataRecord] = []
    added = 0
    for t in topics:
        try:
            before = replication.existing(t.name).num_partitions
            result = replication.create_partitions(t.name, t.count, t.assignments, added)
            new = result.response.num_partitions - before
            if quota is not None:
                quota(new)
        except KafkaError as e:
            outcomes.append(e)
            continue
        added += new
        outcomes.append(result.response)
        records.extend(result.records)
    return ControllerResult(outcomes, records)
