"""One scripted transactions-version-2 sequence (KIP-890 part 2) on the wire, run against kbroker and
against Apache Kafka 4.3.1 by `test_tv2_wire.py`; it returns a trace of what each step answered.

Raw requests (kbroker's codecs, `tests/support/raw_client.py`), so every error code, producer id (as an
offset from the first one) and epoch is compared as sent. Between steps the script waits until the
coordinator has completed the transaction (DescribeTransactions): Kafka answers EndTxn once PrepareX
is written and kbroker once the markers are, so without the wait the next step could race the
completion on Kafka only.
"""

from __future__ import annotations

import time
from typing import Any

from kbroker.protocol.messages.api_versions import ApiVersionsRequest
from kbroker.protocol.messages.create_topics import CreateTopicsRequest as CT
from kbroker.protocol.messages.describe_transactions import DescribeTransactionsRequest
from kbroker.protocol.messages.end_txn import EndTxnRequest
from kbroker.protocol.messages.find_coordinator import FindCoordinatorRequest
from kbroker.protocol.messages.init_producer_id import InitProducerIdRequest
from kbroker.protocol.messages.metadata import MetadataRequest
from kbroker.protocol.messages.offset_fetch import OffsetFetchRequest as OF
from kbroker.protocol.messages.produce import ProduceRequest as P
from kbroker.protocol.messages.txn_offset_commit import TxnOffsetCommitRequest as TC
from kbroker.protocol.messages.write_txn_markers import WriteTxnMarkersRequest as WM
from kbroker.protocol.records import SimpleRecord, build_batch
from tests.support.raw_client import RawKafkaClient

TOPIC = "tv2-wire"
GROUP = "tv2-wire-group"
TID = "tv2-wire-tid"


def _produce(c: RawKafkaClient, version: int, pid: int, epoch: int, seq: int, partition: int,
             value: bytes, transactional: bool = True) -> tuple[int, int]:
    batch = build_batch([SimpleRecord(value, None, int(time.time() * 1000))], producer_id=pid,
                        producer_epoch=epoch, base_sequence=seq, is_transactional=transactional)
    r = c.request(0, version, P(transactional_id=TID, acks=-1, timeout_ms=30000, topic_data=[P.TopicProduceData(
        name=TOPIC, partition_data=[P.PartitionProduceData(index=partition, records=bytes(batch))])]))
    part = r.responses[0].partition_responses[0]
    return part.error_code, part.base_offset


def _end(c: RawKafkaClient, pid: int, epoch: int, commit: bool, version: int = 5) -> tuple[int, int, int]:
    r = c.request(26, version, EndTxnRequest(transactional_id=TID, producer_id=pid, producer_epoch=epoch,
                                             committed=commit))
    return r.error_code, r.producer_id, r.producer_epoch


def _describe(c: RawKafkaClient) -> Any:
    return c.request(65, 0, DescribeTransactionsRequest(transactional_ids=[TID])).transaction_states[0]


def _wait_complete(c: RawKafkaClient) -> str:
    deadline = time.monotonic() + 30
    while True:
        state = _describe(c).transaction_state
        if not state.startswith("Prepare") or time.monotonic() > deadline:
            return str(state)
        time.sleep(0.05)


def _marker(c: RawKafkaClient, version: int, pid: int, epoch: int, coordinator_epoch: int,
            transaction_version: int) -> int:
    """An ABORT marker for partition 0 written with WriteTxnMarkers, as a coordinator (or
    `kafka-transactions abort`) sends it; the partition's error code."""
    r = c.request(27, version, WM(markers=[WM.WritableTxnMarker(
        producer_id=pid, producer_epoch=epoch, transaction_result=False, coordinator_epoch=coordinator_epoch,
        transaction_version=transaction_version, topics=[WM.WritableTxnMarkerTopic(name=TOPIC, partition_indexes=[0])])]))
    return int(r.markers[0].topics[0].partitions[0].error_code)


