"""LogValidator's record-level checks (issue 19 finding 1): batches whose CRC is right but whose
inside is wrong are refused with Kafka's error, per-record errors carry the batch index, and what
is accepted is what a reader can read back. Each malformed shape below was appended with error 0
before the validator walked the records."""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from pathlib import Path

import pytest
import zstandard
from crc32c import crc32c

from kbroker.log.errors import InvalidRecordError, InvalidTimestampError
from kbroker.log.unified_log import UnifiedLog
from kbroker.log.validator import (
    ValidationParams,
    assign_offsets,
    check_batches,
    needs_worker,
    validate_and_assign_offsets,
)
from kbroker.protocol.compression import CompressionType, compress
from kbroker.protocol.errors import ErrorCode, KafkaError
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
from kbroker.protocol.records import RecordBatch, SimpleRecord, build_batch, iter_batches
from kbroker.protocol.varint import encode_varint, encode_varlong
from tests.log.log_test_helpers import NOW, FakeClock, read_all, small_config

CODECS = [CompressionType.NONE, CompressionType.GZIP, CompressionType.SNAPPY, CompressionType.LZ4,
          CompressionType.ZSTD]


def raw_batch(section: bytes, count: int, *, codec: int = 0, lod: int | None = None, base_ts: int = NOW,
              max_ts: int | None = None, attrs: int = 0, base_offset: int = 0, compressed: bool = False) -> bytearray:
    """A CRC-valid v2 batch around ``section`` (compressed with ``codec`` unless ``compressed``)."""
    payload = section if compressed or codec in (0, 5, 6, 7) else compress(codec, section)
    out = bytearray(RECORD_BATCH_OVERHEAD + len(payload))
    HEADER.pack_into(out, 0, base_offset, len(out) - LOG_OVERHEAD, -1, MAGIC_V2, 0, attrs | codec,
                     count - 1 if lod is None else lod, base_ts, base_ts if max_ts is None else max_ts,
                     -1, -1, -1, count)
    out[RECORDS_OFFSET:] = payload
    UINT32.pack_into(out, CRC_OFFSET, crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
    return out


def rec(i: int, key: bytes | None = b"k", value: bytes | None = b"v", ts_delta: int = 0,
        headers: tuple[tuple[str, bytes | None], ...] = ()) -> bytes:
    return encode_record(i, ts_delta, key, value, headers)


def body(fields: bytes) -> bytes:
    """A record from its raw fields (attributes onward), length-prefixed."""
    return encode_varint(len(fields)) + fields


def check(batch: bytes | bytearray, **config: object) -> object:
    cfg = small_config(**{"segment_bytes": 1 << 20, **config})
    return validate_and_assign_offsets(memoryview(bytearray(batch)), 0, 0, cfg, NOW, topic_partition="t-0")


def refused(batch: bytes | bytearray, code: ErrorCode, **config: object) -> KafkaError:
    with pytest.raises(KafkaError) as ei:
        check(batch, **config)
    assert ei.value.error_code == code, ei.value
    return ei.value


def ok(i: int) -> bytes:
    return rec(i)


# --- malformed shapes ----------------------------------------------------------------------------

@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.kafka_name)
def test_garbage_records_are_invalid_record(codec: CompressionType) -> None:
    garbage = bytes(range(7, 200, 3))
    refused(raw_batch(garbage, 1, codec=codec), ErrorCode.INVALID_RECORD)


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.kafka_name)
def test_count_above_the_records_present(codec: CompressionType) -> None:
    err = refused(raw_batch(ok(0) + ok(1), 3, codec=codec), ErrorCode.INVALID_RECORD)
    assert "premature EOF" in str(err) or "Invalid record size" in str(err)


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.kafka_name)
def test_count_below_the_records_present(codec: CompressionType) -> None:
    err = refused(raw_batch(ok(0) + ok(1), 1, codec=codec), ErrorCode.INVALID_RECORD)
    assert "records still remaining" in str(err)


