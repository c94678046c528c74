"""Kafka's ``LogValidator`` for leader appends: check produced batches and assign their offsets in place.

Owns the batch-level checks of a produce (magic 2, CRC-32C, batch length vs ``max.message.bytes``,
offset range vs record count, control batches from clients, sequence presence, CreateTime bounds
``message.timestamp.before/after.max.ms``), offset assignment by patching ``baseOffset`` and the
partition leader epoch (both outside the CRC, so the bytes are otherwise untouched), LogAppendTime
(``set_max_timestamp``, which recomputes the CRC) and recompression when ``compression.type`` names
a codec different from the batch's. Records are never iterated: timestamps are checked on the
header's base and max timestamps (a deliberate divergence: Kafka checks every record). Compacted
topics are the exception: their records are walked (lengths only) to refuse keyless records.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from crc32c import crc32c

from kbroker.log.config import LogConfig
from kbroker.log.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
)
from kbroker.protocol.compression import CompressionType
from kbroker.protocol.record_format import (
    ATTRIBUTES_OFFSET,
    BASE_OFFSET_OFFSET,
    COMPRESSION_CODEC_MASK,
    CONTROL_FLAG_MASK,
    HEADER,
    INT32,
    INT64,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    MAGIC_V2,
    NO_TIMESTAMP,
    PARTITION_LEADER_EPOCH_OFFSET,
    RECORD_BATCH_OVERHEAD,
    TRANSACTIONAL_FLAG_MASK,
    BatchHeader,
)
from kbroker.protocol.records import RecordBatch, TimestampType, recompress_batch

__all__ = ["ValidationResult", "validate_and_assign_offsets", "target_compression"]



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


_CODECS = {"uncompressed": CompressionType.NONE, "gzip": CompressionType.GZIP, "snappy": CompressionType.SNAPPY,
           "lz4": CompressionType.LZ4, "zstd": CompressionType.ZSTD}


def target_compression(config: LogConfig) -> CompressionType | None:
    """The codec the topic forces, or None for ``producer`` (keep the producer's bytes)."""
    return _CODECS.get(config.compression_type)


def split_batches(records: memoryview) -> list[tuple[int, int]]:
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


def _check_keys_for_compaction(view: memoryview, topic_partition: str) -> None:
    """Kafka's LogValidator.validateKey: a compacted topic refuses records without a key
    (INVALID_RECORD with a per-record error). Only compacted topics pay for this records walk."""
    index = RecordBatch(view).summarize_records().null_key_index
    if index >= 0:
        msg = f"Compacted topic cannot accept message without key in topic partition {topic_partition}."
        err = InvalidRecordError(msg)
        err.record_errors = [(index, msg)]  # read by the replica manager
        raise err


def validate_and_assign_offsets(records: memoryview, next_offset: int, leader_epoch: int, config: LogConfig,
                                now_ms: int, *, from_client: bool = True, topic_partition: str = "") -> ValidationResult:
    """Validate ``records`` (writable, one or more v2 batches) and assign offsets from ``next_offset``.

    The hot path unpacks each header once into locals and checks the CRC with one crc32c call; only
    recompression and LogAppendTime go through ``RecordBatch`` (they rewrite bytes anyway).
    """
    spans = split_batches(records)
    target = target_compression(config)
    log_append = config.log_append_time
    compacted = config.compact
    max_bytes = config.max_message_bytes
    lo_ts, hi_ts = now_ms - config.message_timestamp_before_max_ms, now_ms + config.message_timestamp_after_max_ms
    rebuilt: list[memoryview | bytearray] = []
    headers: list[BatchHeader] = []
    result = ValidationResult(data=records, headers=headers)
    first = next_offset
    total = 0
    num_messages = 0
    max_ts_seen, offset_of_max = NO_TIMESTAMP, -1
    for pos, size in spans:
        view = records[pos:pos + size]
        if size > max_bytes:
            raise RecordTooLargeError(
                f"The record batch is {size} bytes which exceeds the maximum configured value of {max_bytes}.")
        (_base, length, _ple, magic, crc, attrs, delta, base_ts, max_ts, pid, pepoch, base_seq,
         count) = HEADER.unpack_from(view, 0)
        if magic != MAGIC_V2:
            raise CorruptRecordError(f"Produce requests must carry record batches with magic 2, not {magic}")
        if crc32c(view[ATTRIBUTES_OFFSET:]) != crc:
            raise CorruptRecordError(f"Record batch is corrupt (stored crc = {crc}, computed crc = {crc32c(view[ATTRIBUTES_OFFSET:])})")
        if delta < 0 or count <= 0 or count != delta + 1:
            raise InvalidRecordError(f"Inconsistent batch offset range ({delta + 1}) and record count ({count})")
        if pid >= 0 and base_seq < 0:
            raise InvalidRecordError(f"Invalid sequence number {base_seq} for a batch of producer {pid}")
        if from_client and attrs & CONTROL_FLAG_MASK:
            raise InvalidRecordError("Clients are not allowed to write control records")
        if attrs & TRANSACTIONAL_FLAG_MASK and pid < 0:
            raise InvalidRecordError("Transactional batch without a producer id")
        if not log_append:
            if (base_ts != NO_TIMESTAMP and not lo_ts <= base_ts <= hi_ts) or (
                    max_ts != NO_TIMESTAMP and not lo_ts <= max_ts <= hi_ts):
                bad = base_ts if not lo_ts <= base_ts <= hi_ts else max_ts
                raise InvalidTimestampError(
                    f"Timestamp {bad} of message is out of range. The timestamp should be within [{lo_ts}, {hi_ts}]")
        if compacted and not attrs & CONTROL_FLAG_MASK:
            _check_keys_for_compaction(view, topic_partition)
        if target is not None and attrs & COMPRESSION_CODEC_MASK != target:
            buf = recompress_batch(RecordBatch(view), target)
            view = memoryview(buf)
            result.recompressed = True
        rebuilt.append(view)
        INT64.pack_into(view, BASE_OFFSET_OFFSET, next_offset)
        INT32.pack_into(view, PARTITION_LEADER_EPOCH_OFFSET, leader_epoch)
        if log_append or result.recompressed:
            if log_append:
                RecordBatch(view).set_max_timestamp(TimestampType.LOG_APPEND_TIME, now_ms)
            h = BatchHeader._make(HEADER.unpack_from(view, 0))
        else:
            h = BatchHeader(next_offset, length, leader_epoch, magic, crc, attrs, delta, base_ts, max_ts, pid, pepoch,
                            base_seq, count)
        headers.append(h)
        if h.max_timestamp > max_ts_seen:
            max_ts_seen, offset_of_max = h.max_timestamp, next_offset + delta
        num_messages += count
        next_offset += delta + 1
        total += h.batch_length + LOG_OVERHEAD
    if spans:
        result.first_offset, result.last_offset, result.next_offset = first, next_offset - 1, next_offset
    result.max_timestamp, result.offset_of_max_timestamp, result.num_messages = max_ts_seen, offset_of_max, num_messages
    if total > config.segment_bytes:
        raise RecordBatchTooLargeError(
            f"Message batch size is {total} bytes which exceeds the maximum configured segment size of {config.segment_bytes}.")
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
