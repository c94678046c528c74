"""Fuzz targets: the broker's decoders of untrusted bytes, each with the only outcomes it may have.

Owns the in-process properties the coverage-guided fuzzer (``tests/fuzz/run.py``, atheris/libFuzzer)
and the replay tests (``tests/fuzz/test_fuzz.py``) check; imports no fuzzer, so the committed corpus
and the saved crashes replay without atheris. Each target takes the fuzzer's bytes and returns
normally or raises :class:`Finding` (or any unexpected exception, which is a finding too):

- ``request``: ``protocol.decode_request_frame`` over every API key and version. Input byte 0 is the
  API key (bit 7 set: the rest is the whole frame, header included, so the header parser is fuzzed
  too), byte 1 picks the version (one past the newest too, the unsupported path), the rest is the
  body behind a well-formed request header of the right header version. Allowed: a result,
  ``ProtocolError``, ``UnsupportedVersionError``; a result must re-encode (``encode_request_frame``)
  to a frame that decodes and re-encodes to the same bytes.
- ``records``: the produce path's record validator, ``log.validator`` (``needs_worker``, then
  ``check_batches`` and ``assign_offsets``, the two phases ``validate_and_assign_offsets`` runs).
  What ``needs_worker`` leaves to the event loop must be a small uncompressed walk (issue 19's
  stalled loop: no decompression, recompression or big batch inline).
  Byte 0 picks the topic's settings (bits 0-2 the forced codec, 3 LogAppendTime, 4 compaction,
  5 a replica's append instead of a client's, 6 tight timestamp bounds, 7 small max.message.bytes
  and segment.bytes, with the CRC left as it is); the rest are record batches whose CRC-32C is
  fixed before the call (unless bit 7), so that mutations reach the insides. Allowed: an accepted
  append, or one of the storage layer's record errors carrying its Kafka code (CORRUPT_MESSAGE,
  INVALID_RECORD, INVALID_TIMESTAMP, MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE). Every accepted append
  must read back: each batch CRC-valid, iterable by ``RecordBatch.iter_records`` (a different
  decoder from the validator's walk) with exactly its record count, offsets consecutive from the log
  end, the header's max timestamp the records' real maximum (or the append time), timestamps inside
  the topic's bounds, the topic's codec applied, no null key on a compacted topic, and (for a
  client's append) parsable by kafka-python's reader, an independent client's decoder.
  Exceptions, each as Kafka 4.3.1 behaves: a producer's LogAppendTime batch on a CreateTime topic
  is checked by its maxTimestamp only (``LogValidator.validateTimestamp`` reads every record's
  timestamp as that) and rewritten as CreateTime, so its records' own timestamps are not checked;
  kafka-python's reader is skipped for a replica's append (control batches, whose keys it reads more
  strictly than Kafka's consumer, which skips them), for a record attributes byte of 0x80 or more
  (kafka-python reads that int8 as a varint; Kafka ignores it) and for a header key that is not UTF-8
  (kafka-python raises; Kafka's ``Utils.utf8`` substitutes U+FFFD).
- ``metadata_record``: ``metadata_records.serde.decode_metadata_record``; allowed:
  ``MetadataParseError``.
- ``coordinator_record``: ``coordinator_records.serde.decode_coordinator_record`` for the group,
  share and transaction coordinators; byte 0 picks the coordinator (and a tombstone), byte 1 the key
  length. Allowed: ``CoordinatorRecordParseError``.

Every target also fails an input that takes more than :data:`MAX_SECONDS` or lifts the process's
peak RSS by more than :data:`MAX_RSS_GROWTH_MB` (an absurd allocation from a length prefix; the peak,
so the bound holds in a long-lived test process too, and libFuzzer's ``-rss_limit_mb`` backs it).
"""

from __future__ import annotations

import re
import resource
import struct
import time
from collections.abc import Callable

from crc32c import crc32c