@pytest.mark.parametrize("shape,section", [
    ("record size past the batch", encode_varint(500) + bytes(rec(0))[1:]),
    ("record size below the minimum", encode_varint(3) + b"\x00\x00\x00"),
    ("negative record size", encode_varint(-7) + bytes(rec(0))[1:]),
    ("varint longer than 5 bytes", b"\xff\xff\xff\xff\xff\xff\x01" + bytes(rec(0))[1:]),
    ("key length -5", body(b"\x00\x00\x00" + encode_varint(-5) + encode_varint(1) + b"v\x00")),
    ("key runs past the record", body(b"\x00\x00\x00" + encode_varint(40) + b"k" + encode_varint(1) + b"v\x00")),
    ("value length -3", body(b"\x00\x00\x00\x02k" + encode_varint(-3) + b"\x00")),
    ("header count negative", body(b"\x00\x00\x00\x02k\x02v" + encode_varint(-2))),
    ("header count above the bytes left", body(b"\x00\x00\x00\x02k\x02v" + encode_varint(1_000_000))),
    ("negative header key size", body(b"\x00\x00\x00\x02k\x02v\x02" + encode_varint(-4) + b"\x00")),
    ("fields shorter than the record size", encode_varint(len(rec(0)) + 2) + bytes(rec(0))[1:] + b"\x00\x00"),
    ("timestamp varlong cut short", body(b"\x00\xff\xff")),
])
@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.ZSTD], ids=lambda c: c.kafka_name)
def test_malformed_record_fields_are_invalid_record(shape: str, section: bytes, codec: CompressionType) -> None:
    refused(raw_batch(section, 1, codec=codec), ErrorCode.INVALID_RECORD)


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_codec_ids_are_corrupt(codec: int) -> None:
    err = refused(raw_batch(ok(0), 1, codec=codec), ErrorCode.CORRUPT_MESSAGE)
    assert f"Unknown compression type id: {codec}" in str(err)


@pytest.mark.parametrize("codec", CODECS[1:], ids=lambda c: c.kafka_name)
def test_garbage_compressed_payload_is_corrupt(codec: CompressionType) -> None:
    refused(raw_batch(os.urandom(64), 1, codec=codec, compressed=True), ErrorCode.CORRUPT_MESSAGE)
    good = bytearray(compress(codec, ok(0) + ok(1)))
    truncated = bytes(good[: len(good) - 3])
    with pytest.raises(KafkaError) as ei:
        check(raw_batch(truncated, 2, codec=codec, compressed=True))
    assert ei.value.error_code in (ErrorCode.CORRUPT_MESSAGE, ErrorCode.INVALID_RECORD)


def test_offset_deltas_must_be_the_record_index() -> None:
    err = refused(raw_batch(rec(0) + rec(0) + rec(2), 3), ErrorCode.INVALID_RECORD)
    assert [i for i, _ in err.record_errors] == [1]  # type: ignore[attr-defined]
    refused(raw_batch(rec(0) + rec(1_000_000), 2, codec=CompressionType.LZ4), ErrorCode.INVALID_RECORD)


def test_base_offset_from_a_client_must_be_zero() -> None:
    err = refused(raw_batch(ok(0), 1, base_offset=7), ErrorCode.INVALID_RECORD)
    assert "should be 0, but it is 7" in str(err)


def test_each_record_timestamp_is_checked_with_its_batch_index() -> None:
    hour = 3_600_000
    # Header base and max timestamps are fine; record 1 lies two hours in the future.
    section = rec(0) + rec(1, ts_delta=2 * hour) + rec(2, ts_delta=5)
    with pytest.raises(InvalidTimestampError) as ei:
        check(raw_batch(section, 3, max_ts=NOW + 5), message_timestamp_after_max_ms=hour)
    assert [i for i, _ in ei.value.record_errors] == [1]  # type: ignore[attr-defined]
    assert "of message with offset 1 is out of range" in ei.value.record_errors[0][1]  # type: ignore[attr-defined]


def test_producer_may_not_set_log_append_time() -> None:
    with pytest.raises(InvalidTimestampError) as ei:
        check(raw_batch(ok(0) + ok(1), 2, attrs=0x08, max_ts=-1))
    assert [i for i, _ in ei.value.record_errors] == [0, 1]  # type: ignore[attr-defined]


def test_compacted_topic_lists_every_keyless_record() -> None:
    section = rec(0, key=None) + rec(1) + rec(2, key=None)
    with pytest.raises(InvalidRecordError) as ei:
        check(raw_batch(section, 3), cleanup_policy="compact")
    assert [i for i, _ in ei.value.record_errors] == [0, 2]  # type: ignore[attr-defined]
    assert "2 record errors in total" in str(ei.value)


def test_header_max_timestamp_is_set_from_the_records() -> None:
    """Kafka's setMaxTimestamp: a header whose maxTimestamp lies is corrected (and its CRC redone)."""
    section = rec(0) + rec(1, ts_delta=40) + rec(2, ts_delta=10)
    vr = check(raw_batch(section, 3, max_ts=NOW + 99_999))
    (b,) = iter_batches(bytes(vr.data))  # type: ignore[attr-defined]
    b.ensure_valid()
    assert b.max_timestamp == NOW + 40 and vr.max_timestamp == NOW + 40  # type: ignore[attr-defined]


