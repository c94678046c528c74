"""The share-partition manager's cluster behaviour, on fakes of the replica manager, the metadata and the
persister: a share-partition follows the leadership of its topic partition (dropped and read again from
the share coordinator when the leader epoch changes; an acknowledgement to a broker that no longer
leads answers NOT_LEADER_OR_FOLLOWER), and read_committed (`share.isolation.level`) archives the records
of aborted transactions (`aborted_batches`, Kafka's consumer rule: a producer's transaction is aborted
from its first offset to its next control batch).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from kbroker.config import KafkaConfig
from kbroker.coord.share_coordinator import SharePartitionKey, SharePartitionState, StateBatch
from kbroker.coord.share_partition import AcknowledgementBatch, RecordState
from kbroker.coord.share_partition_manager import (
    SharePartitionManager,
    SharePartitionRequest,
    aborted_batches,
)
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.record_format import SimpleRecord
from kbroker.protocol.records import ControlRecordType, build_batch, build_control_batch

TID = uuid.UUID(int=42)
GROUP, MEMBER = "g", "m1"


def _data(n: int) -> bytes:
    return b"".join(bytes(build_batch([SimpleRecord(b"v%d" % i)], base_offset=i, now_ms=0)) for i in range(n))


@dataclass
class Region:
    data: bytes

    def read_bytes(self) -> bytes:
        return self.data


@dataclass
class Read:
    records: Region | None
    aborted_transactions: list[tuple[int, int]] | None = None


@dataclass
class FakePartition:
    data: bytes
    high_watermark: int
    leader_epoch: int = 1
    is_leader: bool = True
    log_start_offset: int = 0
    last_stable_offset: int = -1
    aborted: list[tuple[int, int]] = field(default_factory=list)

    def fetchable_end(self, isolation: int) -> int:
        return self.last_stable_offset if isolation == 1 and self.last_stable_offset >= 0 else self.high_watermark

    def read(self, offset: int, max_bytes: int, isolation: int, min_one: bool) -> Read:
        end = self.fetchable_end(isolation)
        pos = 0
        while pos < len(self.data):  # from the batch holding `offset`
            base = int.from_bytes(self.data[pos:pos + 8], "big")
            length = int.from_bytes(self.data[pos + 8:pos + 12], "big")
            last = base + int.from_bytes(self.data[pos + 23:pos + 27], "big")
            if last >= offset:
                break
            pos += 12 + length
        stop = pos
        while stop < len(self.data) and int.from_bytes(self.data[stop:stop + 8], "big") < end:
            stop += 12 + int.from_bytes(self.data[stop + 8:stop + 12], "big")
        return Read(Region(self.data[pos:stop]), self.aborted if isolation == 1 else None)

    def fetch_offset_for_timestamp(self, timestamp: int, isolation: int | None) -> None:
        return None


@dataclass
class TopicInfo:
    name: str = "t"
    num_partitions: int = 1


class Configs:
    def __init__(self, overrides: dict[str, str]) -> None:
        self.overrides = overrides

    def config_map(self, resource: object) -> dict[str, str]:
        return self.overrides


class Image:
    def __init__(self, overrides: dict[str, str]) -> None:
        self.configs = Configs(overrides)


class Metadata:
    def __init__(self, overrides: dict[str, str] | None = None) -> None:
        self.image = Image(overrides or {"share.auto.offset.reset": "earliest"})

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        return TopicInfo() if topic_id == TID else None


class Replicas:
    def __init__(self, partition: FakePartition) -> None:
        self.partition = partition

    def get_partition(self, name: str, p: int) -> FakePartition | None:
        return self.partition if self.partition.is_leader else None


class MemoryPersister:
    """The share coordinator as a dict, remembering what it was asked."""

    def __init__(self) -> None:
        self.states: dict[SharePartitionKey, SharePartitionState] = {}
        self.reads: list[tuple[SharePartitionKey, int]] = []
        self.forgotten: list[SharePartitionKey] = []

    def read_state(self, key: SharePartitionKey, leader_epoch: int = -1) -> tuple[ErrorCode, SharePartitionState | None]:
        self.reads.append((key, leader_epoch))
        return ErrorCode.NONE, self.states.get(key)

    def write_state(self, key: SharePartitionKey, state: SharePartitionState) -> ErrorCode:
        self.states[key] = state
        return ErrorCode.NONE

    def write_completion(self, key: SharePartitionKey) -> None:
        return None

    def forget(self, key: SharePartitionKey) -> None:
        self.forgotten.append(key)

    def delete_state(self, key: SharePartitionKey) -> ErrorCode:
        self.states.pop(key, None)
        return ErrorCode.NONE

    def state_keys(self, group_id: str) -> list[SharePartitionKey]:
        return [k for k in self.states if k[0] == group_id]

    def delete_states(self, group_id: str) -> None:
        for k in self.state_keys(group_id):
            del self.states[k]


def _manager(partition: FakePartition, persister: MemoryPersister, overrides: dict[str, str] | None = None
             ) -> SharePartitionManager:
    return SharePartitionManager(KafkaConfig({}), Replicas(partition), Metadata(overrides),  # type: ignore[arg-type]
                                 lambda: 1000, persister)


def _fetch(m: SharePartitionManager, epoch: int, acks: list[AcknowledgementBatch] | None = None) -> object:
    return m.share_fetch(GROUP, MEMBER, epoch, [SharePartitionRequest(TID, 0, acks)], [], 100, False, False)


def test_a_new_leader_epoch_drops_the_share_partition_and_reads_the_state_again() -> None:
    partition, persister = FakePartition(_data(4), 4), MemoryPersister()
    m = _manager(partition, persister)
    out = _fetch(m, 0)
    assert [(r.first_offset, r.last_offset) for r in out.partitions[(TID, 0)].acquired] == [(0, 3)]  # type: ignore[attr-defined]
    assert persister.reads == [((GROUP, TID, 0), 1)]  # read with the leader epoch
    assert persister.states[(GROUP, TID, 0)].leader_epoch == 1
    assert _fetch(m, 1, [AcknowledgementBatch(0, 1, (1,))]).partitions[(TID, 0)].acknowledge_error == ErrorCode.NONE  # type: ignore[attr-defined]
    # Another broker led the partition meanwhile and acknowledged 2; this broker leads again in epoch 3.
    persister.states[(GROUP, TID, 0)] = SharePartitionState(3, 2, 0, 0, [])
    partition.leader_epoch = 3
    # An acknowledgement of the old leadership's records is refused; the fetch reads the state (epoch 3)
    # and delivers offset 3 again, nothing before it.
    out = _fetch(m, 2, [AcknowledgementBatch(3, 3, (1,))])
    result = out.partitions[(TID, 0)]  # type: ignore[attr-defined]
    assert result.acknowledge_error == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert persister.forgotten == [(GROUP, TID, 0)]
    assert persister.reads[-1] == ((GROUP, TID, 0), 3)
    assert [(r.first_offset, r.last_offset, r.delivery_count) for r in result.acquired] == [(3, 3, 1)]
    # Now acknowledged in the new leadership.
    assert _fetch(m, 3, [AcknowledgementBatch(3, 3, (1,))]).partitions[(TID, 0)].acknowledge_error \
        == ErrorCode.NONE  # type: ignore[attr-defined]
    assert (persister.states[(GROUP, TID, 0)].start_offset, persister.states[(GROUP, TID, 0)].leader_epoch) == (4, 3)


def test_an_acknowledgement_to_a_broker_that_lost_the_leadership_is_refused() -> None:
    partition, persister = FakePartition(_data(2), 2), MemoryPersister()
    m = _manager(partition, persister)
    _fetch(m, 0)
    partition.is_leader = False
    result = m.share_acknowledge(GROUP, MEMBER, 1, [SharePartitionRequest(TID, 0, [AcknowledgementBatch(0, 1, (1,))])]
                                 ).partitions[(TID, 0)]
    assert result.acknowledge_error == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert persister.states[(GROUP, TID, 0)].batches == []  # nothing of it was written


def test_aborted_batches_follow_the_consumers_rule() -> None:
    data = b"".join(bytes(b) for b in [
        build_batch([SimpleRecord(b"a0"), SimpleRecord(b"a1")], base_offset=0, producer_id=1, producer_epoch=0,
                    base_sequence=0, is_transactional=True, now_ms=0),
        build_batch([SimpleRecord(b"b2")], base_offset=2, producer_id=2, producer_epoch=0, base_sequence=0,
                    is_transactional=True, now_ms=0),
        build_control_batch(ControlRecordType.ABORT, producer_id=1, producer_epoch=0, timestamp=0, base_offset=3),
        build_batch([SimpleRecord(b"a4")], base_offset=4, producer_id=1, producer_epoch=0, base_sequence=2,
                    is_transactional=True, now_ms=0),
        build_batch([SimpleRecord(b"plain")], base_offset=5, now_ms=0),
    ])
    # producer 1's transaction from offset 0 was aborted (marker at 3); its next one (4) was not
    assert aborted_batches(data, [(1, 0)]) == [(0, 1)]
    assert aborted_batches(data, [(1, 0), (2, 2)]) == [(0, 1), (2, 2)]
    assert aborted_batches(data, []) == []


def test_read_committed_archives_aborted_records_and_stops_at_the_last_stable_offset() -> None:
    data = b"".join(bytes(b) for b in [
        build_batch([SimpleRecord(b"c0")], base_offset=0, now_ms=0),
        build_batch([SimpleRecord(b"x1"), SimpleRecord(b"x2")], base_offset=1, producer_id=7, producer_epoch=0,
                    base_sequence=0, is_transactional=True, now_ms=0),
        build_control_batch(ControlRecordType.ABORT, producer_id=7, producer_epoch=0, timestamp=0, base_offset=3),
        build_batch([SimpleRecord(b"c4")], base_offset=4, now_ms=0),
        build_batch([SimpleRecord(b"open")], base_offset=5, producer_id=8, producer_epoch=0, base_sequence=0,
                    is_transactional=True, now_ms=0),
    ])
    partition = FakePartition(data, 6, last_stable_offset=5, aborted=[(7, 1)])
    persister = MemoryPersister()
    m = _manager(partition, persister, {"share.auto.offset.reset": "earliest",
                                        "share.isolation.level": "read_committed"})
    out = _fetch(m, 0)
    acquired = [(r.first_offset, r.last_offset) for r in out.partitions[(TID, 0)].acquired]  # type: ignore[attr-defined]
    assert acquired == [(0, 0), (3, 4)]  # the aborted 1-2 left out; 5 is past the last stable offset
    sp = m.share_partition(GROUP, TID, 0)
    assert sp is not None and [sp.state_of(o) for o in (1, 2)] == [RecordState.ARCHIVED] * 2
    assert StateBatch(1, 2, int(RecordState.ARCHIVED), 1) in persister.states[(GROUP, TID, 0)].batches