from kbroker.log.config import LogConfig
from kbroker.log.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
)
from kbroker.log.validator import (
    INLINE_MAX_RECORDS,
    ValidationParams,
    assign_offsets,
    check_batches,
    inline_max_bytes,
    needs_worker,
    split_batches,
    target_compression,
)
from kbroker.protocol import ProtocolError, decode_request_frame
from kbroker.protocol.compression import DecompressionBombError
from kbroker.protocol.coordinator_records import Coordinator
from kbroker.protocol.coordinator_records.serde import CoordinatorRecordParseError, decode_coordinator_record
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.frames import encode_request_frame
from kbroker.protocol.headers import RequestHeader, encode_request_header
from kbroker.protocol.messages import API_SPECS
from kbroker.protocol.metadata_records.serde import MetadataParseError, decode_metadata_record
from kbroker.protocol.record_format import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_CODEC_MASK,
    CONTROL_FLAG_MASK,
    CRC_OFFSET,
    INT16,
    INT32,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    NO_TIMESTAMP,
    RECORD_BATCH_OVERHEAD,
    RECORDS_COUNT_OFFSET,
    TIMESTAMP_TYPE_MASK,
    UINT32,
)
from kbroker.protocol.records import RecordBatch, iter_batches
from kbroker.protocol.varint import read_varint

#: Bound on one input, uninstrumented (the replay tests). Under the fuzzer every line and branch of
#: kbroker calls back into atheris, which makes the per-record walks of a 1 MiB batch 10-20 times
#: slower: ``run.py`` allows :data:`INSTRUMENTED_MAX_SECONDS`, still far below what a stall would take.
MAX_SECONDS = 2.0
INSTRUMENTED_MAX_SECONDS = 8.0
MAX_RSS_GROWTH_MB = 512
NOW_MS = 1_795_651_200_000  # a fixed "now" (2026-11-26, just after the captures were made): findings replay
LOG_END_OFFSET = 1000
LEADER_EPOCH = 3
#: The fuzzer's bound on one batch's decompressed size (the broker's is 100 MiB): small enough that a
#: bomb costs milliseconds even instrumented, the same code path as the real bound.
MAX_DECOMPRESSED = 64 * 1024
#: max.message.bytes and segment.bytes under the "small limits" flag, so that fuzzed inputs reach the
#: MESSAGE_TOO_LARGE and RECORD_LIST_TOO_LARGE checks.
SMALL_MAX_MESSAGE_BYTES = 1000
SMALL_SEGMENT_BYTES = 1500

_RECORD_ERRORS = (CorruptRecordError, InvalidRecordError, InvalidTimestampError, RecordTooLargeError,
                  RecordBatchTooLargeError, DecompressionBombError)
_RECORD_ERROR_CODES = {ErrorCode.CORRUPT_MESSAGE, ErrorCode.INVALID_RECORD, ErrorCode.INVALID_TIMESTAMP,
                       ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE}
_CODEC_NAMES = ("uncompressed", "gzip", "snappy", "lz4", "zstd", "producer", "producer", "producer")
_COORDINATORS = tuple(Coordinator)
_SURROGATE = re.compile("[\udc80-\udcff]")  # bytes that were not UTF-8 (decoded with surrogateescape)


class Finding(AssertionError):
    """An input that breaks a target's contract (the exception atheris reports as a crash)."""


# --- request frames ------------------------------------------------------------------------------

def request_frame(data: bytes) -> bytes:
    """The request frame (no size prefix) an input stands for (see the module docstring)."""
    if len(data) < 2 or data[0] & 0x80:
        return data[2:]
    spec = API_SPECS.get(data[0])
    if spec is None:
        return struct.pack(">hhi", data[0], data[1], 7) + data[2:]
    version = data[1] % (spec.max_version + 2)
    out = bytearray()
    encode_request_header(RequestHeader(api_key=data[0], api_version=version, correlation_id=7, client_id="fuzz"),
                          out)
    return bytes(out) + data[2:]


def request_input(api_key: int, api_version: int, body: bytes) -> bytes:
    """The input that :func:`request_frame` turns into a frame of ``api_key``/``api_version``."""
    return bytes((api_key, api_version)) + body


