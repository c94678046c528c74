"""Kafka's v2 record batch (magic 2): a zero-copy header view, CRC32C, in-place patching, records.

Owns the bytes of ``DefaultRecordBatch``/``DefaultRecord``: the 61-byte batch header, the records
inside it (compressed or not), control records (transaction markers), and a builder. Storage and the
API layer work on :class:`RecordBatch` views over request buffers and segment files; only
compaction, transaction-marker handling, recompression and tests ever iterate individual records.
Per-record encoding/decoding lives in ``protocol.record_format``; this module re-exports it.
Sans-IO; imports only ``protocol.record_format``, ``protocol.compression`` and ``protocol.errors``.

Batch layout (big-endian)::

    0  baseOffset int64          12 partitionLeaderEpoch int32   21 attributes int16
    8  batchLength int32         16 magic int8                   23 lastOffsetDelta int32
                                 17 crc uint32 (CRC32C of bytes 21..end)
    27 baseTimestamp int64  35 maxTimestamp int64  43 producerId int64  51 producerEpoch int16
    53 baseSequence int32   57 recordsCount int32  61 records...

baseOffset, batchLength and partitionLeaderEpoch sit outside the CRC, so the broker assigns offsets
and stamps the leader epoch without recomputing it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from kbroker.clock import wall_clock_ms
from kbroker.protocol.compression import (
    DEFAULT_MAX_DECOMPRESSED_SIZE,
    CompressionError,
    CompressionType,
    DecompressionBombError,
    compress,
    decompress,
)
from kbroker.protocol.crc import crc32c
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.record_format import (
    ATTRIBUTES_OFFSET,
    BASE_OFFSET_OFFSET,
    BASE_SEQUENCE_OFFSET,
    BASE_TIMESTAMP_OFFSET,
    COMPRESSION_CODEC_MASK,
    CONTROL_FLAG_MASK,
    CRC_OFFSET,
    DELETE_HORIZON_FLAG_MASK,
    HEADER,
    INT8,
    INT16,
    INT32,
    INT64,
    LAST_OFFSET_DELTA_OFFSET,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAGIC_V2,
    MAX_TIMESTAMP_OFFSET,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    PARTITION_LEADER_EPOCH_OFFSET,
    PRODUCER_EPOCH_OFFSET,
    PRODUCER_ID_OFFSET,
    RECORD_BATCH_OVERHEAD,
    RECORDS_COUNT_OFFSET,
    RECORDS_OFFSET,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG_MASK,
    UINT32,
    BatchHeader,
    Buffer,
    ControlRecordType,
    CorruptRecordError,
    InvalidRecordError,
    Record,
    RecordsError,
    RecordsSummary,
    SimpleRecord,
    TimestampType,
    encode_control_key,
    encode_end_txn_marker,
    encode_record,
    increment_sequence,
    parse_control_record_type,
    parse_end_txn_marker,
    parse_header,
    parse_records,
    summarize_records,
)

__all__ = [
    "LOG_OVERHEAD",
    "RECORD_BATCH_OVERHEAD",
    "BatchHeader",
    "ControlRecordType",
    "CorruptRecordError",
    "InvalidRecordError",
    "Record",
    "RecordBatch",
    "RecordsError",
    "RecordsSummary",
    "SimpleRecord",
    "TimestampType",
    "batch_size_at",
    "build_batch",
    "build_control_batch",
    "compute_attributes",
    "encode_control_key",
    "encode_end_txn_marker",
    "encode_record",
    "increment_sequence",
    "iter_batches",
    "parse_control_record_type",
    "parse_end_txn_marker",
    "recompress_batch",
]

def compute_attributes(
    compression: int,
    timestamp_type: TimestampType,
    is_transactional: bool = False,
    is_control: bool = False,
    has_delete_horizon: bool = False,
) -> int:
    attrs = compression & COMPRESSION_CODEC_MASK
    if timestamp_type == TimestampType.LOG_APPEND_TIME:
        attrs |= TIMESTAMP_TYPE_MASK
    if is_transactional:
        attrs |= TRANSACTIONAL_FLAG_MASK
    if is_control:
        attrs |= CONTROL_FLAG_MASK
    if has_delete_horizon:
        attrs |= DELETE_HORIZON_FLAG_MASK
    return attrs


class RecordBatch:
    """A view over exactly one v2 batch (``buf`` = baseOffset .. end of batch).

    Header reads are struct unpacks at fixed offsets. Setters patch ``buf`` in place, so ``buf``
    must be writable for them (a memoryview over a bytearray or a mmap opened for writing).
    """

    __slots__ = ("buf",)

    def __init__(self, buf: memoryview) -> None:
        self.buf = buf if isinstance(buf, memoryview) else memoryview(buf)

    # --- header fields ---------------------------------------------------------------------
    @property
    def base_offset(self) -> int:
        return INT64.unpack_from(self.buf, 0)[0]

    @property
    def batch_length(self) -> int:
        return INT32.unpack_from(self.buf, LENGTH_OFFSET)[0]

    @property
    def partition_leader_epoch(self) -> int:
        return INT32.unpack_from(self.buf, PARTITION_LEADER_EPOCH_OFFSET)[0]

    @property
    def magic(self) -> int:
        return INT8.unpack_from(self.buf, MAGIC_OFFSET)[0]

    @property
    def crc(self) -> int:
        return UINT32.unpack_from(self.buf, CRC_OFFSET)[0]

    @property
    def attributes(self) -> int:
        return INT16.unpack_from(self.buf, ATTRIBUTES_OFFSET)[0]

    @property
    def last_offset_delta(self) -> int:
        return INT32.unpack_from(self.buf, LAST_OFFSET_DELTA_OFFSET)[0]

    @property
    def base_timestamp(self) -> int:
        return INT64.unpack_from(self.buf, BASE_TIMESTAMP_OFFSET)[0]

    @property
    def max_timestamp(self) -> int:
        return INT64.unpack_from(self.buf, MAX_TIMESTAMP_OFFSET)[0]

    @property
    def producer_id(self) -> int:
        return INT64.unpack_from(self.buf, PRODUCER_ID_OFFSET)[0]

    @property
    def producer_epoch(self) -> int:
        return INT16.unpack_from(self.buf, PRODUCER_EPOCH_OFFSET)[0]

    @property
    def base_sequence(self) -> int:
        return INT32.unpack_from(self.buf, BASE_SEQUENCE_OFFSET)[0]

    @property
    def records_count(self) -> int:
        return INT32.unpack_from(self.buf, RECORDS_COUNT_OFFSET)[0]

    def header(self) -> BatchHeader:
        """All 13 header fields in one unpack (base_offset .. records_count)."""
        return parse_header(self.buf)

    # --- derived ---------------------------------------------------------------------------
    @property
    def compression_type(self) -> int:
        return self.attributes & COMPRESSION_CODEC_MASK

    @property
    def timestamp_type(self) -> TimestampType:
        if self.attributes & TIMESTAMP_TYPE_MASK:
            return TimestampType.LOG_APPEND_TIME
        return TimestampType.CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & DELETE_HORIZON_FLAG_MASK)

    @property
    def delete_horizon_ms(self) -> int:
        """KIP-534: with the delete-horizon bit set, baseTimestamp holds the delete horizon."""
        return self.base_timestamp if self.has_delete_horizon else NO_TIMESTAMP

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id > NO_PRODUCER_ID

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def size_in_bytes(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_sequence(self) -> int:
        base = self.base_sequence
        if base == NO_SEQUENCE:
            return NO_SEQUENCE
        return increment_sequence(base, self.last_offset_delta)

    # --- validation ------------------------------------------------------------------------
    def compute_crc(self) -> int:
        return crc32c(self.buf[ATTRIBUTES_OFFSET:])

    def is_valid(self) -> bool:
        try:
            self.ensure_valid()
        except RecordsError:
            return False
        return True

    def ensure_valid(self) -> None:
        """Kafka's ``DefaultRecordBatch.ensureValid`` plus the magic/size checks of its log reader."""
        n = len(self.buf)
        if n < RECORD_BATCH_OVERHEAD:
            raise CorruptRecordError(
                f"record batch of {n} bytes is smaller than the {RECORD_BATCH_OVERHEAD}-byte header"
            )
        if self.magic != MAGIC_V2:
            raise InvalidRecordError(
                f"unsupported record batch magic {self.magic}", error_code=ErrorCode.CORRUPT_MESSAGE
            )
        if self.size_in_bytes != n:
            raise CorruptRecordError(f"batch length {self.batch_length} does not match the {n}-byte buffer")
        if self.records_count < 0:
            raise InvalidRecordError(f"invalid records count {self.records_count}")
        stored, computed = self.crc, self.compute_crc()
        if stored != computed:
            raise CorruptRecordError(
                f"record batch is corrupt (stored crc = {stored}, computed crc = {computed})"
            )

    def ensure_valid_client_batch(self) -> None:
        """Checks LogValidator applies to a freshly produced batch (offset range vs count)."""
        count, delta = self.records_count, self.last_offset_delta
        if delta < 0:
            raise InvalidRecordError("batch has an invalid offset range")
        if count <= 0:
            raise InvalidRecordError(f"invalid reported count for record batch: {count}")
        if count != delta + 1:
            raise InvalidRecordError(
                f"inconsistent batch offset range ({delta + 1}) and record count ({count})"
            )
        if self.has_producer_id and self.base_sequence < 0:
            raise InvalidRecordError(f"invalid sequence number {self.base_sequence} for a producer batch")

    # --- in-place patching -----------------------------------------------------------------
    def set_base_offset(self, offset: int) -> None:
        INT64.pack_into(self.buf, BASE_OFFSET_OFFSET, offset)

    def set_partition_leader_epoch(self, epoch: int) -> None:
        INT32.pack_into(self.buf, PARTITION_LEADER_EPOCH_OFFSET, epoch)

    def set_max_timestamp(self, timestamp_type: TimestampType, max_timestamp: int) -> None:
        """Set the timestamp type bit and maxTimestamp, recomputing the CRC (skipped if unchanged)."""
        if self.timestamp_type == timestamp_type and self.max_timestamp == max_timestamp:
            return
        attrs = self.attributes & ~TIMESTAMP_TYPE_MASK
        if timestamp_type == TimestampType.LOG_APPEND_TIME:
            attrs |= TIMESTAMP_TYPE_MASK
        INT16.pack_into(self.buf, ATTRIBUTES_OFFSET, attrs)
        INT64.pack_into(self.buf, MAX_TIMESTAMP_OFFSET, max_timestamp)
        UINT32.pack_into(self.buf, CRC_OFFSET, self.compute_crc())

    # --- records ---------------------------------------------------------------------------
    def records_bytes(self) -> memoryview:
        return self.buf[RECORDS_OFFSET:]

    def uncompressed_records(self, max_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE) -> Buffer:
        codec = self.compression_type
        if codec == CompressionType.NONE:
            return self.records_bytes()
        try:
            return decompress(codec, self.records_bytes(), max_size)
        except DecompressionBombError:
            raise  # not corrupt, just too big: keep its own error code
        except CompressionError as e:
            raise CorruptRecordError(f"cannot decompress record batch: {e}") from e

    def iter_records(self, max_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE) -> Iterator[Record]:
        (base_offset, _len, _ple, magic, _crc, attrs, _lod, base_ts, max_ts, _pid, _pe, base_seq, count) = (
            HEADER.unpack_from(self.buf, 0)
        )
        if magic != MAGIC_V2:
            raise InvalidRecordError(
                f"unsupported record batch magic {magic}", error_code=ErrorCode.CORRUPT_MESSAGE
            )
        if count < 0:
            raise InvalidRecordError(f"invalid records count {count}")
        if count == 0:
            # Kafka returns no records without looking further: the log cleaner keeps emptied
            # batches (header only) to preserve producer state.
            return iter(())
        data = self.uncompressed_records(max_size)
        log_append = max_ts if attrs & TIMESTAMP_TYPE_MASK else None
        return parse_records(data, count, base_offset, base_ts, log_append, base_seq)

    def summarize_records(self, max_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE) -> RecordsSummary:
        """Walk the records (decompressing if needed) for LogValidator-style checks.

        Reads only lengths, timestamp/offset deltas and key lengths: no per-record objects. Raises
        InvalidRecordError on malformed records (but does not parse headers or values).
        """
        (_bo, _len, _ple, magic, _crc, attrs, _lod, base_ts, max_ts, _pid, _pe, _seq, count) = HEADER.unpack_from(self.buf, 0)
        if magic != MAGIC_V2:
            raise InvalidRecordError(
                f"unsupported record batch magic {magic}", error_code=ErrorCode.CORRUPT_MESSAGE
            )
        if count < 0:
            raise InvalidRecordError(f"invalid records count {count}")
        data = self.uncompressed_records(max_size) if count else self.records_bytes()[:0]
        return summarize_records(data, count, base_ts, max_ts if attrs & TIMESTAMP_TYPE_MASK else None)

    def __iter__(self) -> Iterator[Record]:
        return self.iter_records()

    def __repr__(self) -> str:
        return (
            f"RecordBatch(base_offset={self.base_offset}, last_offset={self.last_offset}, "
            f"count={self.records_count}, size={self.size_in_bytes}, codec={self.compression_type}, "
            f"control={self.is_control}, txn={self.is_transactional}, pid={self.producer_id})"
        )


