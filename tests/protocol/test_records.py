"""Tests for kbroker.protocol.records: the v2 batch view, CRC, patching, records, builders.

Interop: batches built by kafka-python's and aiokafka's own record builders (independent
implementations of DefaultRecordBatch) are parsed by our code, and ours by theirs.
"""

from __future__ import annotations

import struct
from pathlib import Path

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kbroker.protocol.compression import XERIAL_MAGIC, CompressionType, DecompressionBombError
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.records import (
    LOG_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    ControlRecordType,
    CorruptRecordError,
    InvalidRecordError,
    RecordBatch,
    RecordsError,
    SimpleRecord,
    TimestampType,
    batch_size_at,
    build_batch,
    build_control_batch,
    encode_record,
    increment_sequence,
    iter_batches,
    parse_control_record_type,
    parse_end_txn_marker,
    recompress_batch,
)

ALL_CODECS = list(CompressionType)

RECORDS = [
    SimpleRecord(b"v0", b"k0", 1_700_000_000_000, (("h1", b"a"), ("h-null", None), ("ключ", b"\x00\xff"))),
    SimpleRecord(None, b"k1", 1_700_000_000_005),  # tombstone
    SimpleRecord(b"", None, 1_699_999_999_990),  # empty value, null key, timestamp below base
    SimpleRecord(b"x" * 5000, b"", 1_700_000_000_001),
]


def view(buf: bytearray | bytes) -> RecordBatch:
    return RecordBatch(memoryview(buf))


def as_tuples(batch: RecordBatch) -> list[tuple[object, ...]]:
    return [(r.offset, r.timestamp, r.key, r.value, r.headers, r.sequence) for r in batch]


# --- header --------------------------------------------------------------------------------


def test_header_fields() -> None:
    buf = build_batch(
        RECORDS,
        base_offset=1000,
        compression=CompressionType.NONE,
        producer_id=4242,
        producer_epoch=7,
        base_sequence=100,
        is_transactional=True,
        partition_leader_epoch=3,
    )
    b = view(buf)
    assert b.base_offset == 1000
    assert b.batch_length == len(buf) - LOG_OVERHEAD
    assert b.size_in_bytes == len(buf)
    assert b.partition_leader_epoch == 3
    assert b.magic == 2
    assert b.crc == crc32c.crc32c(bytes(buf[21:]))
    assert b.attributes == 0x10
    assert b.compression_type == CompressionType.NONE
    assert b.timestamp_type is TimestampType.CREATE_TIME
    assert b.is_transactional and not b.is_control and not b.has_delete_horizon
    assert b.last_offset_delta == 3
    assert b.last_offset == 1003 and b.next_offset == 1004
    assert b.base_timestamp == 1_700_000_000_000
    assert b.max_timestamp == 1_700_000_000_005
    assert (b.producer_id, b.producer_epoch, b.base_sequence) == (4242, 7, 100)
    assert b.last_sequence == 103
    assert b.records_count == 4
    assert b.header() == struct.unpack(">qiibIhiqqqhii", bytes(buf[:RECORD_BATCH_OVERHEAD]))
    assert len(b.records_bytes()) == len(buf) - RECORD_BATCH_OVERHEAD


def test_attribute_bits() -> None:
    for codec in ALL_CODECS:
        b = view(
            build_batch(
                RECORDS[:1], compression=codec, timestamp_type=TimestampType.LOG_APPEND_TIME, now_ms=5
            )
        )
        assert b.compression_type == codec
        assert b.timestamp_type is TimestampType.LOG_APPEND_TIME
        assert b.attributes == codec | 0x08
    buf = build_batch(RECORDS[:1])
    struct.pack_into(">h", buf, 21, 0x40)  # delete horizon bit (KIP-534)
    assert view(buf).has_delete_horizon
    assert view(buf).delete_horizon_ms == view(buf).base_timestamp