def fuzz_request(data: bytes) -> None:
    try:
        header, body = decode_request_frame(request_frame(data))
    except ProtocolError:  # UnsupportedVersionError included
        return
    # What was decoded encodes again (the broker re-encodes requests it forwards) to a frame that
    # decodes and encodes to the same bytes. Bytes, not objects: a float64 field may hold NaN.
    try:
        frame = encode_request_frame(header, body)
        again = encode_request_frame(*decode_request_frame(frame[4:]))
    except Exception as e:
        raise Finding(f"a decoded {header!r} does not survive re-encoding: {e!r}") from e
    if again != frame:
        raise Finding(f"a decoded {header!r} re-encodes to a different request")


# --- record batches ------------------------------------------------------------------------------

def log_config(flags: int) -> LogConfig:
    """The topic settings byte 0 of a ``records`` input selects."""
    tight = _HOUR_MS if flags & 0x40 else None
    small = {"max_message_bytes": SMALL_MAX_MESSAGE_BYTES, "segment_bytes": SMALL_SEGMENT_BYTES} if flags & 0x80 else {}
    return LogConfig(
        compression_type=_CODEC_NAMES[flags & 0x07],
        message_timestamp_type="LogAppendTime" if flags & 0x08 else "CreateTime",
        cleanup_policy="compact" if flags & 0x10 else "delete",
        **({"message_timestamp_before_max_ms": tight, "message_timestamp_after_max_ms": tight} if tight else {}),
        **small,
    )


_HOUR_MS = 3_600_000


def validation_params(config: LogConfig, from_client: bool) -> ValidationParams:
    target = target_compression(config)
    return ValidationParams(
        -1 if target is None else int(target), config.log_append_time, config.compact, config.max_message_bytes,
        NOW_MS - config.message_timestamp_before_max_ms, NOW_MS + config.message_timestamp_after_max_ms, NOW_MS,
        from_client, "fuzz-0", MAX_DECOMPRESSED)


def fix_crcs(records: bytearray) -> None:
    """Recompute the CRC-32C of every complete batch (in place), so mutations get past the CRC check."""
    pos, n = 0, len(records)
    while pos + LOG_OVERHEAD <= n:
        (length,) = INT32.unpack_from(records, pos + LENGTH_OFFSET)
        size = length + LOG_OVERHEAD
        if size < RECORD_BATCH_OVERHEAD or pos + size > n:
            return
        UINT32.pack_into(records, pos + CRC_OFFSET, crc32c(memoryview(records)[pos + ATTRIBUTES_OFFSET:pos + size]))
        pos += size


def fuzz_records(data: bytes) -> None:
    if not data:
        return
    flags = data[0]
    config = log_config(flags)
    from_client = not flags & 0x20
    records = bytearray(data[1:])
    if not flags & 0x80:
        fix_crcs(records)
    inline = not needs_worker(memoryview(records), config)  # reads headers only; must take anything
    if inline:
        _check_inline_is_cheap(records, config)
    params = validation_params(config, from_client)
    try:
        checked = check_batches(memoryview(records), params)
        # A producer's LogAppendTime batch on a CreateTime topic is accepted as Kafka accepts it: its
        # records read as the batch's maxTimestamp when checked (LogValidator.validateTimestamp), and
        # the batch is rewritten as CreateTime with that maxTimestamp: its records' deltas go unchecked.
        producer_lat = [bool(records[c.pos + ATTRIBUTES_OFFSET + 1] & TIMESTAMP_TYPE_MASK) for c in checked]
        result = assign_offsets(memoryview(records), checked, LOG_END_OFFSET, LEADER_EPOCH, config.segment_bytes)
    except _RECORD_ERRORS as e:
        if e.error_code not in _RECORD_ERROR_CODES:
            raise Finding(f"{type(e).__name__} with error code {e.error_code}: {e}") from e
        return
    _read_back(bytes(result.data), producer_lat, config, params)


