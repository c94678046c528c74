"""The requests behind `kafka-transactions find-hanging` and `abort` on the wire, kbroker against Apache
Kafka 4.3.1 (marker `reference`): the same steps give the same trace.

Steps (both brokers with `transaction.partition.verification.enable=false`): a plain record, a
transactional batch from an idempotent producer id under a transactional id no coordinator knows
(an hour old), a plain record; then what find-hanging asks (DescribeProducers; ListTransactions
filtered by the producer id) and what abort sends (WriteTxnMarkers ABORT with the producer's epoch and
coordinator epoch 0, as the tool does for a producer with none), and after it DescribeProducers and
ListOffsets (latest, read_committed and read_uncommitted), then the same ABORT once more.
Found by the comparison: a marker sets the producer's last timestamp (DescribeProducers,
snapshots, expiry), as Kafka's appendEndTxnMarker does; kbroker kept the last data batch's. `test_hanging_transactions_java.py` runs
the Java tool itself on kbroker. `test_verified_refusal_matches_kafka`: with verification on (the
default) both brokers refuse the batch (INVALID_PRODUCER_ID_MAPPING) and write nothing.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from kbroker.protocol.messages.describe_producers import DescribeProducersRequest as DP
from kbroker.protocol.messages.find_coordinator import FindCoordinatorRequest
from kbroker.protocol.messages.init_producer_id import InitProducerIdRequest
from kbroker.protocol.messages.list_offsets import ListOffsetsRequest as LO
from kbroker.protocol.messages.list_transactions import ListTransactionsRequest
from kbroker.protocol.messages.produce import ProduceRequest as P
from kbroker.protocol.messages.write_txn_markers import WriteTxnMarkersRequest as WM
from kbroker.protocol.records import SimpleRecord, build_batch
from tests.support.raw_client import RawKafkaClient
from tests.support.reference_kafka import reference_unavailable_reason, start_reference_kafka
from tests.transactions.test_hanging_transactions_java import HOUR_MS, _plain, _write_hanging_batch

pytestmark = [pytest.mark.interop]

TOPIC = "hanging-wire"
NO_VERIFICATION = {"transaction.partition.verification.enable": "false"}


def _when(ts: int, stamp: int) -> str | int:
    """A last timestamp: the hanging batch's ("batch"), within a minute of now ("now"), or as is."""
    if ts == stamp:
        return "batch"
    return "now" if abs(time.time() * 1000 - ts) < 60_000 else ts


def _producers(c: RawKafkaClient, pid0: int, stamp: int) -> list[tuple[int | str, ...]]:
    r = c.request(61, 0, DP(topics=[DP.TopicRequest(name=TOPIC, partition_indexes=[0])]))
    part = r.topics[0].partitions[0]
    return [(part.error_code, p.producer_id - pid0, p.producer_epoch, p.last_sequence,
             _when(p.last_timestamp, stamp), p.coordinator_epoch, p.current_txn_start_offset)
            for p in part.active_producers if p.producer_id >= pid0]


def _latest(c: RawKafkaClient, isolation: int) -> tuple[int, int]:
    r = c.request(2, 7, LO(replica_id=-1, isolation_level=isolation, topics=[LO.ListOffsetsTopic(
        name=TOPIC, partitions=[LO.ListOffsetsPartition(partition_index=0, timestamp=-1)])]))
    p = r.topics[0].partitions[0]
    return p.error_code, p.offset


def run(bootstrap: str) -> dict[str, Any]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(30)
    _plain(bootstrap, TOPIC, b"before")
    stamp = int(time.time() * 1000) - HOUR_MS
    pid, epoch, start = _write_hanging_batch(bootstrap, TOPIC, stamp)
    _plain(bootstrap, TOPIC, b"after")
    out: dict[str, Any] = {"start": start, "epoch": epoch}
    with RawKafkaClient(bootstrap) as c:
        out["producers before"] = _producers(c, pid, stamp)
        listed = c.request(66, 1, ListTransactionsRequest(producer_id_filters=[pid]))
        out["list by producer id"] = (listed.error_code, [t.transactional_id for t in listed.transaction_states])
        out["offsets before"] = (_latest(c, 1), _latest(c, 0))
        r = c.request(27, 1, WM(markers=[WM.WritableTxnMarker(
            producer_id=pid, producer_epoch=epoch, transaction_result=False, coordinator_epoch=0,
            topics=[WM.WritableTxnMarkerTopic(name=TOPIC, partition_indexes=[0])])]))
        out["abort"] = [(m.producer_id - pid, [(t.name, [(p.partition_index, p.error_code) for p in t.partitions])
                                               for t in m.topics]) for m in r.markers]
        out["producers after"] = _producers(c, pid, stamp)
        out["offsets after"] = (_latest(c, 1), _latest(c, 0))
        r = c.request(27, 1, WM(markers=[WM.WritableTxnMarker(
            producer_id=pid, producer_epoch=epoch, transaction_result=False, coordinator_epoch=0,
            topics=[WM.WritableTxnMarkerTopic(name=TOPIC, partition_indexes=[0])])]))
        out["abort again"] = [[(p.partition_index, p.error_code) for t in m.topics for p in t.partitions]
                              for m in r.markers]
        out["offsets after the second abort"] = (_latest(c, 1), _latest(c, 0))
    return out


