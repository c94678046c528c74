"""Kafka's ``LogValidator`` for leader appends: check produced batches and assign their offsets in place.

Two phases, so that the heavy one can run off the event loop (the replica manager's worker pool):

1. :func:`check_batches` (pure: bytes and :class:`ValidationParams` in, :class:`CheckedBatch` out;
   no log state, safe in any thread) does everything Kafka's ``UnifiedLog.analyzeAndValidateRecords``
   and ``LogValidator`` check: per batch, magic 2, CRC-32C, ``max.message.bytes``, a known codec
   (ids 5-7 are refused), baseOffset 0 from clients, offset range vs record count, control batches
   from clients, sequence presence, transactional without producer id; then it **walks every record**
   as Kafka does (``DefaultRecordBatch`` iteration + ``DefaultRecord.readFrom``): the record count
   must match the records present, every varint and length must be well formed and inside its
   record, offset deltas must be 0..n-1, each record's timestamp must be inside
   ``message.timestamp.before/after.max.ms`` (CreateTime), compacted topics refuse null keys, and a
   producer may not set LogAppendTime. Compressed batches are decompressed *as a stream* (chunks of
   ``STREAM_CHUNK``) and walked chunk by chunk; the decompressed size is bounded by
   :data:`MAX_DECOMPRESSED_BATCH_BYTES`. When ``compression.type`` names another codec the same
   stream is fed to a streaming compressor, so a batch is never materialised decompressed. The walk
   reads only varint lengths and deltas (:func:`walk_records`): no Record objects, no copies of keys
   or values. Per-record failures carry Kafka's ``RecordError`` list (batch index, message).
2. :func:`assign_offsets` (on the loop, in partition order) patches baseOffset and the partition
   leader epoch (outside the CRC) and, when the records' real max timestamp (or LogAppendTime)
   differs from the header's, the maxTimestamp and timestamp type (recomputing the CRC), as
   Kafka's ``setMaxTimestamp`` does.

The common case, a client's uncompressed batch kept uncompressed that passes every check, has a
compiled path (:func:`check_produced` and :func:`needs_worker` through ``kbroker/protocol/_speedups.c``,
issue 17's many-partitions finding: with one small batch per partition the Python header checks,
the parameters tuple and the worker decision were a quarter of the broker's time per partition). The
compiled check only ever *accepts*: anything it does not accept (an error, a compressed batch, a
LogAppendTime batch from a producer, a varint it does not decode) goes to the Python checks, which
are the reference and word Kafka's errors. ``tests/log/test_validator_compiled.py`` compares both
paths on random and corrupted batches.

Imports no asyncio: the worker pool and the ordering of appends belong to the replica manager.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from kbroker.log.config import LogConfig
from kbroker.log.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
)
from kbroker.protocol.compression import (
    CompressionError,
    CompressionType,
    DecompressionBombError,
    StreamCompressor,
    iter_decompressed,
)
from kbroker.protocol.crc import crc32c
from kbroker.protocol.record_format import (
    ATTRIBUTES_OFFSET,
    BASE_OFFSET_OFFSET,
    COMPRESSION_CODEC_MASK,
    CONTROL_FLAG_MASK,
    CRC_OFFSET,
    HEADER,
    INT16,
    INT32,
    INT64,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    MAGIC_V2,
    MAX_TIMESTAMP_OFFSET,
    NO_TIMESTAMP,
    PARTITION_LEADER_EPOCH_OFFSET,
    RECORD_BATCH_OVERHEAD,
    RECORDS_OFFSET,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG_MASK,
    UINT32,
    BatchHeader,
    Buffer,
    compiled_walk_available,
    parse_records,
    walk_batch_records,
    walk_records,
)

_check_plain: Callable[[Buffer, int, int, int, int, bool, bool, Callable[[Buffer], int]],
                       list[tuple[int, int, int]] | None] | None
_needs_worker: Callable[[Buffer, int, int, int], bool] | None
_assign_plain: Callable[[memoryview, list[CheckedBatch], int, int, type[BatchHeader], Callable[[Buffer], int]],
                        tuple[list[BatchHeader], int, int, int, int, int] | None] | None
_check_assign_plain: Callable[[memoryview, int, int, int, int, bool, bool, int, int, type[BatchHeader],
                               Callable[[Buffer], int]], PlainAppend | None] | None
try:  # the optional compiled paths (setup.py, scripts/build-speedups.sh); the Python code is the reference
    from kbroker.protocol._speedups import assign_plain as _assign_plain
    from kbroker.protocol._speedups import check_assign_plain as _check_assign_plain
    from kbroker.protocol._speedups import check_plain as _check_plain
    from kbroker.protocol._speedups import needs_worker as _needs_worker
except ImportError:  # pragma: no cover - no C compiler where kbroker was installed, or an older build
    _check_plain = _needs_worker = _assign_plain = _check_assign_plain = None

__all__ = [
    "CheckedBatch",
    "MAX_DECOMPRESSED_BATCH_BYTES",
    "PlainAppend",
    "ValidationParams",
    "ValidationResult",
    "assign_offsets",
    "check_and_assign_plain",
    "check_batches",
    "check_produced",
    "inline_max_bytes",
    "needs_worker",
    "target_compression",
    "validate_and_assign_offsets",
    "validation_params",
]

#: Bound on one batch's decompressed records section. Kafka has no explicit cap (its streaming
#: iterator reads whatever the codec yields); ours is ``socket.request.max.bytes``' default
#: (104857600): no compressed batch may expand beyond the largest request the broker would accept
#: uncompressed. Beyond it: RECORD_LIST_TOO_LARGE.
MAX_DECOMPRESSED_BATCH_BYTES = 104_857_600

#: Per-record errors listed in one response (Kafka lists all of them; a batch of millions of bad
#: records would make that list the biggest thing in the broker's memory). The message still gives
#: the total.
MAX_RECORD_ERRORS = 1000

#: Uncompressed batches with at most this many records (and at most :func:`inline_max_bytes`) are
#: checked on the event loop; anything bigger, and every compressed or recompressed batch, goes to a
#: worker. The record bound caps the Python walk (about 7 us a record), which also runs with the
#: compiled walk when a record is malformed (the C walk gives up, the Python walk finds the error).
INLINE_MAX_RECORDS = 2000
#: The byte bound with the Python walk only (its CRC and skipping cost about 2 ms a 256 KiB batch).
INLINE_MAX_BYTES = 256 * 1024
#: The byte bound with the compiled walk: a batch of at most INLINE_MAX_RECORDS records then costs the
#: hardware CRC-32C (about 0.07 ms a MiB) and a C walk (about 15 ns a record), about 0.3 ms for 4 MiB:
#: less than handing it to a worker thread and back (issue 17, P4: a producer's 1 MB batches went to
#: the worker, whose two thread hand-offs, on the broker's one core, added 1 to 7 ms to every
#: produce round trip of a producer with one request in flight; its batches then stayed at the 1 MB
#: cap and its buffer full: 0.5 s end-to-end latency at 50k records/s).
INLINE_MAX_BYTES_COMPILED = 4 * 1024 * 1024


def inline_max_bytes() -> int:
    """The largest uncompressed produce (all its batches) checked on the event loop."""
    return INLINE_MAX_BYTES_COMPILED if compiled_walk_available() else INLINE_MAX_BYTES

_CODECS = {"uncompressed": CompressionType.NONE, "gzip": CompressionType.GZIP, "snappy": CompressionType.SNAPPY,
           "lz4": CompressionType.LZ4, "zstd": CompressionType.ZSTD}


def target_compression(config: LogConfig) -> CompressionType | None:
    """The codec the topic forces, or None for ``producer`` (keep the producer's bytes)."""
    return _CODECS.get(config.compression_type)


class ValidationParams(NamedTuple):
    """What :func:`check_batches` needs from the topic config and the request (picklable)."""

    target: int  # codec the topic forces, -1 for "producer"
    log_append_time: bool
    compacted: bool
    max_message_bytes: int
    lo_ts: int
    hi_ts: int
    now_ms: int
    from_client: bool
    topic_partition: str
    max_decompressed: int = MAX_DECOMPRESSED_BATCH_BYTES


def validation_params(config: LogConfig, now_ms: int, *, from_client: bool = True,
                      topic_partition: str = "") -> ValidationParams:
    target = target_compression(config)
    return ValidationParams(
        -1 if target is None else int(target), config.log_append_time, config.compact, config.max_message_bytes,
        now_ms - config.message_timestamp_before_max_ms, now_ms + config.message_timestamp_after_max_ms,
        now_ms, from_client, topic_partition)


class CheckedBatch(NamedTuple):
    """One batch that passed :func:`check_batches`."""

    pos: int  # span in the request's records
    size: int
    rebuilt: bytearray | None  # the recompressed batch (timestamps final, offsets not yet), or None
    max_timestamp: int  # what the header must carry
    log_append_time: bool  # the timestamp type the header must carry


@dataclass
class ValidationResult:
    data: memoryview | bytearray  # the bytes to write: the caller's buffer (patched) or a rebuilt one
    headers: list[BatchHeader] = field(default_factory=list)  # after patching
    first_offset: int = -1
    last_offset: int = -1
    next_offset: int = -1
    max_timestamp: int = NO_TIMESTAMP
    offset_of_max_timestamp: int = -1
    num_messages: int = 0
    valid_bytes: int = 0
    recompressed: bool = False

    def batch_infos(self) -> list[tuple[int, int, int]]:
        return [(h.last_offset, h.max_timestamp, h.size) for h in self.headers]


# What check_and_assign_plain returns: (headers, the segment's [(last_offset, max_timestamp, size)],
# next_offset, max_timestamp, offset_of_max_timestamp, num_messages, valid_bytes).
PlainAppend = tuple[list[BatchHeader], list[tuple[int, int, int]], int, int, int, int, int]


def split_batches(records: Buffer) -> list[tuple[int, int]]:
    """(position, size) of each complete batch; a trailing partial batch is dropped as Kafka does."""
    out = []
    pos, n = 0, len(records)
    while pos + LOG_OVERHEAD <= n:
        (length,) = INT32.unpack_from(records, pos + LENGTH_OFFSET)
        size = length + LOG_OVERHEAD
        if size < RECORD_BATCH_OVERHEAD:
            raise CorruptRecordError(f"Record batch size {size} is less than the minimum batch size {RECORD_BATCH_OVERHEAD}")
        if pos + size > n:
            break
        out.append((pos, size))
        pos += size
    return out


def needs_worker(records: Buffer, config: LogConfig) -> bool:
    """True when checking ``records`` may cost more than a small uncompressed walk: a compressed
    batch (its size after decompression is unknown until decompressed), a recompression, or a big
    uncompressed batch. Reads headers only; malformed framing is left to the inline check."""
    target = _CODECS.get(config.compression_type)  # target_compression
    if _needs_worker is not None:
        return _needs_worker(records, -1 if target is None else target, INLINE_MAX_BYTES_COMPILED, INLINE_MAX_RECORDS)
    pos, n = 0, len(records)
    if n > INLINE_MAX_BYTES and n > inline_max_bytes():  # the smaller bound first: no call for a small batch
        return True
    while pos + RECORD_BATCH_OVERHEAD <= n:
        (length,) = INT32.unpack_from(records, pos + LENGTH_OFFSET)
        (attrs,) = INT16.unpack_from(records, pos + ATTRIBUTES_OFFSET)
        (count,) = INT32.unpack_from(records, pos + RECORDS_OFFSET - 4)
        codec = attrs & COMPRESSION_CODEC_MASK
        if codec or count > INLINE_MAX_RECORDS or (target is not None and target != codec):
            return True
        if length < RECORD_BATCH_OVERHEAD - LOG_OVERHEAD:
            return False
        pos += length + LOG_OVERHEAD
    return False


# --- phase 1: checks (pure) ------------------------------------------------------------------

def _record_error_list(errors: list[tuple[int, str | None]]) -> str:
    return "[" + ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in errors[:3]) + "]"


