"""The share coordinator's records and shard without sockets: ShareSnapshot round trips, the
share-partition key and its partition, and a share-partition recovered from its written state."""

from __future__ import annotations

import uuid

from kbroker.coord.share_coordinator import (
    ShareCoordinatorShard,
    SharePartitionState,
    StateBatch,
    coordinator_key,
    encode_snapshot,
    kafka_uuid,
    partition_for,
)
from kbroker.coord.share_partition import RecordState, SharePartition, SharePartitionConfig
from kbroker.protocol.errors import ErrorCode

TID = uuid.UUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8")


def test_key_is_kafkas_coordinator_key() -> None:
    assert kafka_uuid(TID) == "a6e4EJ2tEdGAtADAT9QwyA"  # Kafka's Uuid.toString: URL-safe base64, no padding
    assert coordinator_key(("g", TID, 3)) == "g:a6e4EJ2tEdGAtADAT9QwyA:3"
    assert 0 <= partition_for(("g", TID, 3), 50) < 50
    assert partition_for(("g", TID, 3), 50) == partition_for(("g", TID, 3), 50)


def test_snapshot_written_and_replayed() -> None:
    appended: list[tuple[bytes, bytes | None]] = []

    def append(records: list[tuple[bytes, bytes | None]], producer: object = None) -> ErrorCode:
        appended.extend(records)
        return ErrorCode.NONE

    shard = ShareCoordinatorShard(append, lambda: 42, updates_per_snapshot=0)  # snapshots only
    state = SharePartitionState(7, 3, 0, 0, [StateBatch(7, 9, 0, 1), StateBatch(10, 10, 2, 2)])
    assert shard.write_state(("g", TID, 0), state) == ErrorCode.NONE
    assert shard.write_state(("g", TID, 0), SharePartitionState(11)) == ErrorCode.NONE
    loaded = ShareCoordinatorShard(append, lambda: 0)
    for k, v in appended:
        loaded.replay(0, k, v)
    got = loaded.states[("g", TID, 0)]
    assert (got.start_offset, got.snapshot_epoch, got.batches) == (11, 1, [])
    assert shard.delete_state(("g", TID, 0)) == ErrorCode.NONE
    for k, v in appended[-1:]:
        loaded.replay(0, k, v)
    assert loaded.states == {}
    # The record bytes are Kafka's ShareSnapshot (type 0 key, version 0 value).
    k, v = encode_snapshot(("g", TID, 0), state, 42)
    assert k[:2] == b"\x00\x00" and v[:2] == b"\x00\x00"


def test_a_share_partition_recovers_from_its_state() -> None:
    config = SharePartitionConfig(record_lock_duration_ms=1000)
    sp = SharePartition(0, config)
    sp.acquire("a", 0, 5, 0, 0)
    from kbroker.coord.share_partition import AcknowledgementBatch

    assert sp.acknowledge("a", [AcknowledgementBatch(0, 1, (1,)), AcknowledgementBatch(3, 3, (3,)),
                                AcknowledgementBatch(4, 4, (2,))], 0) == ErrorCode.NONE
    batches = sp.state_batches()
    # 2 and 5 are still acquired: written as available, with their delivery count.
    assert batches == [(2, 2, 0, 1), (3, 3, 4, 1), (4, 5, 0, 1)]
    back = SharePartition.from_state(sp.start_offset, batches, config)
    assert (back.start_offset, back.next_offset) == (2, 6)
    assert [back.state_of(o) for o in range(2, 6)] == [RecordState.AVAILABLE, RecordState.ARCHIVED,
                                                       RecordState.AVAILABLE, RecordState.AVAILABLE]
    got = back.acquire("b", 2, 5, 0, 0)
    assert [(r.first_offset, r.last_offset, r.delivery_count) for r in got] == [(2, 2, 2), (4, 5, 2)]