def test_last_sequence_wraps_like_kafka() -> None:
    assert increment_sequence(0x7FFFFFFF, 1) == 0
    assert increment_sequence(0x7FFFFFFE, 3) == 1
    assert increment_sequence(5, 3) == 8
    b = view(build_batch([SimpleRecord(b"a")] * 3, producer_id=1, producer_epoch=0, base_sequence=0x7FFFFFFF))
    assert b.last_sequence == 1
    assert [r.sequence for r in b] == [0x7FFFFFFF, 0, 1]
    assert view(build_batch(RECORDS)).last_sequence == -1


# --- CRC -----------------------------------------------------------------------------------


def test_crc_detects_any_flipped_byte_inside_crc_range() -> None:
    buf = build_batch(RECORDS, compression=CompressionType.LZ4)
    view(buf).ensure_valid()
    for pos in range(21, len(buf), 7):
        bad = bytearray(buf)
        bad[pos] ^= 0x01
        b = view(bad)
        assert not b.is_valid()
        with pytest.raises(CorruptRecordError) as ei:
            b.ensure_valid()
        assert ei.value.error_code == ErrorCode.CORRUPT_MESSAGE


def test_crc_field_itself_corrupt() -> None:
    buf = build_batch(RECORDS)
    buf[18] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="crc"):
        view(buf).ensure_valid()


def test_fields_outside_crc_do_not_affect_it() -> None:
    buf = build_batch(RECORDS)
    buf[0:8] = b"\x01" * 8
    buf[12:16] = b"\x02" * 4
    assert view(buf).is_valid()


def test_structural_checks() -> None:
    buf = build_batch(RECORDS)
    with pytest.raises(CorruptRecordError):
        view(buf[:60]).ensure_valid()
    with pytest.raises(CorruptRecordError):
        view(buf[:-1]).ensure_valid()  # batchLength disagrees with the buffer
    bad_magic = bytearray(buf)
    bad_magic[16] = 1
    with pytest.raises(InvalidRecordError) as ei:
        view(bad_magic).ensure_valid()
    assert ei.value.error_code == ErrorCode.CORRUPT_MESSAGE
    with pytest.raises(InvalidRecordError):
        list(view(bad_magic))


def test_error_hierarchy() -> None:
    assert issubclass(CorruptRecordError, RecordsError)
    assert issubclass(RecordsError, KafkaError) and issubclass(RecordsError, ValueError)
    assert InvalidRecordError("x").error_code == ErrorCode.INVALID_RECORD
    assert ErrorCode.CORRUPT_MESSAGE.retriable and not ErrorCode.INVALID_RECORD.retriable
    assert ErrorCode.for_code(9999) is ErrorCode.UNKNOWN_SERVER_ERROR
    assert ErrorCode(133).name == "SHARE_SESSION_LIMIT_REACHED"
    assert ErrorCode.NOT_LEADER_OR_FOLLOWER.retriable and not ErrorCode.PRODUCER_FENCED.retriable


# --- in-place patching -----------------------------------------------------------------------


def test_in_place_patching_keeps_crc_valid() -> None:
    buf = build_batch(
        RECORDS, compression=CompressionType.ZSTD, producer_id=1, producer_epoch=0, base_sequence=0
    )
    crc_before = view(buf).crc
    # Patch through a view over a larger buffer, the way the log layer sees a produce request.
    request = bytearray(b"\xaa" * 17) + buf + bytearray(b"\xbb" * 9)
    b = RecordBatch(memoryview(request)[17 : 17 + len(buf)])
    b.set_base_offset(123_456_789_012)
    b.set_partition_leader_epoch(42)
    assert b.base_offset == 123_456_789_012 and b.partition_leader_epoch == 42
    assert b.crc == crc_before and b.is_valid()
    assert request[:17] == b"\xaa" * 17 and request[-9:] == b"\xbb" * 9
    assert [r.offset for r in b] == [123_456_789_012 + i for i in range(4)]