def _raise_record_errors(view: memoryview, p: ValidationParams, base_ts: int, max_ts: int, batch_lat: bool,
                         base_seq: int) -> None:
    """The slow path, only when the walk saw a problem: decode the records and list Kafka's per-record
    errors (``LogValidator.validateRecord``: key first, then timestamp), then raise as
    ``processRecordErrors`` does."""
    codec = INT16.unpack_from(view, ATTRIBUTES_OFFSET)[0] & COMPRESSION_CODEC_MASK
    section: Buffer = view[RECORDS_OFFSET:]
    if codec:
        section = b"".join(bytes(c) for c in iter_decompressed(codec, section, p.max_decompressed))
    count = INT32.unpack_from(view, RECORDS_OFFSET - 4)[0]
    errors: list[tuple[int, str | None]] = []
    total = 0
    timestamp_error = False
    for i, rec in enumerate(parse_records(section, count, 0, base_ts, max_ts if batch_lat else None, base_seq)):
        before = len(errors)
        if p.compacted and rec.key is None:
            errors.append((i, f"Compacted topic cannot accept message without key in topic partition {p.topic_partition}."))
        elif not p.log_append_time and rec.timestamp != NO_TIMESTAMP:
            if not p.lo_ts <= rec.timestamp <= p.hi_ts:
                timestamp_error = True
                errors.append((i, f"Timestamp {rec.timestamp} of message with offset {rec.offset} is out of range. "
                                  f"The timestamp should be within [{p.lo_ts}, {p.hi_ts}]"))
        elif batch_lat:
            timestamp_error = True
            errors.append((i, f"Invalid timestamp type in message {rec!r}. Producer should not set timestamp "
                              "type to LogAppendTime."))
        if len(errors) > before:
            total += 1
            if len(errors) > MAX_RECORD_ERRORS:
                errors.pop()  # a bounded list: `total` keeps counting
    if not errors:
        return
    err: InvalidRecordError | InvalidTimestampError
    if timestamp_error:
        err = InvalidTimestampError("One or more records have been rejected due to invalid timestamp")
    else:
        err = InvalidRecordError(
            f"One or more records have been rejected due to {total} record errors in total, and only "
            f"showing the first three errors at most: {_record_error_list(errors)}")
    err.record_errors = errors  # read by the replica manager
    raise err