def test_decompression_bomb_is_refused_without_materialising() -> None:
    """A few KB of zstd that expand past the bound: RECORD_LIST_TOO_LARGE, as soon as the bound is hit."""
    params = ValidationParams(-1, False, False, 1 << 20, -(1 << 62), 1 << 62, NOW, True, "t-0", 8 << 20)
    value_len = 64 << 20
    head = b"\x00\x00\x00\x02k" + encode_varint(value_len)
    cobj = zstandard.ZstdCompressor().compressobj()
    payload = cobj.compress(encode_varint(len(head) + value_len + 1) + head)
    zeros = bytes(1 << 20)
    for _ in range(64):
        payload += cobj.compress(zeros)
    payload += cobj.compress(b"\x00") + cobj.flush()
    assert len(payload) < 10_000
    batch = raw_batch(payload, 1, codec=CompressionType.ZSTD, compressed=True)
    with pytest.raises(KafkaError) as ei:
        check_batches(memoryview(batch), params)
    assert ei.value.error_code == ErrorCode.RECORD_LIST_TOO_LARGE


@pytest.mark.parametrize("source", CODECS, ids=lambda c: c.kafka_name)
@pytest.mark.parametrize("target", ["producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"])
def test_valid_batches_pass_and_read_back(source: CompressionType, target: str) -> None:
    records = [SimpleRecord(b"value-%d" % i * (i + 1), None if i == 2 else b"key-%d" % i, NOW + i,
                            (("h", b"x"), ("\u00e9", None)) if i % 2 else ()) for i in range(50)]
    vr = check(build_batch(records, compression=source, now_ms=NOW), compression_type=target)
    (b,) = iter_batches(bytes(vr.data))  # type: ignore[attr-defined]
    b.ensure_valid()
    got = [(r.offset, r.key, r.value, r.headers, r.timestamp) for r in b]
    assert got == [(i, r.key, r.value, r.headers, r.timestamp) for i, r in enumerate(records)]
    assert b.max_timestamp == NOW + 49


def test_needs_worker_sends_compressed_and_large_batches_off_the_loop() -> None:
    cfg = small_config()
    small = build_batch([SimpleRecord(b"v")] * 3)
    assert not needs_worker(small, cfg)
    assert needs_worker(build_batch([SimpleRecord(b"v")] * 3, compression=CompressionType.LZ4), cfg)
    assert needs_worker(small, small_config(compression_type="zstd"))
    assert needs_worker(build_batch([SimpleRecord(b"v")] * 3000), cfg)


# --- the structure-aware mutator ----------------------------------------------------------------

class Mutator:
    """Builds CRC-valid batches whose inside is wrong: random record counts and offset ranges,
    rewritten varints (record sizes, key/value/header lengths, header counts, non-minimal and
    over-long encodings), truncated or extended sections, flipped bytes, codec ids 0-7, garbage or
    damaged compressed payloads. The CRC is always recomputed, so only the validator's walk can
    tell."""

    def __init__(self, seed: int) -> None:
        import random
        self.rng = random.Random(seed)

    def records(self) -> tuple[list[bytes], int]:
        r = self.rng
        n = r.choice([1, 1, 2, 3, 5, 17, 60])
        out = []
        for i in range(n):
            key = None if r.random() < 0.2 else r.randbytes(r.randrange(0, 12))
            value = None if r.random() < 0.1 else r.randbytes(r.choice([0, 1, 5, 40, 300]))
            headers = tuple((f"h{j}", None if r.random() < 0.3 else r.randbytes(r.randrange(0, 6)))
                            for j in range(r.choice([0, 0, 1, 3])))
            out.append(encode_record(i, r.choice([0, i, -i, 1000 * i]), key, value, headers))
        return out, n

    def varint_garbage(self) -> bytes:
        r = self.rng
        kind = r.randrange(5)
        if kind == 0:
            return encode_varint(r.choice([-(2 ** 31), -2, -1, 0, 1, 2, 127, 128, 2 ** 20, 2 ** 31 - 1]))
        if kind == 1:
            return b"\xff" * r.randrange(5, 12) + b"\x01"  # over-long
        if kind == 2:
            return b"\x80" * r.randrange(1, 4) + b"\x00"  # non-minimal but valid encodings
        if kind == 3:
            return encode_varlong(r.randrange(-(2 ** 63), 2 ** 63))
        return r.randbytes(r.randrange(1, 6))

    def mutate_section(self, recs: list[bytes]) -> bytes:
        r = self.rng
        section = bytearray(b"".join(recs))
        op = r.randrange(8)
        if op == 0 and recs:  # rewrite the size varint of one record
            i = r.randrange(len(recs))
            start = sum(map(len, recs[:i]))
            old = recs[i]
            n = 1
            while old[n - 1] & 0x80:
                n += 1
            section[start:start + n] = self.varint_garbage()
        elif op == 1 and section:  # overwrite a varint-sized span somewhere inside
            p = r.randrange(len(section))
            g = self.varint_garbage()
            section[p:p + len(g)] = g
        elif op == 2 and section:  # truncate
            del section[r.randrange(len(section)):]
        elif op == 3:  # trailing garbage
            section += r.randbytes(r.randrange(1, 20))
        elif op == 4 and section:  # flip bytes
            for _ in range(r.randrange(1, 4)):
                p = r.randrange(len(section))
                section[p] ^= 1 << r.randrange(8)
        elif op == 5:  # pure garbage
            section = bytearray(r.randbytes(r.randrange(0, 200)))
        elif op == 6 and len(recs) > 1:  # drop or duplicate a record
            i = r.randrange(len(recs))
            parts = list(recs)
            if r.random() < 0.5:
                del parts[i]
            else:
                parts.insert(i, recs[i])
            section = bytearray(b"".join(parts))
        # op 7: leave the records alone (header-only mutation)
        return bytes(section)

    def batch(self) -> bytearray:
        r = self.rng
        recs, n = self.records()
        section = self.mutate_section(recs)
        count = n if r.random() < 0.6 else r.choice([0, 1, n - 1, n + 1, 2 * n, 2 ** 31 - 1, -1])
        lod = count - 1 if r.random() < 0.8 else r.choice([-1, 0, n, 2 ** 31 - 1])
        codec = r.choice([0, 0, 1, 2, 3, 4, 4, 5, 6, 7])
        payload: bytes = section
        if 1 <= codec <= 4:
            if r.random() < 0.15:
                payload = r.randbytes(r.randrange(0, 100))  # garbage compressed payload
            else:
                payload = compress(codec, section)
                if r.random() < 0.2 and payload:
                    p = r.randrange(len(payload))
                    payload = payload[:p] + bytes([payload[p] ^ 0x5A]) + payload[p + 1:]
        attrs = 0x08 if r.random() < 0.05 else 0
        return raw_batch(payload, count, codec=codec, lod=lod, attrs=attrs, compressed=True)