def test_set_max_timestamp_log_append_time_recomputes_crc() -> None:
    buf = build_batch(RECORDS, compression=CompressionType.GZIP)
    b = view(buf)
    old_crc = b.crc
    b.set_max_timestamp(TimestampType.LOG_APPEND_TIME, 1_800_000_000_000)
    assert b.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert b.compression_type == CompressionType.GZIP
    assert b.max_timestamp == 1_800_000_000_000
    assert b.crc != old_crc and b.is_valid()
    # Kafka: with LogAppendTime every record reports the batch's max timestamp.
    assert {r.timestamp for r in b} == {1_800_000_000_000}
    crc = b.crc
    b.set_max_timestamp(TimestampType.LOG_APPEND_TIME, 1_800_000_000_000)  # no-op
    assert b.crc == crc
    b.set_max_timestamp(TimestampType.CREATE_TIME, 1_700_000_000_005)
    assert b.is_valid() and [r.timestamp for r in b] == [r.timestamp for r in RECORDS]


def test_read_only_buffer_rejects_patching() -> None:
    b = view(bytes(build_batch(RECORDS)))
    with pytest.raises(TypeError):
        b.set_base_offset(5)


# --- records ---------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", ALL_CODECS, ids=lambda c: c.kafka_name)
def test_iteration_keys_null_values_headers(codec: CompressionType) -> None:
    b = view(
        build_batch(
            RECORDS, base_offset=50, compression=codec, producer_id=9, producer_epoch=2, base_sequence=10
        )
    )
    recs = list(b)
    assert [(r.key, r.value, r.headers) for r in recs] == [(r.key, r.value, r.headers) for r in RECORDS]
    assert [r.offset for r in recs] == [50, 51, 52, 53]
    assert [r.timestamp for r in recs] == [r.timestamp for r in RECORDS]
    assert [r.sequence for r in recs] == [10, 11, 12, 13]


def test_timestamp_minus_one_means_now() -> None:
    b = view(build_batch([SimpleRecord(b"a"), SimpleRecord(b"b", timestamp=10)], now_ms=777))
    assert [r.timestamp for r in b] == [777, 10]
    assert b.base_timestamp == 777 and b.max_timestamp == 777


def test_build_rejects_empty() -> None:
    with pytest.raises(ValueError):
        build_batch([])


def _batch_with_records_section(section: bytes, count: int) -> bytearray:
    buf = build_batch([SimpleRecord(b"v")])
    out = bytearray(buf[:RECORD_BATCH_OVERHEAD]) + section
    struct.pack_into(">i", out, 8, len(out) - LOG_OVERHEAD)
    struct.pack_into(">i", out, 57, count)
    struct.pack_into(">I", out, 17, crc32c.crc32c(bytes(out[21:])))
    return out


def test_invalid_records_are_rejected() -> None:
    good = encode_record(0, 0, b"k", b"v", [("h", b"x")])
    view(_batch_with_records_section(good, 1)).ensure_valid()
    assert len(list(view(_batch_with_records_section(good, 1)))) == 1
    cases = {
        "size too small": b"\x0a" + good[1:],  # declares 5 bytes
        "size past end": b"\x7e" + good[1:],
        "negative header count": good[:-6] + b"\x03",  # zig-zag(-2) headers
        "trailing bytes": good + b"\x00",
        "truncated varint": good[:3] + b"\xff",
    }
    for section in cases.values():
        b = view(_batch_with_records_section(section, 1))
        b.ensure_valid()  # CRC is fine: the structure is what is wrong
        with pytest.raises(InvalidRecordError):
            list(b)
    with pytest.raises(InvalidRecordError):
        list(view(_batch_with_records_section(good, -1)))
    with pytest.raises(InvalidRecordError):
        list(view(_batch_with_records_section(good, 2)))


def test_empty_batch_kept_by_the_cleaner() -> None:
    """Header-only batch with recordsCount 0 (what the log cleaner keeps for producer state)."""
    buf = _batch_with_records_section(b"", 0)
    struct.pack_into(">i", buf, 23, 9)  # lastOffsetDelta still spans the removed records
    struct.pack_into(">I", buf, 17, crc32c.crc32c(bytes(buf[21:])))
    b = view(buf)
    b.ensure_valid()
    assert list(b) == [] and b.next_offset == b.base_offset + 10
    with pytest.raises(InvalidRecordError):
        b.ensure_valid_client_batch()


