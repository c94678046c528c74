"""The group coordinator's side of the network persister and the share session disconnect listener.

- `read_summary` sends ReadShareGroupStateSummary (87, v1) to each key's share coordinator, one request
  per coordinator and group, and retries NOT_COORDINATOR; `initialize` / `delete` await
  InitializeShareGroupState / DeleteShareGroupState (Alter/DeleteShareGroupOffsets on a cluster).
- WriteShareGroupState v1 carries the delivery complete count (records ACKNOWLEDGED or ARCHIVED at or
  after the start offset), what the lag of DescribeShareGroupOffsets subtracts.
- A share-partition writes back the state epoch of the state it read (an Alter on a cluster initializes
  the next one, fencing a leader that still holds the old state).
- A share session remembers the connection that opened it: when that connection closes the session
  goes (unless the client closed it with epoch -1) and the group is reported empty once it has no
  session left (Kafka's ShareSessionCache `ClientConnectionDisconnectListener`).
"""

from __future__ import annotations

import asyncio
import uuid

from kbroker.coord.share_coordinator import SharePartitionState, StateBatch, partition_for
from kbroker.coord.share_partition import AcknowledgementBatch
from kbroker.coord.share_partition_manager import SharePartitionRequest
from kbroker.coord.share_persister import (
    DELETE,
    INITIALIZE,
    SUMMARY,
    NetworkSharePersister,
    delivery_complete_count,
)
from kbroker.coord.share_session import ShareSessionCache
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages.delete_share_group_state import DeleteShareGroupStateResponse
from kbroker.protocol.messages.initialize_share_group_state import InitializeShareGroupStateResponse
from kbroker.protocol.messages.read_share_group_state_summary import ReadShareGroupStateSummaryResponse
from tests.coord.test_share_partition_manager_cluster import (
    GROUP,
    FakePartition,
    MemoryPersister,
    _data,
    _manager,
)
from tests.coord.test_share_partition_manager_cluster import TID as PTID
from tests.coord.test_share_persister import FAST, TID, FakeLocator, FakeTransport, _partitions_of


def _summaries(start_of: dict[int, int], not_coordinator_once: set[int] | None = None) -> object:
    """Summary answers: partition p's start offset start_of[p] (-1 when absent); the partitions in
    `not_coordinator_once` answer NOT_COORDINATOR the first time."""
    pending = set(not_coordinator_once or ())

    def answer(node: int, api: int, request: object) -> object:
        if api == SUMMARY:
            R = ReadShareGroupStateSummaryResponse
            results = []
            for tid, p in _partitions_of(request):
                if p.partition in pending:
                    pending.discard(p.partition)
                    part = R.PartitionResult(partition=p.partition, error_code=ErrorCode.NOT_COORDINATOR)
                else:
                    start = start_of.get(p.partition, -1)
                    part = R.PartitionResult(partition=p.partition, state_epoch=0, leader_epoch=3 if start >= 0 else -1,
                                             start_offset=start, delivery_complete_count=2 if start >= 0 else -1)
                results.append(R.ReadStateSummaryResult(topic_id=tid, partitions=[part]))
            return R(results=results)
        if api == INITIALIZE:
            In = InitializeShareGroupStateResponse
            return In(results=[In.InitializeStateResult(topic_id=tid, partitions=[In.PartitionResult(
                partition=p.partition)]) for tid, p in _partitions_of(request)])
        if api == DELETE:
            D = DeleteShareGroupStateResponse
            return D(results=[D.DeleteStateResult(topic_id=tid, partitions=[D.PartitionResult(
                partition=p.partition)]) for tid, p in _partitions_of(request)])
        raise AssertionError(api)

    return answer


def test_read_summary_batches_per_coordinator_and_retries_not_coordinator() -> None:
    leaders = {0: 10, 1: 11}
    keys = [("g", TID, p) for p in range(8)]
    transport = FakeTransport(_summaries({0: 4, 3: 9}, not_coordinator_once={5}))  # type: ignore[arg-type]

    async def main() -> dict[tuple[str, uuid.UUID, int], object]:
        persister = NetworkSharePersister(1, FakeLocator(2, leaders), transport, FAST)
        return await persister.read_summary(keys)  # type: ignore[return-value]

    found = asyncio.run(main())
    first_round = [(n, a) for n, a, _r in transport.sent][:2]
    assert sorted(first_round) == [(10, SUMMARY), (11, SUMMARY)]  # one request per coordinator
    for node, _api, request in transport.sent[:2]:
        assert all(leaders[partition_for(("g", tid, p.partition), 2)] == node for tid, p in _partitions_of(request))
    assert len(transport.sent) == 3  # the NOT_COORDINATOR partition asked again alone
    starts = {k[2]: (o.error, o.state.start_offset if o.state else None) for k, o in found.items()}  # type: ignore[attr-defined]
    assert starts == {0: (ErrorCode.NONE, 4), 1: (ErrorCode.NONE, -1), 2: (ErrorCode.NONE, -1),
                      3: (ErrorCode.NONE, 9), 4: (ErrorCode.NONE, -1), 5: (ErrorCode.NONE, -1),
                      6: (ErrorCode.NONE, -1), 7: (ErrorCode.NONE, -1)}
    state = found[("g", TID, 3)].state  # type: ignore[attr-defined]
    assert (state.leader_epoch, state.delivery_complete_count) == (3, 2)


