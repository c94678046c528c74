"""CreateTopics and CreatePartitions are one QuorumController write per request (issue 12), as in
Kafka 4.3.1, where `ReplicationControlManager.createTopics` / `createPartitions` return
`ControllerResult.atomicOf(records, results)` from one write event: the records of the topics that
passed their checks are appended as one batch, a topic that fails gets its own error, nothing is
answered before the batch commits, validate-only appends nothing, and the mutation quota is applied
to each topic after its checks."""

from __future__ import annotations

import asyncio

import pytest

from kbroker.controller.controller import CreatePartitionsTopic, NewTopic
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.metadata_records import PartitionRecord, TopicRecord
from tests.controller.quorum_fakes import FakeClock, InMemoryRaftLog, join, new_controller


def _cluster():  # type: ignore[no-untyped-def]
    controller, raft = new_controller(FakeClock())
    for b in (1, 2, 3):
        join(controller, raft, b)
    return controller, raft


def _answered_on_commit(raft: InMemoryRaftLog, coro):  # type: ignore[no-untyped-def]
    """Run `coro`; it must not answer before the log commits. (appends it made, its answer)"""
    async def run():  # type: ignore[no-untyped-def]
        before = raft.appends
        task = asyncio.ensure_future(coro)
        await asyncio.sleep(0)
        appended = raft.appends - before
        if appended:
            assert not task.done(), "answered before its records committed"
        raft.commit()
        return appended, await task
    return asyncio.run(run())


def _create(controller, raft, *topics: NewTopic) -> list:  # type: ignore[no-untyped-def]
    return _answered_on_commit(raft, controller.create_topics(list(topics)))[1]


def test_create_topics_of_three_topics_is_one_batch_with_per_topic_errors() -> None:
    controller, raft = _cluster()
    _create(controller, raft, NewTopic("exists", 1, 1))
    appends, outcomes = _answered_on_commit(raft, controller.create_topics([
        NewTopic("a", 2, 3), NewTopic("exists", 1, 1), NewTopic("b", 3, 2),
        NewTopic("bad", 1, 4), NewTopic("c", 1, 1)]))
    assert appends == 1
    records = raft.batches[-1].records
    assert sorted(r.name for r in records if isinstance(r, TopicRecord)) == ["a", "b", "c"]
    assert sum(isinstance(r, PartitionRecord) for r in records) == 2 + 3 + 1
    assert [getattr(o, "num_partitions", None) for o in outcomes] == [2, None, 3, None, 1]
    assert isinstance(outcomes[1], KafkaError) and outcomes[1].error_code is ErrorCode.TOPIC_ALREADY_EXISTS
    assert isinstance(outcomes[3], KafkaError) and outcomes[3].error_code is ErrorCode.INVALID_REPLICATION_FACTOR
    for name, n in (("a", 2), ("b", 3), ("c", 1)):
        topic = controller.committed_image.topic(name)
        assert topic is not None and len(topic.partitions) == n


def test_create_topics_validate_only_appends_nothing() -> None:
    controller, raft = _cluster()
    appends, outcomes = _answered_on_commit(raft, controller.create_topics(
        [NewTopic("a", 2, 3), NewTopic("b", 1, 9)], validate_only=True))
    assert appends == 0
    assert getattr(outcomes[0], "num_partitions", None) == 2
    assert isinstance(outcomes[1], KafkaError) and outcomes[1].error_code is ErrorCode.INVALID_REPLICATION_FACTOR
    assert controller.image.topic("a") is None


def test_create_topics_quota_fails_only_the_topic_it_refuses() -> None:
    controller, raft = _cluster()
    seen: list[int] = []

    def quota(partitions: int) -> None:
        if sum(seen) + partitions > 4:
            raise KafkaError("The throttling quota has been exceeded.",
                             error_code=ErrorCode.THROTTLING_QUOTA_EXCEEDED)
        seen.append(partitions)

    appends, outcomes = _answered_on_commit(raft, controller.create_topics(
        [NewTopic("a", 3, 1), NewTopic("dup-fails-first", 1, 9), NewTopic("b", 2, 1), NewTopic("c", 1, 1)],
        quota=quota))
    assert appends == 1 and seen == [3, 1]
    # The topic that fails its own checks never reaches the quota (Kafka checks first).
    assert isinstance(outcomes[1], KafkaError) and outcomes[1].error_code is ErrorCode.INVALID_REPLICATION_FACTOR
    assert isinstance(outcomes[2], KafkaError) and outcomes[2].error_code is ErrorCode.THROTTLING_QUOTA_EXCEEDED
    assert controller.committed_image.topic("b") is None
    assert controller.committed_image.topic("c") is not None


def test_create_partitions_of_three_topics_is_one_batch_with_per_topic_errors() -> None:
    controller, raft = _cluster()
    _create(controller, raft, NewTopic("a", 1, 3), NewTopic("b", 2, 3), NewTopic("c", 1, 1))
    appends, outcomes = _answered_on_commit(raft, controller.create_partitions_all([
        CreatePartitionsTopic("a", 3), CreatePartitionsTopic("missing", 2), CreatePartitionsTopic("b", 4),
        CreatePartitionsTopic("c", 1), CreatePartitionsTopic("c2", 2)]))
    assert appends == 1
    records = raft.batches[-1].records
    assert all(isinstance(r, PartitionRecord) for r in records) and len(records) == 2 + 2
    assert [getattr(o, "num_partitions", None) for o in outcomes] == [3, None, 4, None, None]
    assert isinstance(outcomes[1], KafkaError) and outcomes[1].error_code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert isinstance(outcomes[3], KafkaError) and outcomes[3].error_code is ErrorCode.INVALID_PARTITIONS
    assert len(controller.committed_image.topic("a").partitions) == 3  # type: ignore[union-attr]
    assert len(controller.committed_image.topic("b").partitions) == 4  # type: ignore[union-attr]


def test_create_partitions_validate_only_appends_nothing_and_counts_across_topics() -> None:
    controller, raft = _cluster()
    _create(controller, raft, NewTopic("a", 1, 1), NewTopic("b", 1, 1))
    appends, outcomes = _answered_on_commit(raft, controller.create_partitions_all(
        [CreatePartitionsTopic("a", 6000), CreatePartitionsTopic("b", 6000)], validate_only=True))
    assert appends == 0
    assert getattr(outcomes[0], "num_partitions", None) == 6000
    # MAX_RECORDS_PER_USER_OP (10,000) counts the partitions of the earlier topics, validate-only too.
    assert isinstance(outcomes[1], KafkaError)
    assert len(controller.image.topic("a").partitions) == 1  # type: ignore[union-attr]


@pytest.mark.parametrize("validate_only", [False, True])
def test_empty_requests_write_nothing(validate_only: bool) -> None:
    controller, raft = _cluster()
    assert _answered_on_commit(raft, controller.create_topics([], validate_only)) == (0, [])
    assert _answered_on_commit(raft, controller.create_partitions_all([], validate_only)) == (0, [])