def test_ensure_valid_client_batch() -> None:
    b = view(build_batch(RECORDS, producer_id=1, producer_epoch=0, base_sequence=0))
    b.ensure_valid_client_batch()
    buf = build_batch(RECORDS)
    struct.pack_into(">i", buf, 57, 3)  # count disagrees with lastOffsetDelta
    with pytest.raises(InvalidRecordError, match="inconsistent"):
        view(buf).ensure_valid_client_batch()
    buf = build_batch(RECORDS, producer_id=1, producer_epoch=0, base_sequence=-1)
    with pytest.raises(InvalidRecordError, match="sequence"):
        view(buf).ensure_valid_client_batch()


def test_corrupt_compressed_payload_is_corrupt_record() -> None:
    buf = build_batch(RECORDS, compression=CompressionType.ZSTD)
    buf[RECORD_BATCH_OVERHEAD + 8 :] = b"\x00" * (len(buf) - RECORD_BATCH_OVERHEAD - 8)
    with pytest.raises(CorruptRecordError):
        list(view(buf))


def test_decompression_bomb_is_capped() -> None:
    b = view(build_batch([SimpleRecord(b"\x00" * 2_000_000)], compression=CompressionType.GZIP))
    assert len(b.records_bytes()) < 10_000
    with pytest.raises(DecompressionBombError):
        list(b.iter_records(max_size=1_000_000))
    assert len(list(b.iter_records(max_size=3_000_000))) == 1


# --- control batches -------------------------------------------------------------------------


@pytest.mark.parametrize("ctype", [ControlRecordType.COMMIT, ControlRecordType.ABORT])
def test_control_batch(ctype: ControlRecordType) -> None:
    b = view(
        build_control_batch(
            ctype, producer_id=77, producer_epoch=5, timestamp=1234, base_offset=900, coordinator_epoch=11
        )
    )
    b.ensure_valid()
    assert b.is_control and b.is_transactional
    assert (b.producer_id, b.producer_epoch, b.base_sequence) == (77, 5, -1)
    assert (b.base_offset, b.records_count, b.max_timestamp) == (900, 1, 1234)
    (rec,) = list(b)
    assert rec.key == struct.pack(">hh", 0, ctype) and rec.value == struct.pack(">hi", 0, 11)
    assert parse_control_record_type(rec.key) is ctype
    assert parse_end_txn_marker(rec.value) == 11
    assert parse_control_record_type(struct.pack(">hh", 0, 99)) == 99
    with pytest.raises(InvalidRecordError):
        parse_control_record_type(b"\x00")
    with pytest.raises(ValueError):
        build_control_batch(ControlRecordType.LEADER_CHANGE, producer_id=1, producer_epoch=0, timestamp=0)


# --- iter_batches ----------------------------------------------------------------------------


def test_iter_batches_over_concatenation_and_truncated_tails() -> None:
    parts = [
        build_batch(RECORDS, base_offset=0, compression=CompressionType.SNAPPY),
        build_control_batch(
            ControlRecordType.COMMIT, producer_id=1, producer_epoch=0, timestamp=5, base_offset=4
        ),
        build_batch(RECORDS[:2], base_offset=5),
    ]
    whole = bytearray(b"".join(parts))
    batches = list(iter_batches(memoryview(whole)))
    assert [b.base_offset for b in batches] == [0, 4, 5]
    assert [b.size_in_bytes for b in batches] == [len(p) for p in parts]
    assert all(b.is_valid() for b in batches)
    assert batch_size_at(whole, len(parts[0])) == len(parts[1])
    # Views alias the buffer: patching through iter_batches patches the concatenation.
    batches[2].set_base_offset(99)
    assert list(iter_batches(whole))[2].base_offset == 99
    assert list(iter_batches(b"")) == []
    boundary = len(parts[0]) + len(parts[1])
    for cut in (1, 11, 12, 60, len(parts[2]) - 1):
        with pytest.raises(CorruptRecordError):
            list(iter_batches(whole[: boundary + cut]))
    with pytest.raises(CorruptRecordError):
        batch_size_at(whole, len(whole) - 5)
    tiny = bytearray(whole[:LOG_OVERHEAD])
    struct.pack_into(">i", tiny, 8, 10)  # below the 49-byte minimum batchLength
    with pytest.raises(CorruptRecordError):
        batch_size_at(tiny, 0)


