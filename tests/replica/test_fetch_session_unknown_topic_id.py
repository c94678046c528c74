"""A fetch session partition added under a topic id the leader did not know yet is resolved later.

The race (found by the replication fault matrix under kbroker's own controllers,
tests/cluster/test_replication_kbroker_quorum_matrix.py): a topic is created; the follower's metadata
has it before the leader's, so the follower's first Fetch (v13+, by topic id) opens a session with a
partition the leader cannot name -- UNKNOWN_TOPIC_ID. The follower backs off and fetches again at the
same position, so its incremental requests never list that partition again (nothing about it changed).
Kafka resolves a session partition's unknown name against the current metadata at every request
(`CachedPartition.maybeResolveUnknownName` from `IncrementalFetchContext.foreachPartition`); kbroker
kept the empty name for the session's life: the follower never replicated that partition, the leader
shrank it out of the ISR 3 s later and it never came back.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from kbroker.metadata.loader import MetadataBatch
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.metadata_records.partition_record import PartitionRecord
from kbroker.protocol.metadata_records.topic_record import TopicRecord
from kbroker.replica.fetch_session import (
    FetchManager,
    FetchPartitionRequest,
    FetchSessionCache,
    FullFetchContext,
    IncrementalFetchContext,
    PartitionResult,
)
from tests.support.replica_cluster import ReplicaCluster

TOPIC_ID = uuid.UUID("6f1c9a52-7d1e-4c55-9a55-1f7b6c2d3e4f")


def by_id(name: str, p: int, offset: int = 0) -> FetchPartitionRequest:
    """A v13+ partition entry as kbroker/api/fetch.py builds it: keyed by id, `name` '' when unknown."""
    return FetchPartitionRequest((TOPIC_ID, p), name, TOPIC_ID, p, offset, 1 << 20)


def test_incremental_fetch_names_a_partition_whose_topic_id_became_known() -> None:
    fm = FetchManager(FetchSessionCache(10, lambda: 1_000_000))
    known: dict[uuid.UUID, str] = {}

    def lookup(topic_id: uuid.UUID) -> str | None:
        return known.get(topic_id)

    # The follower's first fetch: the leader does not know the topic yet.
    full = fm.new_context(17, 0, 0, [by_id("", 0)], [], is_follower=True, topic_name=lookup)
    assert isinstance(full, FullFetchContext)
    assert [r.topic for r in full.partitions_to_read()] == [""]
    sid, parts = full.update_and_generate_response(
        {(TOPIC_ID, 0): PartitionResult(ErrorCode.UNKNOWN_TOPIC_ID)})
    assert sid != 0 and [r.error for _, r in parts] == [ErrorCode.UNKNOWN_TOPIC_ID]

    # Still unknown: the next incremental request (nothing listed) reads it unnamed again.
    ctx = fm.new_context(17, sid, 1, [], [], is_follower=True, topic_name=lookup)
    assert [r.topic for r in ctx.partitions_to_read()] == [""]
    ctx.update_and_generate_response({(TOPIC_ID, 0): PartitionResult(ErrorCode.UNKNOWN_TOPIC_ID)})

    # The leader's metadata now has the topic: the same empty incremental request reads it by name,
    # at the position the session holds, under the same key.
    known[TOPIC_ID] = "verified"
    ctx = fm.new_context(17, sid, 2, [], [], is_follower=True, topic_name=lookup)
    assert isinstance(ctx, IncrementalFetchContext)
    reads = ctx.partitions_to_read()
    assert [(r.key, r.topic, r.fetch_offset) for r in reads] == [((TOPIC_ID, 0), "verified", 0)]
    # ... and keeps the name from then on.
    ctx.update_and_generate_response({(TOPIC_ID, 0): PartitionResult(ErrorCode.NONE, high_watermark=5)})
    del known[TOPIC_ID]
    ctx = fm.new_context(17, sid, 3, [], [], is_follower=True, topic_name=lookup)
    assert [r.topic for r in ctx.partitions_to_read()] == ["verified"]


def test_name_based_sessions_are_left_alone() -> None:
    """Before v13 a partition is named by the request itself; an empty name is not a topic id to look up."""
    fm = FetchManager(FetchSessionCache(10, lambda: 1_000_000))
    asked: list[uuid.UUID] = []

    def lookup(topic_id: uuid.UUID) -> str | None:
        asked.append(topic_id)
        return "other"

    named = FetchPartitionRequest(("t", 0), "t", uuid.UUID(int=0), 0, 0, 1 << 20)
    full = fm.new_context(12, 0, 0, [named], [], is_follower=True, topic_name=lookup)
    sid, _ = full.update_and_generate_response({("t", 0): PartitionResult(ErrorCode.NONE, high_watermark=1)})
    ctx = fm.new_context(12, sid, 1, [], [], is_follower=True, topic_name=lookup)
    assert [r.topic for r in ctx.partitions_to_read()] == ["t"] and asked == []


def test_follower_replicates_a_topic_its_leader_learned_of_after_it(tmp_path: Path) -> None:
    """The race end to end, two in-process brokers: the topic's records reach the follower (2) first;
    its fetcher opens a session with the leader (1), which answers UNKNOWN_TOPIC_ID; then the leader
    learns the topic and takes writes. The follower must replicate them (it waited forever before)."""
    from kafka import KafkaProducer

    with ReplicaCluster(tmp_path, 2) as cluster:
        topic_id = uuid.uuid4()
        records = [TopicRecord(name="late", topic_id=topic_id),
                   PartitionRecord(partition_id=0, topic_id=topic_id, replicas=[1, 2], isr=[1, 2], leader=1,
                                   leader_epoch=0, partition_epoch=0)]

        def follower_first() -> None:
            now = int(time.time() * 1000)
            cluster.controller.handle_commit([MetadataBatch(cluster.controller.last_applied_offset + 1, 1, now,
                                                            records)])
            cluster._feed(cluster.nodes[2], records)

        cluster.call(follower_first)
        fetchers = cluster.nodes[2].services.replica_manager.replica_fetcher_manager
        # The follower's fetcher has opened its session with the leader (and been told UNKNOWN_TOPIC_ID).
        cluster.wait_for(lambda: any(f.session_id != 0 and f.fetches > 0 for f in fetchers.fetchers.values()),
                         what="the follower's fetch session")
        cluster.call(lambda: cluster._feed(cluster.nodes[1], records))
        producer = KafkaProducer(bootstrap_servers=f"127.0.0.1:{cluster.nodes[1].port}", acks=1)
        for i in range(10):
            producer.send("late", f"v{i}".encode(), partition=0).get(15)
        producer.close()
        cluster.wait_for(lambda: (p := cluster.partition(2, "late")) is not None and p.log_end_offset == 10,
                         timeout=15, what="the follower replicating the late topic")