def check_batch(view: memoryview, pos: int, p: ValidationParams) -> CheckedBatch:
    """All of Kafka's checks on one batch (see the module docstring); raises the Kafka error."""
    size = len(view)
    if size > p.max_message_bytes:
        raise RecordTooLargeError(
            f"The record batch size in the append to {p.topic_partition} is {size} bytes which exceeds the "
            f"maximum configured value of {p.max_message_bytes}.")
    (base, _length, _ple, magic, crc, attrs, delta, base_ts, max_ts, pid, _pepoch, base_seq,
     count) = HEADER.unpack_from(view, 0)
    if magic != MAGIC_V2:
        raise CorruptRecordError(f"Produce requests must carry record batches with magic 2, not {magic}")
    if crc32c(view[ATTRIBUTES_OFFSET:]) != crc:
        raise CorruptRecordError(f"Record is corrupt (stored crc = {crc}) in topic partition {p.topic_partition}.")
    codec = attrs & COMPRESSION_CODEC_MASK
    if codec > CompressionType.ZSTD:
        # Kafka's CompressionType.forId throws IllegalArgumentException here (UNKNOWN_SERVER_ERROR on
        # the wire); we answer what the bytes are: a corrupt batch.
        raise CorruptRecordError(f"Unknown compression type id: {codec}")
    control = attrs & CONTROL_FLAG_MASK
    if p.from_client:
        if base != 0:
            raise InvalidRecordError(f"The baseOffset of the record batch in the append to {p.topic_partition} "
                                     f"should be 0, but it is {base}")
        if delta < 0:
            raise InvalidRecordError(f"Batch has an invalid offset range: [{base}, {base + delta}] in topic partition "
                                     f"{p.topic_partition}")
        if count <= 0:
            raise InvalidRecordError(f"Invalid reported count for record batch: {count} in topic partition "
                                     f"{p.topic_partition}")
        if count != delta + 1:
            raise InvalidRecordError(f"Inconsistent batch offset range [{base}, {base + delta}] and count of records "
                                     f"{count} in topic partition {p.topic_partition}")
        if control:
            raise InvalidRecordError(f"Clients are not allowed to write control records in topic partition "
                                     f"{p.topic_partition}")
        if pid >= 0 and base_seq < 0:
            raise InvalidRecordError(f"Invalid sequence number {base_seq} in record batch with producerId {pid} in "
                                     f"topic partition {p.topic_partition}")
    elif count < 0:
        raise InvalidRecordError(f"Found invalid record count {count} in magic v2 batch")
    if attrs & TRANSACTIONAL_FLAG_MASK and pid < 0:
        raise InvalidRecordError("Transactional batch without a producer id")
    # Kafka keeps uncompressed control batches uncompressed whatever compression.type says.
    target = p.target
    recompress = target >= 0 and target != codec and not (control and codec == CompressionType.NONE)
    compressor: StreamCompressor | None = None
    if codec == CompressionType.NONE and not recompress:
        w = walk_batch_records(view, RECORDS_OFFSET, count)
        if w.pos != size:
            raise InvalidRecordError("Incorrect declared batch size, records still remaining in file")
    else:
        compressor = StreamCompressor(target if recompress else codec) if recompress else None
        section = view[RECORDS_OFFSET:]
        # What is held: the record being walked (at most one record) plus one chunk. Consumed
        # bytes are dropped from the front; appending to a bytearray is amortised O(1).
        acc = bytearray()
        w = walk_records(b"", 0, 0, 0)
        try:
            for chunk in iter_decompressed(codec, section, p.max_decompressed):
                acc += chunk
                w = walk_records(acc, 0, w.next_index, count, True, w.min_ts_delta, w.max_ts_delta, w.null_keys,
                                 w.bad_offset_index)
                del acc[:w.pos]
                if w.next_index == count and acc:
                    raise InvalidRecordError("Incorrect declared batch size, records still remaining in file")
                if compressor is not None:
                    compressor.feed(chunk)
        except DecompressionBombError:
            raise
        except CompressionError as e:
            raise CorruptRecordError(f"Failed to decompress record stream in topic partition {p.topic_partition}: "
                                     f"{e}") from e
        if w.next_index < count:
            raise InvalidRecordError("Incorrect declared batch size, premature EOF reached")
    if w.bad_offset_index >= 0:
        msg = (f"Record at index {w.bad_offset_index} has offset delta other than its index in the batch in topic "
               f"partition {p.topic_partition}")
        err = InvalidRecordError(
            "One or more records have been rejected due to 1 record errors in total, and only showing the first "
            f"three errors at most: {_record_error_list([(w.bad_offset_index, msg)])}")
        err.record_errors = [(w.bad_offset_index, msg)]
        raise err
    batch_lat = bool(attrs & TIMESTAMP_TYPE_MASK)
    if count and ((p.compacted and w.null_keys) or batch_lat or (not p.log_append_time and (
            not p.lo_ts <= base_ts + w.min_ts_delta <= p.hi_ts or not p.lo_ts <= base_ts + w.max_ts_delta <= p.hi_ts))):
        _raise_record_errors(view, p, base_ts, max_ts, batch_lat, base_seq)
    if p.log_append_time:
        final_max = p.now_ms
    elif not count:
        final_max = max_ts
    else:
        final_max = max_ts if batch_lat else base_ts + w.max_ts_delta
    rebuilt = None
    if compressor is not None:
        out = compressor.finish()
        new_attrs = (attrs & ~(COMPRESSION_CODEC_MASK | TIMESTAMP_TYPE_MASK)) | target
        if p.log_append_time:
            new_attrs |= TIMESTAMP_TYPE_MASK
        rebuilt = bytearray(RECORD_BATCH_OVERHEAD + len(out))
        HEADER.pack_into(rebuilt, 0, base, len(rebuilt) - LOG_OVERHEAD, -1, MAGIC_V2, 0, new_attrs, delta,
                         base_ts, final_max, pid, _pepoch, base_seq, count)
        rebuilt[RECORDS_OFFSET:] = out
        UINT32.pack_into(rebuilt, CRC_OFFSET, crc32c(memoryview(rebuilt)[ATTRIBUTES_OFFSET:]))
    return CheckedBatch(pos, size, rebuilt, final_max, p.log_append_time)