# --- recompression ---------------------------------------------------------------------------


@pytest.mark.parametrize("source", ALL_CODECS, ids=lambda c: c.kafka_name)
def test_recompress_batch_keeps_everything_but_codec(source: CompressionType) -> None:
    orig = view(
        build_batch(
            RECORDS,
            base_offset=70,
            compression=source,
            producer_id=3,
            producer_epoch=1,
            base_sequence=5,
            is_transactional=True,
            partition_leader_epoch=8,
        )
    )
    want = as_tuples(orig)
    for target in ALL_CODECS:
        out = view(recompress_batch(orig, target))
        out.ensure_valid()
        assert out.compression_type == target
        assert as_tuples(out) == want
        h_orig, h_out = orig.header(), out.header()
        for i in (0, 2, 3, 6, 7, 8, 9, 10, 11, 12):  # all but length, crc, attributes
            assert h_orig[i] == h_out[i]
        assert out.attributes & ~0x07 == orig.attributes & ~0x07


# --- property-based round trip ---------------------------------------------------------------

_bytes_or_none = st.none() | st.binary(max_size=64)
_record = st.builds(
    SimpleRecord,
    value=_bytes_or_none,
    key=_bytes_or_none,
    timestamp=st.integers(min_value=0, max_value=2**53),
    headers=st.lists(st.tuples(st.text(max_size=8), _bytes_or_none), max_size=3).map(tuple),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    records=st.lists(_record, min_size=1, max_size=12),
    codec=st.sampled_from(ALL_CODECS),
    base_offset=st.integers(min_value=0, max_value=2**62),
    pid=st.integers(min_value=-1, max_value=2**62),
    seq=st.integers(min_value=-1, max_value=2**31 - 1),
)
def test_builder_parser_round_trip(
    records: list[SimpleRecord], codec: CompressionType, base_offset: int, pid: int, seq: int
) -> None:
    b = view(
        build_batch(records, base_offset=base_offset, compression=codec, producer_id=pid, base_sequence=seq)
    )
    b.ensure_valid()
    assert b.records_count == len(records)
    assert b.max_timestamp == max(r.timestamp for r in records)
    got = list(b)
    assert [SimpleRecord(r.value, r.key, r.timestamp, r.headers) for r in got] == records
    assert [r.offset for r in got] == [base_offset + i for i in range(len(records))]
    assert [r.sequence for r in got] == [
        -1 if seq < 0 else increment_sequence(seq, i) for i in range(len(records))
    ]


# --- real clients' record builders and readers -----------------------------------------------

kafka_records = pytest.importorskip(
    "kafka.record.default_records", reason="kafka-python is a test dependency"
)
aiokafka_records = pytest.importorskip(
    "aiokafka.record.default_records", reason="aiokafka is a test dependency"
)
CLIENT_IMPLS = {
    "kafka-python": (kafka_records.DefaultRecordBatchBuilder, kafka_records.DefaultRecordBatch),
    "aiokafka": (aiokafka_records.DefaultRecordBatchBuilder, aiokafka_records.DefaultRecordBatch),
}