def batch_size_at(buf: Buffer, pos: int) -> int:
    """Total size (batchLength + 12) of the batch starting at ``pos``; raise on truncation."""
    if pos + LOG_OVERHEAD > len(buf):
        raise CorruptRecordError(f"truncated batch header at position {pos}")
    length = INT32.unpack_from(buf, pos + LENGTH_OFFSET)[0]
    if length < RECORD_BATCH_OVERHEAD - LOG_OVERHEAD:
        raise CorruptRecordError(
            f"record batch size {length + LOG_OVERHEAD} at position {pos} is below the minimum"
        )
    return length + LOG_OVERHEAD


def iter_batches(buf: Buffer) -> Iterator[RecordBatch]:
    """Views over each batch of a concatenation; a truncated tail raises CorruptRecordError.

    Does not check CRCs (call ``ensure_valid``); a Fetch response's partial trailing batch is the
    caller's business (Kafka clients drop it), so callers that may see one should catch the error.
    """
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    pos = 0
    end = len(mv)
    while pos < end:
        size = batch_size_at(mv, pos)
        if pos + size > end:
            raise CorruptRecordError(
                f"truncated batch at position {pos}: need {size} bytes, have {end - pos}"
            )
        yield RecordBatch(mv[pos : pos + size])
        pos += size