def test_hanging_trace_on_kbroker(kbroker_factory: Any) -> None:
    out = run(kbroker_factory(NO_VERIFICATION).bootstrap)
    assert out["producers before"] == [(0, 0, out["epoch"], 2, "batch", -1, 1)]
    assert out["list by producer id"] == (0, [])
    assert out["offsets before"] == ((0, 1), (0, 5))
    assert out["abort"] == [(0, [(TOPIC, [(0, 0)])])]
    # The marker's timestamp becomes the producer's last timestamp (Kafka's appendEndTxnMarker).
    assert out["producers after"] == [(0, 0, out["epoch"], 2, "now", 0, -1)]
    assert out["offsets after"] == ((0, 6), (0, 6))
    # A second ABORT for the same producer and epoch: a marker with no open transaction (Kafka appends it).
    assert out["abort again"] == [[(0, 0)]]
    assert out["offsets after the second abort"] == ((0, 7), (0, 7))


@pytest.mark.reference
@pytest.mark.java
def test_hanging_trace_matches_kafka(tmp_path: Path, kbroker_factory: Any) -> None:
    reason = reference_unavailable_reason()
    if reason:
        pytest.skip(reason)
    broker = kbroker_factory(NO_VERIFICATION)
    ours = run(broker.bootstrap)
    broker.stop()
    bootstrap, stop = start_reference_kafka(tmp_path, overrides=NO_VERIFICATION)
    try:
        kafka = run(bootstrap)
    finally:
        stop()
    assert ours == kafka


def run_verified(bootstrap: str) -> tuple[int, int]:
    """With verification on (the default): the same batch's error and the log end offset after it."""
    topic = "hanging-verified"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    with RawKafkaClient(bootstrap) as c:
        c.request(22, 4, InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000,
                                               producer_id=-1, producer_epoch=-1))  # the first id block
    batch = build_batch([SimpleRecord(b"x", None, int(time.time() * 1000))], producer_id=0, producer_epoch=0,
                        base_sequence=0, is_transactional=True)
    with RawKafkaClient(bootstrap) as c:
        deadline = time.monotonic() + 30
        while True:  # until the coordinator (and __transaction_state) is there to answer
            fc = c.request(10, 4, FindCoordinatorRequest(key_type=1, coordinator_keys=["ghost"]))
            if fc.coordinators[0].error_code == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        while True:
            r = c.request(0, 9, P(transactional_id="ghost", acks=-1, timeout_ms=30000, topic_data=[
                P.TopicProduceData(name=topic, partition_data=[P.PartitionProduceData(index=0, records=bytes(batch))])]))
            error = r.responses[0].partition_responses[0].error_code
            if error != 19 or time.monotonic() > deadline:  # NOT_ENOUGH_REPLICAS: coordinator still loading
                break
            time.sleep(0.2)
        lo = c.request(2, 7, LO(replica_id=-1, isolation_level=0, topics=[LO.ListOffsetsTopic(
            name=topic, partitions=[LO.ListOffsetsPartition(partition_index=0, timestamp=-1)])]))
    return error, lo.topics[0].partitions[0].offset


@pytest.mark.reference
@pytest.mark.java
def test_verified_refusal_matches_kafka(tmp_path: Path, kbroker_factory: Any) -> None:
    reason = reference_unavailable_reason()
    if reason:
        pytest.skip(reason)
    broker = kbroker_factory()
    ours = run_verified(broker.bootstrap)
    broker.stop()
    assert ours == (49, 0)  # INVALID_PRODUCER_ID_MAPPING, nothing written
    bootstrap, stop = start_reference_kafka(tmp_path)
    try:
        kafka = run_verified(bootstrap)
    finally:
        stop()
    assert ours == kafka