def check_batches(records: Buffer, p: ValidationParams) -> list[CheckedBatch]:
    """Phase 1 over every complete batch of ``records``; pure, so it may run in a worker thread."""
    mv = records if isinstance(records, memoryview) else memoryview(records)
    return [check_batch(mv[pos:pos + size], pos, p) for pos, size in split_batches(mv)]


_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


def check_produced(records: memoryview, config: LogConfig, now_ms: int, topic_partition: str) -> list[CheckedBatch]:
    """Phase 1 for a client's append checked on the loop: :func:`check_batches`, with the compiled
    check first when the topic keeps the producer's codec (one call and no :class:`ValidationParams`
    for batches it accepts; anything else takes the Python checks, which word Kafka's errors)."""
    if _check_plain is not None:
        args = config.produce_check_args
        if args is not None:
            max_message_bytes, before_ms, after_ms, compacted, lat = args
            # The window clamped to int64 (a timestamp the compiled check accepts is one).
            plain = _check_plain(records, max_message_bytes, max(now_ms - before_ms, _INT64_MIN),
                                 min(now_ms + after_ms, _INT64_MAX), now_ms, compacted, lat, crc32c)
            if plain is not None:
                return [CheckedBatch(pos, size, None, final_max, lat) for pos, size, final_max in plain]
    return check_batches(records, validation_params(config, now_ms, topic_partition=topic_partition))


