"""TransactionMarkerChannelManager's routing and completion rules, on an event loop with fake leaders,
plus the partition side's coordinator-epoch fencing of markers.

Remote delivery (WriteTxnMarkers over a NodeConnection) is proven with real processes in
test_transactions_cluster.py; here the leaders are this broker or unknown, so every rule is visible:
complete only when every marker is acknowledged, retry with the leader re-resolved on
NOT_LEADER_OR_FOLLOWER, wait while a partition has no leader, give up on a deleted partition, abandon
on INVALID_PRODUCER_EPOCH / TRANSACTION_COORDINATOR_FENCED, drop what a lost coordinator partition sent.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from kbroker.coord.transaction_marker_channel import (
    NO_LEADER,
    PendingCompleteTxn,
    TransactionMarkerChannelManager,
)
from kbroker.log.config import LogConfig
from kbroker.log.errors import TransactionCoordinatorFencedError
from kbroker.log.unified_log import UnifiedLog
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.records import SimpleRecord, build_batch

ME = 1


class Harness:
    def __init__(self) -> None:
        self.leaders: dict[tuple[str, int], int | None] = {}
        self.answers: dict[tuple[str, int], list[ErrorCode]] = {}
        self.written: list[tuple[str, int, bool]] = []
        self.completed: list[PendingCompleteTxn] = []
        self.channel = TransactionMarkerChannelManager(
            ME, lambda t, p: self.leaders.get((t, p)), lambda _b: None, self.write, self.completed.append,
            retry_backoff_ms=10)

    def write(self, txn: PendingCompleteTxn, topic: str, p: int) -> ErrorCode:
        queue = self.answers.get((topic, p), [])
        error = queue.pop(0) if queue else ErrorCode.NONE
        if error == ErrorCode.NONE:
            self.written.append((topic, p, txn.commit))
        return error

    def txn(self, *partitions: tuple[str, int], commit: bool = True, coordinator_partition: int = 0
            ) -> PendingCompleteTxn:
        return PendingCompleteTxn(coordinator_partition, 5, "t", 100, 0, commit, set(partitions))


async def _until(cond: object, timeout: float = 2.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not cond():  # type: ignore[operator]
        assert asyncio.get_running_loop().time() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


def test_completes_after_every_marker_and_retries_leader_changes() -> None:
    async def run() -> None:
        h = Harness()
        h.leaders = {("a", 0): ME, ("a", 1): ME, ("b", 0): NO_LEADER}
        h.answers[("a", 1)] = [ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.NOT_ENOUGH_REPLICAS]
        txn = h.txn(("a", 0), ("a", 1), ("b", 0))
        h.channel.add(txn)
        await asyncio.sleep(0.05)
        assert h.completed == []  # b-0 has no leader, a-1 is still being retried
        assert ("a", 0, True) in h.written
        h.leaders[("b", 0)] = ME  # a leader is elected: the waiting marker is routed to it
        await _until(lambda: h.completed == [txn])
        assert sorted(h.written) == [("a", 0, True), ("a", 1, True), ("b", 0, True)]
        h.channel.close()

    asyncio.run(run())


def test_deleted_partition_is_given_up() -> None:
    async def run() -> None:
        h = Harness()
        h.leaders = {("a", 0): ME}  # ("gone", 0) is not in the image any more
        txn = h.txn(("a", 0), ("gone", 0), commit=False)
        h.channel.add(txn)
        await _until(lambda: h.completed == [txn])
        assert h.written == [("a", 0, False)]
        h.channel.close()

    asyncio.run(run())


@pytest.mark.parametrize("error", [ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.TRANSACTION_COORDINATOR_FENCED])
def test_fenced_markers_abandon_the_transaction(error: ErrorCode) -> None:
    async def run() -> None:
        h = Harness()
        h.leaders = {("a", 0): ME, ("a", 1): ME}
        h.answers[("a", 1)] = [error]
        txn = h.txn(("a", 0), ("a", 1))
        h.channel.add(txn)
        await asyncio.sleep(0.1)
        assert h.completed == [] and txn.abandoned and h.channel.pending() == []
        h.channel.close()

    asyncio.run(run())


def test_lost_coordinator_partition_drops_its_markers() -> None:
    async def run() -> None:
        h = Harness()
        h.leaders = {("a", 0): NO_LEADER}
        mine, other = h.txn(("a", 0), coordinator_partition=3), h.txn(("a", 0), coordinator_partition=4)
        h.channel.add(mine)
        h.channel.add(other)
        h.channel.remove_markers_for_partition(3)
        h.leaders[("a", 0)] = ME
        await _until(lambda: h.completed == [other])
        await asyncio.sleep(0.05)
        assert h.completed == [other] and mine.abandoned
        h.channel.close()

    asyncio.run(run())


def test_marker_from_an_older_coordinator_epoch_is_fenced(tmp_path: Path) -> None:
    """Kafka's ProducerAppendInfo.checkCoordinatorEpoch: once a producer's marker came from coordinator
    epoch 4, a marker from epoch 3 (a zombie coordinator) is TRANSACTION_COORDINATOR_FENCED."""
    log = UnifiedLog(tmp_path / "t-0", LogConfig(), time_ms=lambda: 1000)
    batch = build_batch([SimpleRecord(b"v", None, 1000)], producer_id=7, producer_epoch=0, base_sequence=0,
                        is_transactional=True, now_ms=1000)
    log.append_as_leader(memoryview(batch), 0)
    log.append_txn_marker(7, 0, 4, commit=True, leader_epoch=0)
    end = log.log_end_offset
    with pytest.raises(TransactionCoordinatorFencedError) as raised:
        log.append_txn_marker(7, 0, 3, commit=False, leader_epoch=0)
    assert raised.value.error_code == ErrorCode.TRANSACTION_COORDINATOR_FENCED
    assert log.log_end_offset == end  # nothing written
    log.append_txn_marker(7, 0, 4, commit=True, leader_epoch=0)  # the same epoch is fine (a retry)
    log.close()


def test_a_request_carries_each_transactions_version() -> None:
    """WriteTxnMarkers v2 carries the marker's transaction version (KIP-1228): the leader checks a
    version-2 marker's epoch strictly, so a version-2 transaction's markers must say so."""
    from kbroker.coord.transaction_marker_channel import _request
    from kbroker.protocol.messages.write_txn_markers import WriteTxnMarkersRequest

    tv2 = PendingCompleteTxn(0, 5, "a", 100, 3, True, {("t", 0)}, transaction_version=2)
    tv0 = PendingCompleteTxn(0, 5, "b", 101, 3, False, {("t", 1)})
    request = _request([(tv2, ("t", 0)), (tv0, ("t", 1))])
    assert [(m.producer_id, m.transaction_version) for m in request.markers] == [(100, 2), (101, 0)]
    # and v2's encoding keeps it
    from kbroker.protocol import RequestHeader, decode_request_frame, encode_request_frame

    frame = encode_request_frame(RequestHeader(api_key=27, api_version=2, correlation_id=1, client_id="c"), request)
    _, decoded = decode_request_frame(memoryview(bytearray(frame))[4:])
    assert isinstance(decoded, WriteTxnMarkersRequest)
    assert [m.transaction_version for m in decoded.markers] == [2, 0]