@pytest.mark.parametrize("client", sorted(CLIENT_IMPLS))
@pytest.mark.parametrize("codec", ALL_CODECS, ids=lambda c: c.kafka_name)
def test_client_built_batch_parses(client: str, codec: CompressionType) -> None:
    builder_cls, _ = CLIENT_IMPLS[client]
    builder = builder_cls(
        magic=2,
        compression_type=int(codec),
        is_transactional=1,
        producer_id=555,
        producer_epoch=3,
        base_sequence=40,
        batch_size=1 << 20,
    )
    for i, r in enumerate(RECORDS):
        builder.append(i, timestamp=r.timestamp, key=r.key, value=r.value, headers=list(r.headers))
    buf = bytearray(builder.build())
    b = view(buf)
    b.ensure_valid()
    assert (b.compression_type, b.records_count, b.last_offset_delta) == (codec, 4, 3)
    assert (b.producer_id, b.producer_epoch, b.base_sequence, b.is_transactional) == (555, 3, 40, True)
    assert b.max_timestamp == max(r.timestamp for r in RECORDS)
    got = list(b)
    assert [(r.key, r.value, r.headers, r.timestamp) for r in got] == [
        (r.key, r.value, r.headers, r.timestamp) for r in RECORDS
    ]
    assert [r.sequence for r in got] == [40, 41, 42, 43]
    # The broker-side patches keep it valid for the client's own reader too.
    b.set_base_offset(1_000_000)
    b.set_partition_leader_epoch(6)
    b.set_max_timestamp(TimestampType.LOG_APPEND_TIME, 1_900_000_000_000)
    assert b.is_valid()
    theirs = kafka_records.DefaultRecordBatch(bytes(buf))
    assert theirs.validate_crc()
    assert [(r.offset, r.timestamp, r.timestamp_type) for r in theirs] == [
        (1_000_000 + i, 1_900_000_000_000, 1) for i in range(4)
    ]