def check_and_assign_plain(records: memoryview, config: LogConfig, now_ms: int, next_offset: int, leader_epoch: int,
                           segment_bytes: int) -> PlainAppend | None:
    """Both phases for a client's append checked on the loop, in one compiled call, when every batch
    is one :func:`check_produced` takes on its compiled path: the batches patched in place as
    :func:`assign_offsets` patches them, and what the log's append reads, or None (nothing checked,
    nothing changed) for anything else, which then takes :func:`check_produced` and
    :func:`assign_offsets`. One call per partition of a Produce request instead of two, with no
    CheckedBatch list and no ValidationResult in between (issue 17: one request naming thousands of
    partitions)."""
    if _check_assign_plain is None:
        return None
    args = config.produce_check_args
    if args is None:
        return None
    max_message_bytes, before_ms, after_ms, compacted, lat = args
    plain = _check_assign_plain(records, max_message_bytes, max(now_ms - before_ms, _INT64_MIN),
                                min(now_ms + after_ms, _INT64_MAX), now_ms, compacted, lat, next_offset, leader_epoch,
                                BatchHeader, crc32c)
    if plain is not None and plain[6] > segment_bytes:
        raise RecordBatchTooLargeError(f"Message batch size is {plain[6]} bytes which exceeds the maximum configured "
                                       f"segment size of {segment_bytes}.")
    return plain


