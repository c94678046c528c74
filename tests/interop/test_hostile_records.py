"""Hostile record batches against a real kbroker process (issue 19 findings 1, 2 and 10).

Each batch below has a correct CRC and a wrong inside; before the validator walked the records,
kbroker appended them with error 0 and librdkafka could not read past them. Here each is sent with
the raw client, must be refused with CORRUPT_MESSAGE or INVALID_RECORD, and afterwards
confluent-kafka (librdkafka) reads the partition to its end without an error. The noisy-neighbour
test sends zstd bombs to a topic whose compression.type forces recompression while a well-behaved
client measures its produce and metadata latency.
"""

from __future__ import annotations

import statistics
import struct
import threading
import time
import zlib
from collections.abc import Callable
from typing import Any

import pytest
import zstandard
from crc32c import crc32c

from kbroker.protocol.compression import CompressionType, compress
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages.fetch import FetchRequest
from kbroker.protocol.messages.metadata import MetadataRequest
from kbroker.protocol.messages.produce import ProduceRequest
from kbroker.protocol.record_format import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    HEADER,
    LOG_OVERHEAD,
    MAGIC_V2,
    RECORD_BATCH_OVERHEAD,
    RECORDS_OFFSET,
    UINT32,
    encode_record,
)
from kbroker.protocol.records import SimpleRecord, build_batch
from kbroker.protocol.varint import encode_varint
from tests.support.raw_client import RawKafkaClient

pytestmark = pytest.mark.interop


def raw_batch(payload: bytes, count: int, *, codec: int = 0, lod: int | None = None, base_offset: int = 0) -> bytes:
    now = int(time.time() * 1000)
    out = bytearray(RECORD_BATCH_OVERHEAD + len(payload))
    HEADER.pack_into(out, 0, base_offset, len(out) - LOG_OVERHEAD, -1, MAGIC_V2, 0, codec,
                     count - 1 if lod is None else lod, now, now, -1, -1, -1, count)
    out[RECORDS_OFFSET:] = payload
    UINT32.pack_into(out, CRC_OFFSET, crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
    return bytes(out)


def legacy_message_set(magic: int) -> bytes:
    """One magic-0/1 message (offset, size, crc, magic, attributes, [timestamp], key, value)."""
    body = struct.pack(">bb", magic, 0) + (struct.pack(">q", 0) if magic == 1 else b"")
    body += struct.pack(">i", -1) + struct.pack(">i", 5) + b"hello"
    msg = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", 0, len(msg)) + msg


def rec(i: int) -> bytes:
    return encode_record(i, 0, b"k", b"v")


HOSTILE: dict[str, tuple[bytes, set[ErrorCode]]] = {
    "garbage records": (raw_batch(bytes(range(3, 250, 7)), 1), {ErrorCode.INVALID_RECORD}),
    "count above records": (raw_batch(rec(0) + rec(1), 5), {ErrorCode.INVALID_RECORD}),
    "count below records": (raw_batch(rec(0) + rec(1) + rec(2), 1), {ErrorCode.INVALID_RECORD}),
    "record size past batch": (raw_batch(encode_varint(900) + rec(0)[1:], 1), {ErrorCode.INVALID_RECORD}),
    "over-long varint": (raw_batch(b"\xff" * 7 + b"\x01" + rec(0), 1), {ErrorCode.INVALID_RECORD}),
    "header count huge": (raw_batch(encode_varint(7) + b"\x00\x00\x00\x02k\x02v" + encode_varint(10 ** 6), 1),
                          {ErrorCode.INVALID_RECORD}),
    "offset deltas repeated": (raw_batch(rec(0) + rec(0) + rec(0), 3), {ErrorCode.INVALID_RECORD}),
    "offset delta far ahead": (raw_batch(rec(0) + rec(1_000_000), 2), {ErrorCode.INVALID_RECORD}),
    "base offset not zero": (raw_batch(rec(0), 1, base_offset=42), {ErrorCode.INVALID_RECORD}),
    "codec 5": (raw_batch(rec(0), 1, codec=5), {ErrorCode.CORRUPT_MESSAGE}),
    "codec 6": (raw_batch(rec(0), 1, codec=6), {ErrorCode.CORRUPT_MESSAGE}),
    "codec 7": (raw_batch(rec(0), 1, codec=7), {ErrorCode.CORRUPT_MESSAGE}),
    **{f"garbage {c.kafka_name} payload": (raw_batch(bytes(range(40, 140)), 1, codec=c), {ErrorCode.CORRUPT_MESSAGE})
       for c in (CompressionType.GZIP, CompressionType.SNAPPY, CompressionType.LZ4, CompressionType.ZSTD)},
    **{f"{c.kafka_name} with bad records": (raw_batch(compress(c, rec(0) + b"\x07junk"), 1, codec=c),
                                            {ErrorCode.INVALID_RECORD})
       for c in (CompressionType.GZIP, CompressionType.SNAPPY, CompressionType.LZ4, CompressionType.ZSTD)},
    "magic 1 message set": (legacy_message_set(1), {ErrorCode.INVALID_RECORD}),
    "magic 0 message set": (legacy_message_set(0), {ErrorCode.INVALID_RECORD}),
}


def produce_req(topic: str, records: bytes, acks: int = 1) -> ProduceRequest:
    return ProduceRequest(transactional_id=None, acks=acks, timeout_ms=10_000, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.PartitionProduceData(index=0, records=records)])])


