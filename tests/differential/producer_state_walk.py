"""A seeded random walk over one partition's producer state, sent on the wire to any Kafka-compatible
broker; it returns what every step answered.

`test_producer_state_vs_kafka.py` runs the same walk against Apache Kafka 4.3.1 and against kbroker and
compares the traces step by step. The steps are what exercises Kafka's ProducerAppendInfo and
ProducerStateManager rules from outside:

- idempotent and transactional batches of three producers (the brokers run without KIP-890
  verification, `transaction.partition.verification.enable=false`, so a transactional batch needs no
  coordinator and a marker closes its transaction), with the next sequence, a repeat of a recent batch (a
  duplicate, or not once it is older than the five remembered), a gap, sequence 0, a wrapped or random
  sequence; at the producer's epoch, the next one, an older one, or a jump;
- COMMIT/ABORT markers through WriteTxnMarkers, v1 (transaction version 0) and v2 with transaction
  version 2, at the producer's epoch, the next one, or an older one (an idempotent producer's markers
  are what `kafka-transactions abort` writes; they bump or keep the epoch and clear the batches);
- DeleteRecords up to the high watermark, after which a producer whose batches are all gone may be
  forgotten (KIP-360).

Requests are built with kbroker's codecs and sent by `RawKafkaClient`, so both brokers get the same
bytes. A step's observation is its error code and, for a write, the offset it was given; the trace ends
with the partition's log start and end offsets.
"""

from __future__ import annotations

import random
import time
from typing import Any

from kbroker.protocol.messages import create_topics, produce
from kbroker.protocol.messages.delete_records import DeleteRecordsRequest as DR
from kbroker.protocol.messages.list_offsets import ListOffsetsRequest as LO
from kbroker.protocol.messages.metadata import MetadataRequest
from kbroker.protocol.messages.write_txn_markers import WriteTxnMarkersRequest as WM
from kbroker.protocol.records import SimpleRecord, build_batch
from tests.support.raw_client import RawKafkaClient

TOPIC = "producer-state-walk"
BASE_TS = 1_700_000_000_000
PRODUCERS = (5000, 5001, 5002)
INT32_MAX = 2**31 - 1