def _check_inline_is_cheap(records: bytearray, config: LogConfig) -> None:
    """What ``needs_worker`` leaves to the event loop must be a small uncompressed walk: no batch to
    decompress or recompress, no more than INLINE_MAX_RECORDS records, ``inline_max_bytes()`` in all (or a
    framing error that ``check_batches`` reports before checking any batch)."""
    try:
        spans = split_batches(records)
    except CorruptRecordError:
        return
    target = target_compression(config)
    for pos, _size in spans:
        (attrs,) = INT16.unpack_from(records, pos + ATTRIBUTES_OFFSET)
        (count,) = INT32.unpack_from(records, pos + RECORDS_COUNT_OFFSET)
        codec = attrs & COMPRESSION_CODEC_MASK
        if codec or (target is not None and target != codec) or count > INLINE_MAX_RECORDS:
            raise Finding(f"needs_worker leaves a batch at {pos} to the event loop: codec {codec}, "
                          f"topic codec {target}, {count} records")
    if len(records) > inline_max_bytes():
        raise Finding(f"needs_worker leaves {len(records)} bytes to the event loop")


def _read_back(data: bytes, producer_lat: list[bool], config: LogConfig, p: ValidationParams) -> None:
    """An accepted append must be readable by the log's own reader and by a real client's."""
    n_batches = len(producer_lat)
    try:
        batches = list(iter_batches(data))
    except Exception as e:
        raise Finding(f"accepted append does not split into batches: {e!r}") from e
    if len(batches) != n_batches:
        raise Finding(f"{n_batches} batches accepted, {len(batches)} written")
    offset = LOG_END_OFFSET
    target = target_compression(config)
    bad_utf8 = False
    for b, lat in zip(batches, producer_lat, strict=True):
        if not b.is_valid():
            raise Finding(f"accepted batch at offset {offset} fails its CRC")
        if b.base_offset != offset or b.partition_leader_epoch != LEADER_EPOCH:
            raise Finding(f"batch offset {b.base_offset} / epoch {b.partition_leader_epoch}, expected {offset}")
        try:
            recs = list(b.iter_records(MAX_DECOMPRESSED))
        except Exception as e:
            raise Finding(f"accepted batch {b!r} cannot be read back: {e!r}") from e
        if len(recs) != b.records_count:
            raise Finding(f"accepted batch {b!r} holds {len(recs)} records")
        if [r.offset for r in recs] != list(range(offset, offset + len(recs))):
            raise Finding(f"accepted batch {b!r}: record offsets are not consecutive")
        if recs:
            if config.log_append_time:
                if b.max_timestamp != NOW_MS or not b.attributes & TIMESTAMP_TYPE_MASK:
                    raise Finding(f"accepted batch {b!r}: LogAppendTime not stamped")
            elif lat:
                if not p.lo_ts <= b.max_timestamp <= p.hi_ts and b.max_timestamp != NO_TIMESTAMP:
                    raise Finding(f"accepted batch {b!r}: max timestamp {b.max_timestamp} out of range")
            elif b.max_timestamp != max(r.timestamp for r in recs):
                raise Finding(f"accepted batch {b!r}: max timestamp {b.max_timestamp}, records' max "
                              f"{max(r.timestamp for r in recs)}")
            if not config.log_append_time and not lat:
                for r in recs:
                    if r.timestamp != NO_TIMESTAMP and not p.lo_ts <= r.timestamp <= p.hi_ts:
                        raise Finding(f"accepted batch {b!r}: timestamp {r.timestamp} out of range")
            bad_utf8 = bad_utf8 or any(_SURROGATE.search(k) for r in recs for k, _ in r.headers)
            if config.compact and any(r.key is None for r in recs):
                raise Finding(f"accepted batch {b!r}: null key on a compacted topic")
        codec = b.attributes & COMPRESSION_CODEC_MASK
        if target is not None and codec != target and not (b.attributes & CONTROL_FLAG_MASK and codec == 0):
            raise Finding(f"accepted batch {b!r}: codec {codec}, the topic forces {int(target)}")
        offset += b.last_offset_delta + 1
    # kafka-python's reader only for a client's append (a replica's may hold control batches, whose keys
    # it reads more strictly than Kafka's consumer, which skips them), and only where it reads records
    # as Kafka does: every record's attributes byte below 0x80 (kafka-python reads that int8 as a
    # varint, Kafka ignores its value) and every header key valid UTF-8 (kafka-python raises, Kafka's
    # Utils.utf8 substitutes U+FFFD).
    if p.from_client and not bad_utf8 and not any(_high_record_attributes(b) for b in batches):
        _read_with_kafka_python(data, [b.records_count for b in batches])