def _committed_offset(c: RawKafkaClient) -> tuple[int, int]:
    r = c.request(9, 7, OF(group_id=GROUP, require_stable=True, topics=[
        OF.OffsetFetchRequestTopic(name=TOPIC, partition_indexes=[0])]))
    if r.error_code != 0 or not r.topics:
        return r.error_code, -1
    p = r.topics[0].partitions[0]
    return p.error_code, p.committed_offset


def run(bootstrap: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with RawKafkaClient(bootstrap) as c:
        versions = c.request(18, 4, ApiVersionsRequest(client_software_name="tv2", client_software_version="1"))
        out["finalized transaction.version"] = [(f.min_version_level, f.max_version_level)
                                                for f in versions.finalized_features
                                                if f.name == "transaction.version"]
        c.request(19, 7, CT(topics=[CT.CreatableTopic(name=TOPIC, num_partitions=2, replication_factor=1)],
                            timeout_ms=30000))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            m = c.request(3, 12, MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=TOPIC)]))
            if m.topics and m.topics[0].error_code == 0 and all(p.leader_id >= 0 for p in m.topics[0].partitions):
                break
            time.sleep(0.2)
        while time.monotonic() < deadline:  # creates __consumer_offsets on both
            fc = c.request(10, 4, FindCoordinatorRequest(key_type=0, coordinator_keys=[GROUP]))
            if fc.coordinators[0].error_code == 0:
                break
            time.sleep(0.2)
        while time.monotonic() < deadline:  # creates __transaction_state on both
            fc = c.request(10, 4, FindCoordinatorRequest(key_type=1, coordinator_keys=[TID]))
            if fc.coordinators[0].error_code == 0:
                break
            time.sleep(0.2)
        while True:
            init = c.request(22, 5, InitProducerIdRequest(transactional_id=TID, transaction_timeout_ms=60000,
                                                          producer_id=-1, producer_epoch=-1))
            if init.error_code == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        pid, epoch = init.producer_id, init.producer_epoch
        out["init"] = (init.error_code, epoch)

        def rel(answer: tuple[int, int, int]) -> tuple[int, int, int]:
            """(error, producer id relative to the first, epoch)."""
            return answer[0], answer[1] - pid if answer[1] >= 0 else answer[1], answer[2]

        # 1. A v12 transactional produce with no AddPartitionsToTxn: the leader adds the partition.
        out["produce v12 implicit add"] = _produce(c, 12, pid, epoch, 0, 0, b"committed-1")[0]
        out["state after the produce"] = (_describe(c).transaction_state, sorted(
            (t.topic, p) for t in _describe(c).topics for p in t.partitions))
        # 2. EndTxn v5 commits and bumps the epoch; the answer carries the new epoch.
        out["end v5 commit"] = rel(_end(c, pid, epoch, True))
        out["state after commit"] = _wait_complete(c)
        # 3. A retry with the old epoch is answered NONE with the current id/epoch.
        out["end v5 commit retry"] = rel(_end(c, pid, epoch, True))
        out["end v5 abort retry of a commit"] = rel(_end(c, pid, epoch, False))
        # 4. A late produce with the old epoch (the hanging-transaction case of KIP-890): refused.
        out["late produce old epoch"] = _produce(c, 12, pid, epoch, 1, 1, b"late")[0]
        epoch += 1
        # 4b. The commit marker bumped the epoch and cleared the producer's batches on partition 0: at
        # the new epoch only sequence 0 follows (ProducerAppendInfo.checkSequence; ci28's divergence).
        # Partition 1 never had a batch of the producer: a v12 produce must start it at 0 too
        # (VerificationStateEntry.supportsEpochBump). Both still add their partition to the transaction.
        out["produce v12 seq 3 after the marker"] = _produce(c, 12, pid, epoch, 3, 0, b"gap")[0]
        out["produce v12 seq 3 on a new partition"] = _produce(c, 12, pid, epoch, 3, 1, b"gap")[0]
        # 5. The next transaction at the bumped epoch, sequence 0.
        out["produce v12 next txn"] = _produce(c, 12, pid, epoch, 0, 0, b"aborted-2")[0]
        # 5b. KIP-1228: a version-2 marker at the epoch this open transaction writes at is a late marker
        # of the previous transaction; it would end this one. Refused before the coordinator epoch is
        # looked at, so nothing changes.
        out["marker v2 TV2 at the open transaction's epoch"] = _marker(c, 2, pid, epoch, 0, 2)
        # 5c. A plain (non-transactional) batch of the producer while its transaction is open there.
        out["produce v12 plain batch in the open transaction"] = _produce(c, 12, pid, epoch, 1, 0, b"plain",
                                                                          transactional=False)[0]
        out["end v5 abort"] = rel(_end(c, pid, epoch, False))
        out["state after abort"] = _wait_complete(c)
        epoch += 1
        # 6. CompleteAbort at the current epoch: commit is INVALID_TXN_STATE, abort bumps (an empty abort).
        out["end v5 commit on CompleteAbort"] = rel(_end(c, pid, epoch, True))
        out["end v5 empty abort"] = rel(_end(c, pid, epoch, False))
        out["state after empty abort"] = _wait_complete(c)
        epoch += 1
        out["end v5 stale epoch"] = rel(_end(c, pid, epoch - 3, True))
        out["end v5 unknown producer id"] = rel(_end(c, pid + 1000, epoch, True))
        # 7. A v11 transactional produce of a partition not in the transaction: TRANSACTION_ABORTABLE.
        out["produce v11 not added"] = _produce(c, 11, pid, epoch, 0, 1, b"v11")[0]
        # 8. TxnOffsetCommit v5 with no AddOffsetsToTxn: the group's partition joins the transaction.
        out["produce v12 txn 4"] = _produce(c, 12, pid, epoch, 0, 0, b"committed-4")[0]
        tc = c.request(28, 5, TC(transactional_id=TID, group_id=GROUP, producer_id=pid, producer_epoch=epoch,
                                 generation_id=-1, member_id="", group_instance_id=None, topics=[
                                     TC.TxnOffsetCommitRequestTopic(name=TOPIC, partitions=[
                                         TC.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=42,
                                                                            committed_leader_epoch=-1,
                                                                            committed_metadata="")])]))
        out["txn offset commit v5"] = [p.error_code for t in tc.topics for p in t.partitions]
        out["offset pending"] = _committed_offset(c)
        out["end v5 commit with offsets"] = rel(_end(c, pid, epoch, True))
        out["state after commit with offsets"] = _wait_complete(c)
        deadline = time.monotonic() + 10
        while _committed_offset(c)[0] != 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        out["offset committed"] = _committed_offset(c)
        epoch += 1
        # 9. TxnOffsetCommit v5 with a fenced epoch.
        tc = c.request(28, 5, TC(transactional_id=TID, group_id=GROUP, producer_id=pid, producer_epoch=epoch - 1,
                                 generation_id=-1, member_id="", group_instance_id=None, topics=[
                                     TC.TxnOffsetCommitRequestTopic(name=TOPIC, partitions=[
                                         TC.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=43,
                                                                            committed_leader_epoch=-1,
                                                                            committed_metadata="")])]))
        out["txn offset commit v5 fenced"] = [p.error_code for t in tc.topics for p in t.partitions]
        # 10. InitProducerId with the current id/epoch (KIP-360) bumps once more.
        again = c.request(22, 5, InitProducerIdRequest(transactional_id=TID, transaction_timeout_ms=60000,
                                                       producer_id=pid, producer_epoch=epoch))
        out["init again"] = (again.error_code, again.producer_id - pid, again.producer_epoch)
        d = _describe(c)
        out["describe"] = (d.error_code, d.transaction_state, d.producer_id - pid, d.producer_epoch)
        # 11. Markers at partition 0's current epoch with no transaction open there (its last marker
        # was step 8's commit, at epoch 4): version 2 takes it as a retry of a marker already written
        # (KAFKA-19999), versions 0-1 as ever. Last, as the high coordinator epoch fences the real one.
        out["marker v2 TV2 at the epoch, nothing open"] = _marker(c, 2, pid, 4, 1000, 2)
        out["marker v1 at the epoch, nothing open"] = _marker(c, 1, pid, 4, 1000, 0)
        out["marker v2 TV2 at an older epoch"] = _marker(c, 2, pid, 3, 1000, 2)
    return out