def create(client: RawKafkaClient, topic: str) -> None:
    req = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)], allow_auto_topic_creation=True)
    deadline = time.monotonic() + 20
    while True:
        (t,) = client.request(3, 12, req).topics
        if t.error_code == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert t.error_code == 0, t


def good_batch(n: int, tag: str) -> bytes:
    return bytes(build_batch([SimpleRecord(f"{tag}-{i}".encode(), b"k") for i in range(n)]))


def produce_error(client: RawKafkaClient, topic: str, records: bytes) -> tuple[int, Any]:
    resp = client.request(0, 9, produce_req(topic, records))
    p = resp.responses[0].partition_responses[0]
    return p.error_code, p


def read_to_end_with_librdkafka(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"hostile-{time.monotonic_ns()}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest", "enable.partition.eof": True})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        values: list[bytes] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    if len(values) >= expected:
                        return values
                    continue
                raise AssertionError(f"librdkafka error reading {topic}: {m.error()}")
            values.append(m.value())
        raise AssertionError(f"read {len(values)} of {expected} records before the deadline")
    finally:
        c.close()


def test_hostile_batches_are_refused_and_the_partition_stays_readable(kbroker: Any) -> None:
    topic = "hostile"
    with RawKafkaClient(kbroker.bootstrap) as client:
        create(client, topic)
        expected: list[bytes] = []
        for i, (name, (batch, codes)) in enumerate(HOSTILE.items()):
            err, p = produce_error(client, topic, batch)
            assert err in codes, f"{name}: {ErrorCode(err).name}"
            assert p.base_offset == -1, name
            ok, _ = produce_error(client, topic, good_batch(2, f"good{i}"))
            assert ok == 0, name
            expected += [f"good{i}-0".encode(), f"good{i}-1".encode()]
        # Per-record errors travel in the response (v8+): the index of the first repeated delta.
        _, p = produce_error(client, topic, HOSTILE["offset deltas repeated"][0])
        assert [e.batch_index for e in p.record_errors] == [1] and p.error_message
    assert read_to_end_with_librdkafka(kbroker.bootstrap, topic, len(expected)) == expected


def fetch_req(topic: str) -> FetchRequest:
    return FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                        session_id=0, session_epoch=-1, topics=[FetchRequest.FetchTopic(topic=topic, partitions=[
                            FetchRequest.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])])


def test_fetch_below_v10_of_a_zstd_topic_is_unsupported_compression(kbroker_factory: Callable[..., Any]) -> None:
    broker = kbroker_factory({"compression.type": "zstd"})
    with RawKafkaClient(broker.bootstrap) as client:
        create(client, "z")
        assert produce_error(client, "z", good_batch(3, "z"))[0] == 0
        old = client.request(1, 9, fetch_req("z")).responses[0].partitions[0]
        assert (old.error_code, old.high_watermark, len(old.records or b"")) == (
            ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, -1, 0)
        new = client.request(1, 10, fetch_req("z")).responses[0].partitions[0]
        assert new.error_code == 0 and new.high_watermark == 3 and new.records