def _high_record_attributes(batch: RecordBatch) -> bool:
    raw = batch.uncompressed_records(MAX_DECOMPRESSED)
    pos = 0
    for _ in range(batch.records_count):
        length, start = read_varint(raw, pos)
        if raw[start] & 0x80:
            return True
        pos = start + length
    return False


def _read_with_kafka_python(data: bytes, counts: list[int]) -> None:
    try:
        from kafka.record import MemoryRecords
    except ImportError:  # the test extra installs it; the fuzzer still checks our own reader
        return
    try:
        mr = MemoryRecords(data)
        seen = []
        while (batch := mr.next_batch()) is not None:
            seen.append(sum(1 for _ in batch))
    except Exception as e:
        raise Finding(f"kafka-python cannot read an accepted append: {e!r}") from e
    if seen != counts:
        raise Finding(f"kafka-python reads {seen} records per batch, the log wrote {counts}")


# --- metadata and coordinator records ------------------------------------------------------------

def fuzz_metadata_record(data: bytes) -> None:
    try:
        decode_metadata_record(data)
    except MetadataParseError:
        pass


def coordinator_input(coordinator: Coordinator, key: bytes, value: bytes | None) -> bytes:
    """The input that :func:`fuzz_coordinator_record` splits into ``key`` and ``value``."""
    if len(key) > 255:
        raise ValueError("keys of up to 255 bytes")
    flags = _COORDINATORS.index(coordinator) | (0x80 if value is None else 0)
    return bytes((flags, len(key))) + key + (value or b"")


def fuzz_coordinator_record(data: bytes) -> None:
    if len(data) < 2:
        return
    coordinator = _COORDINATORS[(data[0] & 0x7F) % len(_COORDINATORS)]
    key = data[2:2 + data[1]]
    value = None if data[0] & 0x80 else data[2 + data[1]:]
    try:
        decode_coordinator_record(coordinator, key, value)
    except CoordinatorRecordParseError:
        pass


# --- the guard around every target ---------------------------------------------------------------

TARGETS: dict[str, Callable[[bytes], None]] = {
    "request": fuzz_request,
    "records": fuzz_records,
    "metadata_record": fuzz_metadata_record,
    "coordinator_record": fuzz_coordinator_record,
}


def preload(name: str) -> None:
    """Import the codec modules ``name`` reaches, which the registries load on first use: the fuzzer
    instruments modules for coverage as they are imported, so it calls this inside its import hook."""
    if name == "request":
        for spec in API_SPECS.values():
            assert spec.request_decoders
    elif name == "metadata_record":
        from kbroker.protocol.metadata_records import METADATA_RECORDS
        from kbroker.protocol.metadata_records.serde import record_module

        for key in METADATA_RECORDS:
            record_module(key)
    elif name == "coordinator_record":
        from kbroker.protocol.coordinator_records import COORDINATOR_RECORDS
        from kbroker.protocol.coordinator_records.serde import record_module as coordinator_module

        for coordinator, specs in COORDINATOR_RECORDS.items():
            for record_type in specs:
                coordinator_module(coordinator, record_type)


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def guarded(target: Callable[[bytes], None], max_seconds: float = MAX_SECONDS) -> Callable[[bytes], None]:
    """``target`` plus the time and memory bounds (see the module docstring)."""

    def run(data: bytes) -> None:
        peak = peak_rss_mb()
        start = time.monotonic()
        target(data)
        took = time.monotonic() - start
        if took > max_seconds:
            raise Finding(f"one input took {took:.1f} s (bound {max_seconds} s)")
        if peak_rss_mb() - peak > MAX_RSS_GROWTH_MB:
            raise Finding(f"the process's peak RSS grew by {peak_rss_mb() - peak:.0f} MiB on this input "
                          f"(bound {MAX_RSS_GROWTH_MB} MiB)")

    return run