def run_mutator(seconds: float, seed: int, tmp_path: Path) -> tuple[int, int]:
    """Feed mutated batches to a real log for ``seconds``: each is refused with CORRUPT_MESSAGE or
    INVALID_RECORD (INVALID_TIMESTAMP for the LogAppendTime flag), or accepted and then read back
    record by record, from the log's own files, with consecutive offsets."""
    import time

    m = Mutator(seed)
    clock = FakeClock()
    log = UnifiedLog(tmp_path / "t-0", small_config(segment_bytes=1 << 20), time_ms=clock)
    allowed = {ErrorCode.CORRUPT_MESSAGE, ErrorCode.INVALID_RECORD, ErrorCode.INVALID_TIMESTAMP}
    tried = accepted = 0
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            batch = m.batch()
            tried += 1
            before = log.log_end_offset
            try:
                info = log.append_as_leader(memoryview(batch), 0)
            except KafkaError as e:
                assert e.error_code in allowed, (e, bytes(batch).hex())
                assert log.log_end_offset == before
                continue
            accepted += 1
            count = info.last_offset - info.first_offset + 1
            got = [o for o, _, _ in read_all(log, before)]
            assert got == list(range(before, before + count)), bytes(batch).hex()
    finally:
        log.close()
    return tried, accepted


def test_mutator_bounded(tmp_path: Path) -> None:
    tried, accepted = run_mutator(3.0, 19, tmp_path)
    assert tried > 200 and 0 < accepted < tried


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_mutator_long(tmp_path: Path) -> None:
    tried, accepted = run_mutator(float(os.environ.get("KBROKER_MUTATOR_SECONDS", "600")), 1919, tmp_path)
    print(f"mutator: {tried} batches tried, {accepted} accepted and read back")
    assert tried > 10_000


def test_assign_offsets_keeps_checked_order() -> None:
    b1, b2 = build_batch([SimpleRecord(b"a")] * 2, now_ms=NOW), build_batch([SimpleRecord(b"b")], now_ms=NOW)
    both = bytearray(b1 + b2)
    params = ValidationParams(-1, False, False, 1 << 20, 0, 1 << 62, NOW, True, "t-0")
    checked = check_batches(memoryview(both), params)
    vr = assign_offsets(memoryview(both), checked, 10, 3, 1 << 30)
    assert [(h.base_offset, h.partition_leader_epoch) for h in vr.headers] == [(10, 3), (12, 3)]
    assert [RecordBatch(memoryview(bytes(vr.data))[:len(b1)]).is_valid()]


_ = (struct, Callable)