def test_initialize_and_delete_await_the_coordinator() -> None:
    transport = FakeTransport(_summaries({}))  # type: ignore[arg-type]

    async def main() -> tuple[ErrorCode, ErrorCode]:
        persister = NetworkSharePersister(1, FakeLocator(1, {0: 10}), transport, FAST)
        return await persister.initialize(("g", TID, 0), 42), await persister.delete(("g", TID, 0))

    assert asyncio.run(main()) == (ErrorCode.NONE, ErrorCode.NONE)
    assert [(n, a) for n, a, _r in transport.sent] == [(10, INITIALIZE), (10, DELETE)]
    init = transport.sent[0][2]
    assert [(p.partition, p.start_offset, p.state_epoch) for _t, p in _partitions_of(init)] == [(0, 42, 0)]


def test_delivery_complete_count_counts_final_states_from_the_start_offset() -> None:
    state = SharePartitionState(10, batches=[StateBatch(8, 12, 2, 1), StateBatch(13, 14, 0, 1),
                                             StateBatch(15, 17, 4, 5), StateBatch(18, 18, 1, 1)])
    assert delivery_complete_count(state) == 3 + 3  # 10-12 acknowledged, 15-17 archived
    assert delivery_complete_count(SharePartitionState(-1)) == -1


def test_a_closed_connection_removes_its_session_and_reports_the_group_empty() -> None:
    cache = ShareSessionCache(10)
    assert cache.open("g", "a", "conn-1")[0] == ErrorCode.NONE
    assert cache.open("g", "b", "conn-2")[0] == ErrorCode.NONE
    session, empty = cache.disconnected("conn-1")
    assert session is not None and session.member_id == "a" and empty is None  # b is still there
    assert cache.disconnected("conn-1") == (None, None)  # told once
    closed = cache.sessions[("g", "b")]
    cache.close(closed)  # the client closed b's session with epoch -1 first
    assert cache.disconnected("conn-2") == (None, "g")  # nothing left to remove; the group is empty here
    # A member that reconnected and opened a new session: the old connection's close leaves it alone.
    cache.open("g", "c", "conn-3")
    cache.open("g", "c", "conn-4")
    assert cache.disconnected("conn-3") == (None, None)
    assert ("g", "c") in cache.sessions


def test_a_closed_connection_releases_its_members_records_and_drops_an_empty_groups_share_partitions() -> None:
    partition, persister = FakePartition(_data(6), 6), MemoryPersister()
    m = _manager(partition, persister)
    fetch = [SharePartitionRequest(PTID, 0)]
    first = m.share_fetch(GROUP, "a", 0, fetch, [], 4, False, False, connection_id="c-a")
    assert [(r.first_offset, r.last_offset) for r in first.partitions[(PTID, 0)].acquired] == [(0, 3)]
    other = m.share_fetch(GROUP, "b", 0, fetch, [], 100, False, False, connection_id="c-b")
    assert [(r.first_offset, r.last_offset) for r in other.partitions[(PTID, 0)].acquired] == [(4, 5)]
    m.on_disconnect("c-a")  # a's consumer died: its records are available again at once
    again = m.share_fetch(GROUP, "b", 1, fetch, [], 100, False, False)
    assert [(r.first_offset, r.last_offset, r.delivery_count) for r in again.partitions[(PTID, 0)].acquired] \
        == [(0, 3, 2)]
    assert (GROUP, PTID, 0) in m.partitions and persister.forgotten == []
    m.on_disconnect("c-b")  # the group's last session here: its share-partitions are dropped
    assert (GROUP, PTID, 0) not in m.partitions and persister.forgotten == [(GROUP, PTID, 0)]


def test_a_share_partition_writes_back_the_state_epoch_it_read() -> None:
    partition, persister = FakePartition(_data(4), 4), MemoryPersister()
    persister.states[(GROUP, PTID, 0)] = SharePartitionState(1, 0, 3)  # reset by an Alter: state epoch 3
    m = _manager(partition, persister)
    fetch = [SharePartitionRequest(PTID, 0)]
    got = m.share_fetch(GROUP, "a", 0, fetch, [], 100, False, False).partitions[(PTID, 0)].acquired
    assert [(r.first_offset, r.last_offset) for r in got] == [(1, 3)]
    acked = m.share_fetch(GROUP, "a", 1, [SharePartitionRequest(PTID, 0, [AcknowledgementBatch(1, 3, (1,))])],
                          [], 100, False, False)
    assert acked.partitions[(PTID, 0)].acknowledge_error == ErrorCode.NONE
    written = persister.states[(GROUP, PTID, 0)]
    assert (written.start_offset, written.state_epoch) == (4, 3)
