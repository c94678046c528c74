"""The transaction APIs through the dispatcher on an in-process stack (the wiring the broker runs):
TxnOffsetCommit offsets stay pending (OffsetFetch require_stable answers UNSTABLE_OFFSET_COMMIT)
until EndTxn commits them; an abort drops them; WriteTxnMarkers appends a marker; old request
versions get INVALID_PRODUCER_EPOCH instead of PRODUCER_FENCED; ListTransactions/DescribeTransactions."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from kbroker.protocol.errors import ErrorCode as E
from kbroker.protocol.messages.add_offsets_to_txn import AddOffsetsToTxnRequest
from kbroker.protocol.messages.add_partitions_to_txn import AddPartitionsToTxnRequest
from kbroker.protocol.messages.describe_transactions import DescribeTransactionsRequest
from kbroker.protocol.messages.end_txn import EndTxnRequest
from kbroker.protocol.messages.find_coordinator import FindCoordinatorRequest
from kbroker.protocol.messages.init_producer_id import InitProducerIdRequest
from kbroker.protocol.messages.list_transactions import ListTransactionsRequest
from kbroker.protocol.messages.offset_fetch import OffsetFetchRequest
from kbroker.protocol.messages.produce import ProduceRequest
from kbroker.protocol.messages.txn_offset_commit import TxnOffsetCommitRequest
from kbroker.protocol.messages.write_txn_markers import WriteTxnMarkersRequest
from kbroker.protocol.records import SimpleRecord, build_batch
from tests.coord.stack import Stack, run_on_stack

T = TxnOffsetCommitRequest


def _commit(pid: int, epoch: int, offset: int, version: int = 3) -> T:
    return T(transactional_id="tx", group_id="g", producer_id=pid, producer_epoch=epoch, generation_id=-1,
             member_id="", group_instance_id=None, topics=[T.TxnOffsetCommitRequestTopic(name="orders", partitions=[
                 T.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=offset,
                                                   committed_leader_epoch=-1, committed_metadata="")])])


async def _fetch(s: Stack, stable: bool) -> tuple[int, int]:
    r = await s.call(9, 7, OffsetFetchRequest(group_id="g", require_stable=stable, topics=[
        OffsetFetchRequest.OffsetFetchRequestTopic(name="orders", partition_indexes=[0])]))
    p = r.topics[0].partitions[0]
    return p.error_code, p.committed_offset


def _run_on_stack(tmp_path: Path, body: Callable[[Stack], Awaitable[None]]) -> None:
    """``body`` on a started in-process stack with two transaction-state partitions, then shut down."""
    run_on_stack(tmp_path, body, **{"transaction.state.log.num.partitions": "2"})


def test_txn_offsets_pending_until_commit(tmp_path: Path) -> None:
    async def body(s: Stack) -> None:
        await s.services.controller.create_topic("orders", num_partitions=1)
        assert (await s.call(10, 3, FindCoordinatorRequest(key="tx", key_type=1))).error_code == E.NONE
        await s.call(10, 3, FindCoordinatorRequest(key="g", key_type=0))
        for _ in range(100):
            if s.services.transaction_coordinator.coordinator_status("tx") == E.NONE and not s.runtime.loading:
                break
            await asyncio.sleep(0.01)
        init = await s.call(22, 4, InitProducerIdRequest(transactional_id="tx", transaction_timeout_ms=60000,
                                                         producer_id=-1, producer_epoch=-1))
        assert init.error_code == E.NONE
        pid, epoch = init.producer_id, init.producer_epoch
        added = await s.call(25, 3, AddOffsetsToTxnRequest(transactional_id="tx", producer_id=pid,
                                                           producer_epoch=epoch, group_id="g"))
        assert added.error_code == E.NONE
        r = await s.call(28, 3, _commit(pid, epoch, 42))
        assert r.topics[0].partitions[0].error_code == E.NONE
        assert await _fetch(s, True) == (E.UNSTABLE_OFFSET_COMMIT, -1)
        assert await _fetch(s, False) == (E.NONE, -1)
        every = await s.call(9, 7, OffsetFetchRequest(group_id="g", require_stable=True, topics=None))
        assert [(t.name, p.partition_index, p.error_code) for t in every.topics for p in t.partitions] == [
            ("orders", 0, E.UNSTABLE_OFFSET_COMMIT)]
        # The pending offset is in the log as a transactional batch: reloading the group's partition
        # (a restart, a leadership change) keeps it pending.
        gp = s.runtime.partition_for("g")
        s.runtime.runtime.unload(gp)
        assert s.runtime.runtime.schedule_load(gp)
        s.runtime.runtime.run_load(gp)
        assert await _fetch(s, True) == (E.UNSTABLE_OFFSET_COMMIT, -1)
        listed = await s.call(66, 1, ListTransactionsRequest(state_filters=["Ongoing"], producer_id_filters=[]))
        assert [(t.transactional_id, t.transaction_state) for t in listed.transaction_states] == [("tx", "Ongoing")]
        described = await s.call(65, 0, DescribeTransactionsRequest(transactional_ids=["tx", "nope"]))
        assert [(d.error_code, d.transaction_state) for d in described.transaction_states] == [
            (E.NONE, "Ongoing"), (E.TRANSACTIONAL_ID_NOT_FOUND, "")]
        # A stale epoch: PRODUCER_FENCED from EndTxn v2, INVALID_PRODUCER_EPOCH below.
        for version, code in ((1, E.INVALID_PRODUCER_EPOCH), (3, E.PRODUCER_FENCED)):
            stale = await s.call(26, version, EndTxnRequest(transactional_id="tx", producer_id=pid,
                                                            producer_epoch=epoch + 5, committed=True))
            assert stale.error_code == code
        end = await s.call(26, 3, EndTxnRequest(transactional_id="tx", producer_id=pid, producer_epoch=epoch,
                                                committed=True))
        assert end.error_code == E.NONE
        for _ in range(100):
            if await _fetch(s, True) == (E.NONE, 42):
                break
            await asyncio.sleep(0.01)
        assert await _fetch(s, True) == (E.NONE, 42)
        # Reloaded after the COMMIT marker: the offset is committed, read back from the log.
        s.runtime.runtime.unload(gp)
        s.runtime.runtime.schedule_load(gp)
        s.runtime.runtime.run_load(gp)
        assert await _fetch(s, True) == (E.NONE, 42)
        # The next transaction aborts: its offset is dropped.
        parts = await s.call(24, 3, AddPartitionsToTxnRequest(
            v3_and_below_transactional_id="tx", v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name="orders", partitions=[0])]))
        assert parts.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == E.NONE
        await s.call(25, 3, AddOffsetsToTxnRequest(transactional_id="tx", producer_id=pid, producer_epoch=epoch,
                                                   group_id="g"))
        await s.call(28, 3, _commit(pid, epoch, 99))
        end = await s.call(26, 3, EndTxnRequest(transactional_id="tx", producer_id=pid, producer_epoch=epoch,
                                                committed=False))
        assert end.error_code == E.NONE
        await asyncio.sleep(0.05)
        assert await _fetch(s, True) == (E.NONE, 42)
        s.runtime.runtime.unload(gp)
        s.runtime.runtime.schedule_load(gp)
        s.runtime.runtime.run_load(gp)
        assert await _fetch(s, True) == (E.NONE, 42)  # the aborted 99 stays dropped after a reload
        log = s.replica_manager.get_partition("orders", 0).log
        assert log.log_end_offset == 1  # the ABORT marker
        assert log.collect_aborted_transactions(0, 1) == [(pid, 0)]
        # KIP-890 part 1: a late transactional produce after the abort (the partition is no longer in
        # an Ongoing transaction) is refused, so it cannot open a hanging transaction.
        late = bytes(build_batch([SimpleRecord(b"late", None, 1)], producer_id=pid, producer_epoch=epoch,
                                 base_sequence=0, is_transactional=True))
        produced = await s.call(0, 9, ProduceRequest(transactional_id="tx", acks=-1, timeout_ms=5000, topic_data=[
            ProduceRequest.TopicProduceData(name="orders", partition_data=[
                ProduceRequest.PartitionProduceData(index=0, records=late)])]))
        assert produced.responses[0].partition_responses[0].error_code == E.INVALID_TXN_STATE
        log.update_high_watermark(log.log_end_offset)
        assert log.last_stable_offset == log.log_end_offset == 1  # no hanging transaction
        # WriteTxnMarkers: a COMMIT marker for another producer, appended as the leader.
        W = WriteTxnMarkersRequest
        w = await s.call(27, 1, W(markers=[W.WritableTxnMarker(
            producer_id=777, producer_epoch=0, transaction_result=True, coordinator_epoch=0,
            topics=[W.WritableTxnMarkerTopic(name="orders", partition_indexes=[0, 5])])]))
        assert [p.error_code for p in w.markers[0].topics[0].partitions] == [E.NONE, E.UNKNOWN_TOPIC_OR_PARTITION]
        assert log.log_end_offset == 2

    _run_on_stack(tmp_path, body)


def test_txn_offset_commit_v3_verification_follows_the_broker_setting(tmp_path: Path) -> None:
    """TxnOffsetCommit v0-4 asks the transaction coordinator first (KIP-890 part 1): an id it does not
    know is refused. With `transaction.partition.verification.enable=false` Kafka starts no
    verification and writes the offsets as they come (pending until a marker ends them)."""
    async def run(enabled: str) -> tuple[int, tuple[int, int]]:
        stack = Stack(tmp_path / enabled, **{"transaction.state.log.num.partitions": "2",
                                             "transaction.partition.verification.enable": enabled})
        stack.start()
        try:
            await stack.services.controller.create_topic("orders", num_partitions=1)
            await stack.call(10, 3, FindCoordinatorRequest(key="g", key_type=0))
            for _ in range(100):
                if not stack.runtime.loading:
                    break
                await asyncio.sleep(0.01)
            r = await stack.call(28, 3, _commit(4242, 0, 7))
            return r.topics[0].partitions[0].error_code, await _fetch(stack, True)
        finally:
            stack.shutdown()

    refused = asyncio.run(run("true"))
    assert refused[0] != E.NONE and refused[1] == (E.NONE, -1)
    assert asyncio.run(run("false")) == (E.NONE, (E.UNSTABLE_OFFSET_COMMIT, -1))


def test_the_coordinator_writes_a_version_2_transactions_markers_as_version_2(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """KIP-1228: the leader checks a version-2 marker's epoch strictly only if the marker says it is
    one; the coordinator must pass its transaction's client version down to the partition (in-process
    here, in WriteTxnMarkers v2 across brokers: test_marker_channel.py)."""
    from kbroker.log.unified_log import UnifiedLog

    seen: list[tuple[int, int]] = []
    original = UnifiedLog.append_txn_marker

    def spy(self: UnifiedLog, producer_id: int, producer_epoch: int, *args: object, **kwargs: object) -> object:
        seen.append((producer_epoch, int(kwargs.get("transaction_version", 0))))  # type: ignore[call-overload]
        return original(self, producer_id, producer_epoch, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(UnifiedLog, "append_txn_marker", spy)

    async def body(s: Stack) -> None:
        assert s.services.transaction_coordinator.transaction_version() == 2
        await s.services.controller.create_topic("orders", num_partitions=1)
        assert (await s.call(10, 3, FindCoordinatorRequest(key="tx", key_type=1))).error_code == E.NONE
        for _ in range(100):
            if s.services.transaction_coordinator.coordinator_status("tx") == E.NONE:
                break
            await asyncio.sleep(0.01)
        init = await s.call(22, 5, InitProducerIdRequest(transactional_id="tx", transaction_timeout_ms=60000,
                                                         producer_id=-1, producer_epoch=-1))
        pid, epoch = init.producer_id, init.producer_epoch
        batch = build_batch([SimpleRecord(b"v", None, 1000)], producer_id=pid, producer_epoch=epoch,
                            base_sequence=0, is_transactional=True)
        P = ProduceRequest
        r = await s.call(0, 12, P(transactional_id="tx", acks=-1, timeout_ms=30000, topic_data=[P.TopicProduceData(
            name="orders", partition_data=[P.PartitionProduceData(index=0, records=bytes(batch))])]))
        assert r.responses[0].partition_responses[0].error_code == E.NONE
        end = await s.call(26, 5, EndTxnRequest(transactional_id="tx", producer_id=pid, producer_epoch=epoch,
                                                committed=True))
        assert (end.error_code, end.producer_epoch) == (E.NONE, epoch + 1)
        for _ in range(200):
            if seen:
                break
            await asyncio.sleep(0.01)
        assert seen == [(epoch + 1, 2)]

    _run_on_stack(tmp_path, body)
