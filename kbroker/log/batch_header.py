"""Fast decoding of the fixed 61-byte RecordBatch v2 header for the storage engine's scans.

Owns only the header layout the log needs while scanning files (offsets, sizes, timestamps,
producer fields). Everything else about record batches (CRC, patching, records, compression)
lives in ``kbroker.protocol.records``. One precompiled ``struct.Struct`` unpacks a header in one
call, which is what keeps index rebuilds and producer-state replays cheap.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

__all__ = ["HEADER", "HEADER_SIZE", "LOG_OVERHEAD", "BatchHeader", "parse_header", "PREFIX", "PREFIX_SIZE"]

LOG_OVERHEAD = 12  # baseOffset int64 + batchLength int32
HEADER_SIZE = 61  # RECORD_BATCH_OVERHEAD
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
# baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta,
# baseTimestamp, maxTimestamp, producerId, producerEpoch, baseSequence, recordsCount
HEADER = struct.Struct(">qiibIhiqqqhii")
# The part of the header the read path needs to map an offset to a position (through lastOffsetDelta).
PREFIX = struct.Struct(">qiibIhi")
PREFIX_SIZE = PREFIX.size  # 27
BASE_OFFSET = struct.Struct(">q")
INT32 = struct.Struct(">i")

TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
COMPRESSION_MASK = 0x07
NO_SEQUENCE = -1
NO_PRODUCER_ID = -1


class BatchHeader(NamedTuple):
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
        # Sequences wrap at Int32.MAX like Kafka's DefaultRecordBatch.incrementSequence.
        s = self.base_sequence + self.last_offset_delta
        return s - 2147483648 if s > 2147483647 else s

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def log_append_time(self) -> bool:
        return bool(self.attributes & TIMESTAMP_TYPE_MASK)


def parse_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    return BatchHeader._make(HEADER.unpack_from(buf, pos))
