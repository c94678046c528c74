"""The v2 batch header layout, records inside a batch (``DefaultRecord``), record-format errors and enums.

Owns the one definition of the 61-byte RecordBatch v2 header: field offsets, attribute masks, the
precompiled :data:`HEADER`/:data:`PREFIX` structs and :class:`BatchHeader` (all 13 fields from a
single ``unpack_from``, with Kafka's derived values such as ``last_sequence``); the storage engine
scans segment files with these, and ``protocol.records`` builds its batch view on them. Also owns
the per-record bytes: decoding (:class:`Record`), the produce-path structure walk Kafka's
``DefaultRecord.readFrom`` implies (:func:`walk_records`: varints and lengths only, resumable across
the chunks of a decompressing stream), a lean summary walk (:func:`summarize_records`), encoding (:func:`encode_record`), control-record keys and
end-transaction marker values, and producer-sequence arithmetic. ``protocol.records`` re-exports
the public names; import them from there. Sans-IO; imports only ``protocol.varint`` and
``protocol.errors``.

Record layout: length varint, attributes int8 (unused), timestampDelta varlong, offsetDelta varint,
keyLength varint (-1 = null), key, valueLength varint, value, headersCount varint, then per header
keyLength varint, key (UTF-8, never null), valueLength varint, value.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator, Sequence
from enum import IntEnum
from typing import NamedTuple

from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.varint import VarintError, encode_varint, encode_varlong, read_varint, read_varlong

_walk_compiled: Callable[[Buffer, int, int], tuple[int, int, int, int, int, int] | None] | None
try:  # the optional compiled walk (setup.py, scripts/build-speedups.sh); the Python walk is the reference
    from kbroker.protocol._speedups import walk_uncompressed as _walk_compiled
except ImportError:  # pragma: no cover - no C compiler where kbroker was installed
    _walk_compiled = None


def compiled_walk_available() -> bool:
    """Whether :func:`walk_batch_records` walks well-formed records in C (``_speedups``): the produce
    path then checks bigger uncompressed batches on the event loop (``log.validator.inline_max_bytes``)."""
    return _walk_compiled is not None

NO_SEQUENCE = -1
NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_PARTITION_LEADER_EPOCH = -1
MAGIC_V2 = 2

# --- RecordBatch v2 header (Kafka's DefaultRecordBatch; layout drawn in protocol.records) ------
LOG_OVERHEAD = 12  # baseOffset int64 + batchLength int32
RECORD_BATCH_OVERHEAD = 61  # the whole header; records start here
BASE_OFFSET_OFFSET = 0
LENGTH_OFFSET = 8
PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21  # the CRC-32C covers attributes .. end of batch
LAST_OFFSET_DELTA_OFFSET = 23
BASE_TIMESTAMP_OFFSET = 27
MAX_TIMESTAMP_OFFSET = 35
PRODUCER_ID_OFFSET = 43
PRODUCER_EPOCH_OFFSET = 51
BASE_SEQUENCE_OFFSET = 53
RECORDS_COUNT_OFFSET = 57
RECORDS_OFFSET = 61

COMPRESSION_CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_FLAG_MASK = 0x10
CONTROL_FLAG_MASK = 0x20
DELETE_HORIZON_FLAG_MASK = 0x40

# baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta,
# baseTimestamp, maxTimestamp, producerId, producerEpoch, baseSequence, recordsCount
HEADER = struct.Struct(">qiibIhiqqqhii")
# baseOffset .. lastOffsetDelta: all an offset -> position scan needs, 27 bytes instead of 61.
PREFIX = struct.Struct(">qiibIhi")
PREFIX_SIZE = PREFIX.size
INT64 = struct.Struct(">q")
INT32 = struct.Struct(">i")
UINT32 = struct.Struct(">I")
INT16 = struct.Struct(">h")
INT8 = struct.Struct(">b")
assert HEADER.size == RECORD_BATCH_OVERHEAD and PREFIX_SIZE == LAST_OFFSET_DELTA_OFFSET + 4

_CONTROL_KEY = struct.Struct(">hh")
_END_TXN_VALUE = struct.Struct(">hi")

Buffer = bytes | bytearray | memoryview


class RecordsError(KafkaError, ValueError):
    """Base of record-format errors."""

    error_code = ErrorCode.CORRUPT_MESSAGE


class CorruptRecordError(RecordsError):
    """CRC mismatch, truncated batch, impossible sizes (Kafka's CorruptRecordException)."""

    error_code = ErrorCode.CORRUPT_MESSAGE


class InvalidRecordError(RecordsError):
    """Structurally invalid contents (Kafka's InvalidRecordException -> INVALID_RECORD)."""

    error_code = ErrorCode.INVALID_RECORD


class TimestampType(IntEnum):
    NO_TIMESTAMP_TYPE = -1
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class ControlRecordType(IntEnum):
    """The ``type`` in a control record's key (ControlRecordType.java)."""

    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6


def increment_sequence(sequence: int, increment: int) -> int:
    """Kafka's int32 producer-sequence arithmetic: wraps from Integer.MAX_VALUE to 0."""
    if sequence > 0x7FFFFFFF - increment:
        return increment - (0x7FFFFFFF - sequence) - 1
    return sequence + increment


class BatchHeader(NamedTuple):
    """The 13 header fields of one batch in wire order (``HEADER.unpack_from`` -> ``_make``)."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        # increment_sequence inlined (producer-state replay calls this per batch): sequences wrap
        # from Int32.MAX to 0 like DefaultRecordBatch.incrementSequence.
        s = self.base_sequence + self.last_offset_delta
        return s - 2147483648 if s > 2147483647 else s

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG_MASK)

    @property
    def log_append_time(self) -> bool:
        return bool(self.attributes & TIMESTAMP_TYPE_MASK)


# tuple.__new__ is what BatchHeader._make calls, minus a Python-level frame and a length check that
# HEADER's 13 fields make redundant: about half of _make's cost, per batch.
_new_header = tuple.__new__


def parse_header(buf: Buffer, pos: int = 0) -> BatchHeader:
    """The header of the batch at ``pos`` in one unpack (no length or CRC check)."""
    return _new_header(BatchHeader, HEADER.unpack_from(buf, pos))


class Record:
    """One record of a batch, decoded (iteration is off the produce/fetch hot path)."""

    __slots__ = ("offset", "timestamp", "key", "value", "headers", "sequence", "attributes")

    def __init__(
        self,
        offset: int,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: tuple[tuple[str, bytes | None], ...],
        sequence: int,
        attributes: int = 0,
    ) -> None:
        self.offset = offset
        self.timestamp = timestamp
        self.key = key
        self.value = value
        self.headers = headers
        self.sequence = sequence
        self.attributes = attributes

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Record):
            return NotImplemented
        return all(getattr(self, s) == getattr(other, s) for s in self.__slots__)

    def __repr__(self) -> str:
        return (
            f"Record(offset={self.offset}, timestamp={self.timestamp}, key={self.key!r}, "
            f"value={self.value!r}, headers={self.headers!r}, sequence={self.sequence})"
        )


def _read_bytes(buf: Buffer, pos: int, end: int, what: str) -> tuple[bytes | None, int]:
    b = buf[pos]
    if b < 0x80:  # one-byte length: the common case, decoded inline
        n, pos = (b >> 1) ^ -(b & 1), pos + 1
    else:
        n, pos = read_varint(buf, pos)
    if n < 0:
        if n != -1:
            raise InvalidRecordError(f"invalid negative {what} size {n}")
        return None, pos
    if pos + n > end:
        raise InvalidRecordError(f"{what} of {n} bytes runs past the record")
    return bytes(buf[pos : pos + n]), pos + n


def parse_records(
    buf: Buffer,
    count: int,
    base_offset: int,
    base_timestamp: int,
    log_append_time: int | None,
    base_sequence: int,
) -> Iterator[Record]:
    """Decode ``count`` records from ``buf`` (the uncompressed records section).

    One-byte varints (small deltas, short lengths) are decoded inline; this loop runs per record.
    """
    pos = 0
    end = len(buf)
    try:
        for _ in range(count):
            b = buf[pos]
            if b < 0x80:
                size, pos = (b >> 1) ^ -(b & 1), pos + 1
            else:
                size, pos = read_varint(buf, pos)
            rec_end = pos + size
            if size < 0 or rec_end > end:
                raise InvalidRecordError(f"record size {size} runs past the batch")
            attributes = buf[pos]
            b = buf[pos + 1]
            if b < 0x80:
                ts_delta, pos = (b >> 1) ^ -(b & 1), pos + 2
            else:
                ts_delta, pos = read_varlong(buf, pos + 1)
            b = buf[pos]
            if b < 0x80:
                offset_delta, pos = (b >> 1) ^ -(b & 1), pos + 1
            else:
                offset_delta, pos = read_varint(buf, pos)
            key, pos = _read_bytes(buf, pos, rec_end, "key")
            value, pos = _read_bytes(buf, pos, rec_end, "value")
            b = buf[pos]
            if b < 0x80:
                n_headers, pos = (b >> 1) ^ -(b & 1), pos + 1
            else:
                n_headers, pos = read_varint(buf, pos)
            if n_headers < 0:
                raise InvalidRecordError(f"invalid negative number of record headers {n_headers}")
            headers: tuple[tuple[str, bytes | None], ...] = ()
            if n_headers:
                hs = []
                for _h in range(n_headers):
                    hkey, pos = _read_bytes(buf, pos, rec_end, "header key")
                    if hkey is None:
                        raise InvalidRecordError("invalid null header key")
                    hval, pos = _read_bytes(buf, pos, rec_end, "header value")
                    # Kafka does not check header keys are UTF-8 (Java decodes them lazily, replacing bad
                    # bytes); surrogateescape keeps such a key readable and re-encodes it byte for byte.
                    hs.append((hkey.decode("utf-8", "surrogateescape"), hval))
                headers = tuple(hs)
            if pos != rec_end:
                raise InvalidRecordError(
                    f"record declares {size} bytes but its fields span {size + pos - rec_end}"
                )
            seq = NO_SEQUENCE if base_sequence < 0 else increment_sequence(base_sequence, offset_delta)
            ts = log_append_time if log_append_time is not None else base_timestamp + ts_delta
            yield Record(base_offset + offset_delta, ts, key, value, headers, seq, attributes)
    except (VarintError, IndexError, UnicodeDecodeError) as e:
        raise InvalidRecordError(f"malformed record: {e}") from e
    if pos != end:
        raise InvalidRecordError("incorrect declared batch size, records still remaining")


class RecordsSummary(NamedTuple):
    """What produce-time validation needs from a batch's records, gathered without decoding them."""

    record_count: int  # records actually present
    min_timestamp: int  # effective timestamps (LogAppendTime batches: maxTimestamp)
    max_timestamp: int
    null_key_index: int  # index of the first record with a null key, or -1 (compacted topics reject it)
    bad_offset_index: int  # index of the first record whose offsetDelta != its index, or -1


def summarize_records(
    buf: Buffer, count: int, base_timestamp: int, log_append_time: int | None
) -> RecordsSummary:
    """Walk ``count`` records of an uncompressed section reading only sizes, deltas and key lengths."""
    pos, end = 0, len(buf)
    min_ts, max_ts = 1 << 63, -(1 << 63)
    null_key = bad_offset = -1
    # Single-byte varints (small deltas, short keys) are decoded inline: this loop is per record.
    try:
        for i in range(count):
            b = buf[pos]
            if b < 0x80:
                size, pos = (b >> 1) ^ -(b & 1), pos + 1
            else:
                size, pos = read_varint(buf, pos)
            rec_end = pos + size
            if size < 0 or rec_end > end:
                raise InvalidRecordError(f"record size {size} runs past the batch")
            b = buf[pos + 1]
            if b < 0x80:
                ts_delta, pos = (b >> 1) ^ -(b & 1), pos + 2
            else:
                ts_delta, pos = read_varlong(buf, pos + 1)
            b = buf[pos]
            if b < 0x80:
                offset_delta, pos = (b >> 1) ^ -(b & 1), pos + 1
            else:
                offset_delta, pos = read_varint(buf, pos)
            b = buf[pos]
            if b < 0x80:
                key_len, pos = (b >> 1) ^ -(b & 1), pos + 1
            else:
                key_len, pos = read_varint(buf, pos)
            if key_len < -1 or pos + key_len > rec_end:
                raise InvalidRecordError(f"invalid key size {key_len}")
            ts = base_timestamp + ts_delta
            if ts < min_ts:
                min_ts = ts
            if ts > max_ts:
                max_ts = ts
            if key_len == -1 and null_key < 0:
                null_key = i
            if offset_delta != i and bad_offset < 0:
                bad_offset = i
            pos = rec_end
    except (VarintError, IndexError) as e:
        raise InvalidRecordError(f"malformed record: {e}") from e
    if pos != end:
        raise InvalidRecordError("incorrect declared batch size, records still remaining")
    if log_append_time is not None:
        min_ts = max_ts = log_append_time
    if count == 0:
        min_ts = max_ts = NO_TIMESTAMP
    return RecordsSummary(count, min_ts, max_ts, null_key, bad_offset)


class RecordsWalk(NamedTuple):
    """Where :func:`walk_records` stopped and what it saw (deltas relative to the batch header)."""

    pos: int  # end of the last complete record walked
    next_index: int  # records walked so far (the next record's index in the batch)
    min_ts_delta: int  # over the records walked; (1 << 63, -(1 << 63)) when none
    max_ts_delta: int
    null_keys: int  # records with a null key (compacted topics refuse them)
    bad_offset_index: int  # first record whose offsetDelta is not its index, or -1


def walk_records(
    buf: Buffer, pos: int, index: int, count: int, partial: bool = False,
    min_ts: int = 1 << 63, max_ts: int = -(1 << 63), null_keys: int = 0, bad_offset: int = -1,
) -> RecordsWalk:
    """Check the structure of records ``index`` .. ``count - 1`` starting at ``pos`` (Kafka's
    ``DefaultRecord.readFrom`` without building a record): every varint well formed, key/value/header
    lengths inside the record (``-1`` = null; other negatives are refused, where Java's reader would
    read them as null too), header keys non-null, the header count no larger than the bytes left, and
    the fields ending exactly where the record's length says. Values are skipped, never copied.

    With ``partial`` (a chunk of a decompressing stream), a record cut off by the end of ``buf``
    stops the walk and its start is returned as ``pos``; the caller appends the next chunk and calls
    again with the returned state. Without it, running off the end is an InvalidRecordError.
    This loop runs once per record of every produced batch: one- and two-byte varints (deltas and
    lengths below 8 KiB) are decoded inline, longer ones through ``protocol.varint``.
    """
    end = len(buf)
    try:
        while index < count:
            start = pos
            if pos >= end:
                if partial:
                    break
                raise InvalidRecordError("Incorrect declared batch size, premature EOF reached")
            b = buf[pos]
            if b < 0x80:
                size, pos = (b >> 1) ^ -(b & 1), pos + 1
            elif pos + 1 < end and buf[pos + 1] < 0x80:
                raw = (b & 0x7F) | (buf[pos + 1] << 7)
                size, pos = (raw >> 1) ^ -(raw & 1), pos + 2
            else:
                try:
                    size, pos = read_varint(buf, pos)
                except VarintError:
                    if partial and end - pos < 5:
                        pos = start
                        break
                    raise
            rec_end = pos + size
            if size < 6:  # attributes, timestampDelta, offsetDelta, key/value lengths, header count
                raise InvalidRecordError(f"Invalid record size {size}")
            if rec_end > end:
                if partial:
                    pos = start
                    break
                raise InvalidRecordError(
                    f"Invalid record size: expected {size} bytes in record payload, but instead the "
                    f"buffer has only {end - pos} remaining bytes.")
            b = buf[pos + 1]  # buf[pos] is the record's attributes byte: unused, any value
            if b < 0x80:
                ts_delta, pos = (b >> 1) ^ -(b & 1), pos + 2
            elif (b2 := buf[pos + 2]) < 0x80:
                raw = (b & 0x7F) | (b2 << 7)
                ts_delta, pos = (raw >> 1) ^ -(raw & 1), pos + 3
            else:
                ts_delta, pos = read_varlong(buf, pos + 1)
            if ts_delta < min_ts:
                min_ts = ts_delta
            if ts_delta > max_ts:
                max_ts = ts_delta
            b = buf[pos]
            if b < 0x80:
                if ((b >> 1) ^ -(b & 1)) != index and bad_offset < 0:
                    bad_offset = index
                pos += 1
            elif (b2 := buf[pos + 1]) < 0x80:
                raw = (b & 0x7F) | (b2 << 7)
                if ((raw >> 1) ^ -(raw & 1)) != index and bad_offset < 0:
                    bad_offset = index
                pos += 2
            else:
                offset_delta, pos = read_varint(buf, pos)
                if offset_delta != index and bad_offset < 0:
                    bad_offset = index
            b = buf[pos]
            if b < 0x80:
                n, pos = (b >> 1) ^ -(b & 1), pos + 1
            elif (b2 := buf[pos + 1]) < 0x80:
                raw = (b & 0x7F) | (b2 << 7)
                n, pos = (raw >> 1) ^ -(raw & 1), pos + 2
            else:
                n, pos = read_varint(buf, pos)
            if n < 0:
                if n != -1:
                    raise InvalidRecordError(f"Invalid key size {n}")
                null_keys += 1
            else:
                pos += n
            b = buf[pos]
            if b < 0x80:
                n, pos = (b >> 1) ^ -(b & 1), pos + 1
            elif (b2 := buf[pos + 1]) < 0x80:
                raw = (b & 0x7F) | (b2 << 7)
                n, pos = (raw >> 1) ^ -(raw & 1), pos + 2
            else:
                n, pos = read_varint(buf, pos)
            if n > 0:
                pos += n
            elif n < -1:
                raise InvalidRecordError(f"Invalid value size {n}")
            b = buf[pos]
            if b < 0x80:
                n, pos = (b >> 1) ^ -(b & 1), pos + 1
            elif (b2 := buf[pos + 1]) < 0x80:
                raw = (b & 0x7F) | (b2 << 7)
                n, pos = (raw >> 1) ^ -(raw & 1), pos + 2
            else:
                n, pos = read_varint(buf, pos)
            if n:
                if n < 0:
                    raise InvalidRecordError(f"Found invalid number of record headers {n}")
                if n > rec_end - pos:
                    raise InvalidRecordError(
                        f"Found invalid number of record headers. {n} is larger than the remaining size of the buffer")
                for _ in range(n):
                    hk, pos = read_varint(buf, pos)
                    if hk < 0:
                        raise InvalidRecordError(f"Invalid negative header key size {hk}")
                    hv, pos = read_varint(buf, pos + hk)
                    if hv > 0:
                        pos += hv
                    elif hv < -1:
                        raise InvalidRecordError(f"Invalid header value size {hv}")
                    if pos > rec_end:
                        break
            if pos != rec_end:
                raise InvalidRecordError(
                    f"Invalid record size: expected to read {size} bytes in record payload, but instead "
                    f"read {size + pos - rec_end}")
            index += 1
    except (VarintError, IndexError) as e:
        raise InvalidRecordError(f"Found invalid record structure: {e}") from e
    return RecordsWalk(pos, index, min_ts, max_ts, null_keys, bad_offset)


def walk_batch_records(buf: Buffer, pos: int, count: int) -> RecordsWalk:
    """:func:`walk_records` over all ``count`` records of an uncompressed batch (``buf`` ends where
    the batch ends): the produce path's walk, once per produced batch.

    With the compiled module (``kbroker/protocol/_speedups.c``) well-formed records are walked in C,
    about 30x faster than the Python loop (issue 17: that loop was a third of the broker's CPU under
    100-byte records). The C walk only ever answers for records it finds well formed; anything else
    (or a varint longer than it decodes) goes to :func:`walk_records`, which raises Kafka's error."""
    if _walk_compiled is not None:
        fast = _walk_compiled(buf, pos, count)
        if fast is not None:
            return RecordsWalk(*fast)
    return walk_records(buf, pos, 0, count)


class SimpleRecord(NamedTuple):
    value: bytes | None
    key: bytes | None = None
    timestamp: int = -1  # -1 means "now" when built
    headers: tuple[tuple[str, bytes | None], ...] = ()


def _encode_bytes(out: bytearray, data: bytes | None) -> None:
    if data is None:
        out += b"\x01"  # zig-zag(-1)
    else:
        out += encode_varint(len(data))
        out += data


def encode_record(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[str, bytes | None]] = (),
) -> bytes:
    """One DefaultRecord (length-prefixed)."""
    body = bytearray(b"\x00")  # record attributes: unused, always 0
    body += encode_varlong(timestamp_delta)
    body += encode_varint(offset_delta)
    _encode_bytes(body, key)
    _encode_bytes(body, value)
    body += encode_varint(len(headers))
    for hkey, hval in headers:
        _encode_bytes(body, hkey.encode("utf-8", "surrogateescape"))
        _encode_bytes(body, hval)
    return encode_varint(len(body)) + body