# --- noisy neighbour -----------------------------------------------------------------------------

#: The well-behaved client's p99 bound while bombs arrive. Before the fix one bomb held the event
#: loop for seconds (decompressing and recompressing 100+ MiB on it); the bound leaves room for a
#: 2-core test machine shared with other jobs.
P99_BOUND_S = 0.25


def zstd_bomb(uncompressed: int, tiny_records: bool) -> bytes:
    """A zstd batch of a few KB whose records section expands to ``uncompressed`` bytes: one record
    with a huge value, or (``tiny_records``) the same 6-byte record repeated, so that the record walk
    itself has millions of records to visit."""
    cobj = zstandard.ZstdCompressor(level=3).compressobj()
    if tiny_records:
        one = rec(0)
        n = uncompressed // len(one)
        block = one * (1 << 16)
        payload = b"".join(cobj.compress(block) for _ in range(n // (1 << 16)))
        count = (n // (1 << 16)) * (1 << 16)
    else:
        head = b"\x00\x00\x00\x02k" + encode_varint(uncompressed)
        payload = cobj.compress(encode_varint(len(head) + uncompressed + 1) + head)
        zeros = bytes(1 << 20)
        for _ in range(uncompressed >> 20):
            payload += cobj.compress(zeros)
        payload += cobj.compress(b"\x00")
        count = 1
    payload += cobj.flush()
    return raw_batch(payload, count, codec=CompressionType.ZSTD)


def test_zstd_bombs_do_not_stall_other_clients(kbroker_factory: Callable[..., Any]) -> None:
    broker = kbroker_factory({"compression.type": "gzip"})
    bombs = [zstd_bomb(200 << 20, False), zstd_bomb(60 << 20, False), zstd_bomb(24 << 20, True)]
    assert all(len(b) < 200_000 for b in bombs)
    with RawKafkaClient(broker.bootstrap) as good, RawKafkaClient(broker.bootstrap, timeout=120) as evil:
        create(good, "calm")
        create(good, "bombed")
        stop = threading.Event()
        outcomes: list[int] = []

        def attack() -> None:
            while not stop.is_set() and len(outcomes) < 12:
                outcomes.append(produce_error(evil, "bombed", bombs[len(outcomes) % len(bombs)])[0])

        attacker = threading.Thread(target=attack, daemon=True)
        latencies: list[float] = []
        md = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="calm")])
        attacker.start()
        try:
            deadline = time.monotonic() + 20
            i = 0
            while attacker.is_alive() and time.monotonic() < deadline:
                t0 = time.monotonic()
                if i % 2:
                    assert good.request(3, 12, md).topics[0].error_code == 0
                else:
                    assert produce_error(good, "calm", good_batch(1, f"c{i}"))[0] == 0
                latencies.append(time.monotonic() - t0)
                i += 1
                time.sleep(0.005)
        finally:
            stop.set()
            attacker.join(120)
    assert len(outcomes) >= 3, f"only {len(outcomes)} bombs were answered during the measurement"
    latencies.sort()
    p99 = latencies[int(len(latencies) * 0.99) - 1] if len(latencies) >= 100 else latencies[-1]
    print(f"{len(latencies)} requests while {len(outcomes)} bombs were answered: "
          f"median {statistics.median(latencies) * 1e3:.1f} ms, p99 {p99 * 1e3:.1f} ms, "
          f"max {latencies[-1] * 1e3:.1f} ms")
    assert p99 < P99_BOUND_S, f"p99 {p99 * 1e3:.0f} ms"
    # Over the bound (100 MiB decompressed): RECORD_LIST_TOO_LARGE; under it: recompressed and kept.
    assert ErrorCode.RECORD_LIST_TOO_LARGE in outcomes and 0 in outcomes, outcomes