def iter_whole_batches(buf: Buffer) -> Iterator[RecordBatch]:
    """Views over each whole batch of a size-bounded read (a log read, a Fetch answer): a partial
    batch at the end is left out, as Kafka's readers drop it; a malformed batch header still raises
    CorruptRecordError (``batch_size_at``). Does not check CRCs."""
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    pos = 0
    end = len(mv)
    while pos + LOG_OVERHEAD <= end:
        size = batch_size_at(mv, pos)
        if pos + size > end:
            return
        yield RecordBatch(mv[pos : pos + size])
        pos += size


def _assemble(section: Buffer, fields: tuple[int, ...]) -> bytearray:
    """A batch from its records section and the header ``fields`` in wire order, minus
    batchLength, magic and crc (baseOffset, partitionLeaderEpoch, attributes, lastOffsetDelta,
    baseTimestamp, maxTimestamp, producerId, producerEpoch, baseSequence, recordsCount)."""
    base_offset, ple, *rest = fields
    out = bytearray(RECORD_BATCH_OVERHEAD + len(section))
    HEADER.pack_into(out, 0, base_offset, len(out) - LOG_OVERHEAD, ple, MAGIC_V2, 0, *rest)
    out[RECORDS_OFFSET:] = section
    UINT32.pack_into(out, CRC_OFFSET, crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
    return out


def build_batch(
    records: Sequence[SimpleRecord],
    *,
    base_offset: int = 0,
    compression: CompressionType = CompressionType.NONE,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    now_ms: int | None = None,
    compression_level: int | None = None,
) -> bytearray:
    """Build one v2 batch as a producer would (offset deltas 0..n-1, timestamps relative to the first)."""
    if not records:
        raise ValueError("a record batch needs at least one record")
    now = wall_clock_ms() if now_ms is None else now_ms
    stamps = [now if r.timestamp < 0 else r.timestamp for r in records]
    base_ts = stamps[0]
    max_ts = max(stamps)
    section = bytearray()
    for i, (r, ts) in enumerate(zip(records, stamps, strict=True)):
        section += encode_record(i, ts - base_ts, r.key, r.value, r.headers)
    if compression != CompressionType.NONE:
        section = bytearray(compress(compression, section, compression_level))
    if timestamp_type == TimestampType.LOG_APPEND_TIME:
        max_ts = now
    attrs = compute_attributes(compression, timestamp_type, is_transactional)
    n = len(records)
    fields = (base_offset, partition_leader_epoch, attrs, n - 1, base_ts, max_ts)
    return _assemble(section, fields + (producer_id, producer_epoch, base_sequence, n))


def build_control_batch(
    control_type: ControlRecordType,
    *,
    producer_id: int,
    producer_epoch: int,
    timestamp: int,
    base_offset: int = 0,
    coordinator_epoch: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytearray:
    """An end-transaction marker batch (COMMIT/ABORT), transactional + control, one record."""
    if control_type not in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
        raise ValueError(f"only COMMIT/ABORT markers are built here, not {control_type!r}")
    key = encode_control_key(control_type)
    value = encode_end_txn_marker(coordinator_epoch)
    attrs = compute_attributes(CompressionType.NONE, TimestampType.CREATE_TIME, True, True)
    fields = (base_offset, partition_leader_epoch, attrs, 0, timestamp, timestamp)
    return _assemble(encode_record(0, 0, key, value), fields + (producer_id, producer_epoch, NO_SEQUENCE, 1))


def recompress_batch(
    batch: RecordBatch,
    target: CompressionType,
    max_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
    compression_level: int | None = None,
) -> bytearray:
    """Re-encode ``batch``'s records section with ``target``; every other field is kept as is.

    Records are not re-encoded one by one: offset deltas, timestamp deltas, headers and the
    producer fields stay byte-identical, only the compression bits, the section and the CRC change.
    ``compression_level`` is the topic's ``compression.<codec>.level`` (KIP-390); None means the
    library's default (see compression.compress).
    """
    (base_offset, _len, ple, _magic, _crc, attrs, lod, base_ts, max_ts, pid, pe, base_seq, count) = (
        HEADER.unpack_from(batch.buf, 0)
    )
    raw = batch.uncompressed_records(max_size)
    section = raw if target == CompressionType.NONE else compress(target, raw, compression_level)
    attrs = (attrs & ~COMPRESSION_CODEC_MASK) | int(target)
    return _assemble(section, (base_offset, ple, attrs, lod, base_ts, max_ts, pid, pe, base_seq, count))