def parse_control_record_type(key: bytes | None) -> ControlRecordType | int:
    """The type in a control record key (version int16, type int16). Unknown types come back as int."""
    if key is None or len(key) < _CONTROL_KEY.size:
        raise InvalidRecordError("control record key is missing or too short")
    version, ctype = _CONTROL_KEY.unpack_from(key)
    if version < 0:
        raise InvalidRecordError(f"invalid control record key version {version}")
    try:
        return ControlRecordType(ctype)
    except ValueError:
        return ctype


def parse_end_txn_marker(value: bytes | None) -> int:
    """The coordinator epoch of an end-transaction marker value (version int16, epoch int32)."""
    if value is None or len(value) < _END_TXN_VALUE.size:
        raise InvalidRecordError("end transaction marker value is missing or too short")
    version, coordinator_epoch = _END_TXN_VALUE.unpack_from(value)
    if version < 0:
        raise InvalidRecordError(f"invalid end transaction marker version {version}")
    return coordinator_epoch


def encode_control_key(control_type: int) -> bytes:
    """A control record key: version int16 (0), type int16."""
    return _CONTROL_KEY.pack(0, control_type)


def encode_end_txn_marker(coordinator_epoch: int) -> bytes:
    """An end-transaction marker value (EndTxnMarker v0): version int16 (0), coordinatorEpoch int32."""
    return _END_TXN_VALUE.pack(0, coordinator_epoch)