class _Producer:
    """What the walk believes a producer wrote (to pick meaningful sequences, not to predict answers)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.epoch = 0
        self.next_seq = 0
        self.recent: list[tuple[int, int, int]] = []  # (epoch, seq, count) of batches answered NONE


def _produce(c: RawKafkaClient, pid: int, epoch: int, seq: int, count: int, step: int,
             transactional: bool) -> tuple[int, int, int]:
    records = [SimpleRecord(value=b"s%d-%d" % (step, i), timestamp=BASE_TS + step) for i in range(count)]
    batch = build_batch(records, producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                        is_transactional=transactional)
    P = produce.ProduceRequest
    r = c.request(0, 9, P(transactional_id="walk" if transactional else None, acks=-1, timeout_ms=30000, topic_data=[P.TopicProduceData(
        name=TOPIC, partition_data=[P.PartitionProduceData(index=0, records=bytes(batch))])]))
    p = r.responses[0].partition_responses[0]
    return p.error_code, p.base_offset, p.log_start_offset


def _marker(c: RawKafkaClient, pid: int, epoch: int, commit: bool, version: int) -> int:
    r = c.request(27, version, WM(markers=[WM.WritableTxnMarker(
        producer_id=pid, producer_epoch=epoch, transaction_result=commit, coordinator_epoch=0,
        transaction_version=2 if version >= 2 else 0,
        topics=[WM.WritableTxnMarkerTopic(name=TOPIC, partition_indexes=[0])])]))
    return int(r.markers[0].topics[0].partitions[0].error_code)


def _delete_records(c: RawKafkaClient) -> tuple[int, int]:
    r = c.request(21, 2, DR(timeout_ms=30000, topics=[DR.DeleteRecordsTopic(name=TOPIC, partitions=[
        DR.DeleteRecordsPartition(partition_index=0, offset=-1)])]))
    p = r.topics[0].partitions[0]
    return p.error_code, p.low_watermark


def _offset(c: RawKafkaClient, timestamp: int, isolation_level: int = 0) -> int:
    r = c.request(2, 7, LO(replica_id=-1, isolation_level=isolation_level, topics=[LO.ListOffsetsTopic(name=TOPIC, partitions=[
        LO.ListOffsetsPartition(partition_index=0, timestamp=timestamp)])]))
    return int(r.topics[0].partitions[0].offset)


def _create(c: RawKafkaClient) -> None:
    T = create_topics.CreateTopicsRequest
    error = c.request(19, 7, T(timeout_ms=30000, topics=[T.CreatableTopic(
        name=TOPIC, num_partitions=1, replication_factor=1, configs=[])])).topics[0].error_code
    assert error == 0, error
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        m = c.request(3, 12, MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=TOPIC)]))
        if m.topics and m.topics[0].error_code == 0 and m.topics[0].partitions[0].leader_id >= 0:
            break
        time.sleep(0.1)
    # Kafka answers Metadata from its cache a moment before its replica manager hosts the partition
    # (WriteTxnMarkers would be UNKNOWN_TOPIC_OR_PARTITION then): one plain record, retried until
    # written, so the walk starts on a hosted partition (offset 0 on both brokers).
    P = produce.ProduceRequest
    plain = bytes(build_batch([SimpleRecord(value=b"warm-up", timestamp=BASE_TS)]))
    while time.monotonic() < deadline:
        r = c.request(0, 9, P(acks=-1, timeout_ms=30000, topic_data=[P.TopicProduceData(
            name=TOPIC, partition_data=[P.PartitionProduceData(index=0, records=plain)])]))
        if r.responses[0].partition_responses[0].error_code == 0:
            return
        time.sleep(0.1)
    raise TimeoutError(f"{TOPIC} is not hosted")


def _choose_sequence(rng: random.Random, p: _Producer) -> tuple[str, int, int]:
    """(kind, epoch, sequence) of the next batch."""
    roll = rng.random()
    if roll < 0.45:
        return "next", p.epoch, p.next_seq
    if roll < 0.60 and p.recent:
        epoch, seq, _count = rng.choice(p.recent)
        return "repeat", epoch, seq
    if roll < 0.68:
        return "gap", p.epoch, p.next_seq + rng.randint(1, 3)
    if roll < 0.76:
        return "zero", p.epoch, 0
    if roll < 0.84:
        return "new epoch at 0", p.epoch + 1, 0
    if roll < 0.88:
        return "new epoch not at 0", p.epoch + 1, rng.randint(1, 5)
    if roll < 0.93:
        return "older epoch", max(0, p.epoch - 1), p.next_seq
    if roll < 0.96:
        return "wrap", p.epoch, INT32_MAX - rng.randint(0, 1)
    return "random", p.epoch + rng.randint(0, 2), rng.randint(0, 50)


def run(bootstrap: str, seed: int, steps: int) -> list[Any]:
    rng = random.Random(seed)
    producers = [_Producer(pid) for pid in PRODUCERS]
    trace: list[Any] = []
    with RawKafkaClient(bootstrap) as c:
        _create(c)
        for step in range(steps):
            p = rng.choice(producers)
            roll = rng.random()
            if roll < 0.10:
                # Never below 0: Kafka 4.3.1 answers a marker at epoch -1 with UNKNOWN_SERVER_ERROR (its
                # control batch cannot be built), kbroker with INVALID_PRODUCER_EPOCH; no coordinator
                # sends one.
                epoch = max(0, p.epoch + rng.choice((0, 0, 1, -1)))
                version = rng.choice((1, 2))
                commit = rng.random() < 0.5
                error = _marker(c, p.pid, epoch, commit, version)
                trace.append((step, "marker", p.pid, epoch, commit, version, error))
                if error == 0 and epoch >= p.epoch:
                    if epoch > p.epoch:
                        p.next_seq = 0
                    p.epoch = epoch
                    p.recent.clear()
                continue
            if roll < 0.13:
                trace.append((step, "delete records", _delete_records(c)))
                continue
            if roll < 0.15:
                trace.append((step, "last stable offset", _offset(c, -1, isolation_level=1)))
                continue
            kind, epoch, seq = _choose_sequence(rng, p)
            count = rng.randint(1, 3)
            transactional = rng.random() < 0.35
            if kind == "repeat":
                count = next(n for e, s, n in p.recent if (e, s) == (epoch, seq))
            error, offset, log_start = _produce(c, p.pid, epoch, seq, count, step, transactional)
            trace.append((step, "produce", kind, p.pid, epoch, seq, count, error, offset, log_start, transactional))
            if error == 0 and kind != "repeat":
                if epoch != p.epoch:
                    p.recent.clear()
                p.epoch = max(p.epoch, epoch)
                p.next_seq = (seq + count) % (INT32_MAX + 1)
                p.recent = (p.recent + [(epoch, seq, count)])[-8:]
            elif error == 45 and rng.random() < 0.3:  # now and then, resynchronise as a client would not
                p.next_seq = 0
        trace.append(("log start, end, last stable", _offset(c, -2), _offset(c, -1), _offset(c, -1, 1)))
    return trace