@pytest.mark.parametrize("client", sorted(CLIENT_IMPLS))
@pytest.mark.parametrize("codec", ALL_CODECS, ids=lambda c: c.kafka_name)
def test_our_batch_parses_in_client_reader(client: str, codec: CompressionType) -> None:
    _, reader_cls = CLIENT_IMPLS[client]
    buf = build_batch(
        RECORDS, base_offset=300, compression=codec, producer_id=8, producer_epoch=1, base_sequence=0
    )
    theirs = reader_cls(bytes(buf))
    assert theirs.validate_crc()
    assert (theirs.base_offset, theirs.compression_type, theirs.producer_id) == (300, codec, 8)
    got = [(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in theirs]
    assert got == [(300 + i, r.timestamp, r.key, r.value, r.headers) for i, r in enumerate(RECORDS)]


def test_control_batch_in_client_reader() -> None:
    buf = build_control_batch(
        ControlRecordType.ABORT, producer_id=5, producer_epoch=2, timestamp=9, base_offset=3
    )
    theirs = kafka_records.DefaultRecordBatch(bytes(buf))
    assert theirs.validate_crc() and theirs.is_control_batch and theirs.is_transactional
    (rec,) = list(theirs)
    assert rec.abort and rec.offset == 3


# --- golden captures of real producers (helper D's tests/golden/captures) ----------------------

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "captures"
PRODUCE_CAPTURES = sorted(GOLDEN.glob("*/*-Produce-v*.req"))
CODEC_BY_NAME = {c.kafka_name: c for c in CompressionType}


def scan_batches(frame: bytes) -> list[RecordBatch]:
    """Find v2 batches in a captured Produce request by magic byte + valid CRC (no request codec needed)."""
    mv = memoryview(frame)
    found, pos = [], 0
    while pos + RECORD_BATCH_OVERHEAD <= len(mv):
        if mv[pos + 16] == 2:
            try:
                size = batch_size_at(mv, pos)
            except RecordsError:
                size = 0
            if size and pos + size <= len(mv) and RecordBatch(mv[pos : pos + size]).is_valid():
                found.append(RecordBatch(mv[pos : pos + size]))
                pos += size
                continue
        pos += 1
    return found


@pytest.mark.parametrize("path", PRODUCE_CAPTURES, ids=lambda p: p.parent.name)
def test_golden_produce_batches_decode(path: Path) -> None:
    batches = scan_batches(path.read_bytes())
    assert batches, f"no valid v2 batch found in {path}"
    scenario_codec = CODEC_BY_NAME.get(path.parent.name.rsplit("-", 1)[-1])
    for b in batches:
        b.ensure_valid()
        records = list(b)
        assert len(records) == b.records_count > 0
        assert [r.offset - b.base_offset for r in records] == list(range(b.records_count))
        if scenario_codec is not None:
            assert b.compression_type == scenario_codec
            assert all(
                r.value is None or r.value.startswith(b"%s-value-" % scenario_codec.kafka_name.encode())
                for r in records
            )
        if b.has_producer_id and b.base_sequence >= 0:
            assert [r.sequence for r in records] == [b.base_sequence + i for i in range(len(records))]
        want = as_tuples(b)
        for target in ALL_CODECS:
            assert as_tuples(view(recompress_batch(b, target))) == want


JAVA_SNAPPY_CAPTURES = sorted(GOLDEN.glob("java-producer-snappy/*-Produce-v*.req"))


def test_golden_captures_are_present() -> None:
    # The captures are committed test data (tests/golden/README.md); their absence is a broken
    # checkout, not a reason to skip the tests below.
    assert PRODUCE_CAPTURES and JAVA_SNAPPY_CAPTURES


def test_golden_java_snappy_uses_xerial_framing() -> None:
    """snappy-java's SnappyOutputStream writes the xerial framing, which we must read (and write)."""
    batches = [b for p in JAVA_SNAPPY_CAPTURES for b in scan_batches(p.read_bytes())]
    assert batches
    for b in batches:
        assert b.compression_type == CompressionType.SNAPPY
        assert bytes(b.records_bytes()[:8]) == XERIAL_MAGIC


@pytest.mark.parametrize("codec", ALL_CODECS, ids=lambda c: c.kafka_name)
def test_summarize_records(codec: CompressionType) -> None:
    b = view(build_batch(RECORDS, compression=codec))
    s = b.summarize_records()
    assert s.record_count == 4
    assert (s.min_timestamp, s.max_timestamp) == (1_699_999_999_990, 1_700_000_000_005)
    assert s.null_key_index == 2 and s.bad_offset_index == -1
    b.set_max_timestamp(TimestampType.LOG_APPEND_TIME, 5)
    assert b.summarize_records()[1:3] == (5, 5)


def test_summarize_records_flags_offsets_and_malformed() -> None:
    section = encode_record(0, 0, b"k", b"v") + encode_record(5, 1, b"k", None)
    s = view(_batch_with_records_section(section, 2)).summarize_records()
    assert (s.record_count, s.null_key_index, s.bad_offset_index) == (2, -1, 1)
    with pytest.raises(InvalidRecordError):
        view(_batch_with_records_section(section + b"\x00", 2)).summarize_records()
    with pytest.raises(InvalidRecordError):
        view(_batch_with_records_section(section, 3)).summarize_records()
    empty = view(_batch_with_records_section(b"", 0)).summarize_records()
    assert empty.record_count == 0 and empty.min_timestamp == -1


@pytest.mark.parametrize("path", PRODUCE_CAPTURES, ids=lambda p: p.parent.name)
def test_golden_produce_records_field_is_whole_batches(path: Path) -> None:
    """Decode the Produce request with helper A's codec: each records field is exactly whole v2 batches."""
    from kbroker.protocol import decode_request_frame

    _, body = decode_request_frame(memoryview(path.read_bytes()))
    fields = [pd.records for td in body.topic_data for pd in td.partition_data if pd.records is not None]
    assert fields
    total = 0
    for records in fields:
        batches = list(iter_batches(records))  # raises on a partial batch
        assert sum(b.size_in_bytes for b in batches) == len(records)
        for b in batches:
            b.ensure_valid()
            b.ensure_valid_client_batch()  # what a producer sends passes LogValidator's checks
            assert b.summarize_records().record_count == b.records_count
        total += len(batches)
    assert total == len(scan_batches(path.read_bytes()))


# --- Apache Kafka's own Java record reader on our batches --------------------------------------

JAVA_READER = Path(__file__).resolve().parent / "java" / "ReadRecordBatches.java"


def _java_expected_lines(b: RecordBatch) -> list[str]:
    ts_type = "LogAppendTime" if b.timestamp_type == TimestampType.LOG_APPEND_TIME else "CreateTime"
    codec = CompressionType(b.compression_type).kafka_name
    head = [b.base_offset, b.last_offset, codec, ts_type, b.max_timestamp, b.producer_id, b.producer_epoch]
    head += [
        b.base_sequence,
        str(b.is_transactional).lower(),
        str(b.is_control).lower(),
        b.partition_leader_epoch,
    ]
    lines = ["\t".join(["batch", *map(str, head)])]
    for r in b:
        cols = ["record", str(r.offset), str(r.timestamp)]
        cols += ["null" if r.key is None else r.key.hex(), "null" if r.value is None else r.value.hex()]
        cols += [f"{k}={'null' if v is None else v.hex()}" for k, v in r.headers]
        lines.append("\t".join(cols))
    return lines


@pytest.mark.java
def test_java_kafka_clients_read_our_batches(tmp_path: Path) -> None:
    """kafka-clients 4.3's MemoryRecords/DefaultRecordBatch validate and decode everything we write."""
    support = pytest.importorskip(
        "tests.support.java", reason="tests/support/java.py (helper D) not importable"
    )
    reason = support.java_unavailable_reason()
    if reason:
        pytest.skip(reason)
    bufs: list[bytearray] = []
    offset = 0
    for codec in ALL_CODECS:
        bufs.append(build_batch(RECORDS, base_offset=offset, compression=codec, partition_leader_epoch=2))
        offset += len(RECORDS)
    idem = build_batch(
        RECORDS[:2], base_offset=offset, compression=CompressionType.SNAPPY, producer_id=12, producer_epoch=3,
        base_sequence=0x7FFFFFFF, is_transactional=True,
    )  # fmt: skip
    bufs.append(idem)
    offset += 2
    bufs.append(
        build_control_batch(
            ControlRecordType.COMMIT, producer_id=12, producer_epoch=3, timestamp=7, base_offset=offset
        )
    )
    offset += 1
    patched = build_batch(RECORDS, compression=CompressionType.LZ4)  # broker-side patching of a client batch
    view(patched).set_base_offset(offset)
    view(patched).set_partition_leader_epoch(9)
    view(patched).set_max_timestamp(TimestampType.LOG_APPEND_TIME, 1_750_000_000_000)
    bufs.append(patched)
    offset += len(RECORDS)
    recompressed = recompress_batch(
        view(build_batch(RECORDS, compression=CompressionType.GZIP)), CompressionType.ZSTD
    )
    view(recompressed).set_base_offset(offset)
    bufs.append(recompressed)
    data = b"".join(bufs)
    (tmp_path / "batches.bin").write_bytes(data)
    proc = support.run_java_main(str(JAVA_READER), [str(tmp_path / "batches.bin")], timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    expected = [line for b in iter_batches(data) for line in _java_expected_lines(b)]
    assert proc.stdout.splitlines() == expected


FETCH_CAPTURES = sorted(GOLDEN.glob("*/*-Fetch-v*.resp"))


def test_golden_reference_broker_only_patches_offset_and_epoch() -> None:
    """What Kafka 4.3 served in Fetch = the produced batch with baseOffset + partitionLeaderEpoch set.

    Reproducing the reference broker's bytes with our in-place setters proves the CRC-free patch
    path is all a leader append does to a CreateTime batch whose codec the topic accepts.
    """
    produced = {bytes(b.buf[16:]): b for p in PRODUCE_CAPTURES for b in scan_batches(p.read_bytes())}
    matched = 0
    for path in FETCH_CAPTURES:
        for served in scan_batches(path.read_bytes()):
            served.ensure_valid()
            assert len(list(served)) == served.records_count
            original = produced.get(bytes(served.buf[16:]))
            if original is None:
                continue
            copy = bytearray(original.buf)
            view(copy).set_base_offset(served.base_offset)
            view(copy).set_partition_leader_epoch(served.partition_leader_epoch)
            assert bytes(copy) == bytes(served.buf)
            matched += 1
    assert matched >= len(ALL_CODECS), f"only {matched} served batches matched a produced one"