# --- phase 2: offsets (on the loop, in partition order) ----------------------------------------

def assign_offsets(records: memoryview, checked: list[CheckedBatch], next_offset: int, leader_epoch: int,
                   segment_bytes: int) -> ValidationResult:
    """Patch offsets, leader epoch and (when they changed) timestamps; ``records`` must be writable."""
    if _assign_plain is not None and (plain := _assign_plain(records, checked, next_offset, leader_epoch, BatchHeader,
                                                              crc32c)) is not None:
        plain_headers, end, max_ts_seen, offset_of_max, num_messages, total = plain
        if total > segment_bytes:
            raise RecordBatchTooLargeError(f"Message batch size is {total} bytes which exceeds the maximum configured "
                                           f"segment size of {segment_bytes}.")
        if not checked:
            return ValidationResult(records[:0], plain_headers)
        return ValidationResult(records[:total], plain_headers, next_offset, end - 1, end, max_ts_seen, offset_of_max,
                                num_messages, total)
    rebuilt: list[memoryview | bytearray] = []
    headers: list[BatchHeader] = []
    result = ValidationResult(data=records, headers=headers)
    first = next_offset
    total = 0
    num_messages = 0
    max_ts_seen, offset_of_max = NO_TIMESTAMP, -1
    for c in checked:
        view: memoryview | bytearray
        if c.rebuilt is not None:
            view = c.rebuilt
            result.recompressed = True
        else:
            view = records[c.pos:c.pos + c.size]
            (attrs,) = INT16.unpack_from(view, ATTRIBUTES_OFFSET)
            (max_ts,) = INT64.unpack_from(view, MAX_TIMESTAMP_OFFSET)
            if max_ts != c.max_timestamp or bool(attrs & TIMESTAMP_TYPE_MASK) != c.log_append_time:
                # Kafka's setMaxTimestamp: the header carries the records' real max (or LogAppendTime).
                attrs = (attrs | TIMESTAMP_TYPE_MASK) if c.log_append_time else (attrs & ~TIMESTAMP_TYPE_MASK)
                INT16.pack_into(view, ATTRIBUTES_OFFSET, attrs)
                INT64.pack_into(view, MAX_TIMESTAMP_OFFSET, c.max_timestamp)
                UINT32.pack_into(view, CRC_OFFSET, crc32c(view[ATTRIBUTES_OFFSET:]))
        rebuilt.append(view)
        INT64.pack_into(view, BASE_OFFSET_OFFSET, next_offset)
        INT32.pack_into(view, PARTITION_LEADER_EPOCH_OFFSET, leader_epoch)
        h = BatchHeader._make(HEADER.unpack_from(view, 0))
        headers.append(h)
        if h.max_timestamp > max_ts_seen:
            max_ts_seen, offset_of_max = h.max_timestamp, next_offset + h.last_offset_delta
        num_messages += h.records_count
        next_offset += h.last_offset_delta + 1
        total += h.size
    if checked:
        result.first_offset, result.last_offset, result.next_offset = first, next_offset - 1, next_offset
    result.max_timestamp, result.offset_of_max_timestamp, result.num_messages = max_ts_seen, offset_of_max, num_messages
    if total > segment_bytes:
        raise RecordBatchTooLargeError(
            f"Message batch size is {total} bytes which exceeds the maximum configured segment size of {segment_bytes}.")
    result.valid_bytes = total
    if result.recompressed:
        out = bytearray(total)
        p = 0
        for part in rebuilt:
            out[p:p + len(part)] = part
            p += len(part)
        result.data = out
    else:
        result.data = records[:total]
    return result


def validate_and_assign_offsets(records: memoryview, next_offset: int, leader_epoch: int, config: LogConfig,
                                now_ms: int, *, from_client: bool = True, topic_partition: str = "",
                                checked: list[CheckedBatch] | None = None) -> ValidationResult:
    """Both phases (``checked``: phase 1 already done, by a worker)."""
    if checked is None:
        checked = check_batches(records, validation_params(config, now_ms, from_client=from_client,
                                                           topic_partition=topic_partition))
    return assign_offsets(records, checked, next_offset, leader_epoch, config.segment_bytes)
