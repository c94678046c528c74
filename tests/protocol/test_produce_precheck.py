"""Produce's header-only checks (``ProduceRequest.validateRecords`` over ``ByteBufferLogInputStream``'s
framing) give Kafka's error for each framing: issue 19 finding 10 (a magic-1 message set in Produce
v3+ is INVALID_RECORD, not CORRUPT_MESSAGE)."""

from __future__ import annotations

import struct
import zlib

import pytest

from kbroker.api.produce import _precheck
from kbroker.protocol.compression import CompressionType
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.records import SimpleRecord, build_batch


def legacy(magic: int, value: bytes = b"hello") -> bytes:
    body = struct.pack(">bb", magic, 0) + (struct.pack(">q", 0) if magic == 1 else b"")
    body += struct.pack(">i", -1) + struct.pack(">i", len(value)) + value
    msg = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", 0, len(msg)) + msg


@pytest.mark.parametrize("magic", [0, 1])
def test_legacy_message_set_is_invalid_record(magic: int) -> None:
    assert _precheck(legacy(magic), 9) == ErrorCode.INVALID_RECORD
    assert _precheck(legacy(magic, b""), 3) == ErrorCode.INVALID_RECORD


def test_framing_errors() -> None:
    good = bytes(build_batch([SimpleRecord(b"v")]))
    assert _precheck(good, 9) == ErrorCode.NONE
    assert _precheck(b"", 9) == ErrorCode.INVALID_RECORD
    # size field below LegacyRecord's 14-byte minimum
    assert _precheck(struct.pack(">qi", 0, 13) + bytes(13), 9) == ErrorCode.CORRUPT_MESSAGE
    # magic outside 0-2: "Invalid magic found in record"
    bad_magic = bytearray(good)
    bad_magic[16] = 3
    assert _precheck(bytes(bad_magic), 9) == ErrorCode.CORRUPT_MESSAGE
    # magic 2 but shorter than the 61-byte header
    short = struct.pack(">qiib", 0, 20, 0, 2) + bytes(16)
    assert _precheck(short, 9) == ErrorCode.CORRUPT_MESSAGE
    # a batch cut short: no complete batch at all
    assert _precheck(good[:-1], 9) == ErrorCode.INVALID_RECORD
    # two batches
    assert _precheck(good + good, 9) == ErrorCode.INVALID_RECORD
    zstd = bytes(build_batch([SimpleRecord(b"v")], compression=CompressionType.ZSTD))
    assert _precheck(zstd, 6) == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    assert _precheck(zstd, 7) == ErrorCode.NONE


def _reference(records: bytes, version: int) -> ErrorCode:
    """The framing checks one after another, as ``ProduceRequest.validateRecords`` makes them (the
    handler reads the usual batch's fields in one go, then words any other framing through this order)."""
    n = len(records)
    if n < 12:
        return ErrorCode.INVALID_RECORD
    (length,) = struct.unpack_from(">i", records, 8)
    if length < 14:
        return ErrorCode.CORRUPT_MESSAGE
    if n < 17 or length + 12 > n:
        return ErrorCode.INVALID_RECORD
    magic = struct.unpack_from(">b", records, 16)[0]
    if magic < 0 or magic > 2:
        return ErrorCode.CORRUPT_MESSAGE
    if magic != 2:
        return ErrorCode.INVALID_RECORD
    if length + 12 < 61:
        return ErrorCode.CORRUPT_MESSAGE
    if length + 12 != n:
        return ErrorCode.INVALID_RECORD
    (attributes,) = struct.unpack_from(">h", records, 21)
    if attributes & 0x07 == CompressionType.ZSTD and version < 7:
        return ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    return ErrorCode.NONE


def test_random_framings_get_the_reference_answer() -> None:
    """Truncations, extensions, size fields and magics around every boundary of the framing checks."""
    import random

    rng = random.Random(17)
    good = bytes(build_batch([SimpleRecord(b"v" * 40)]))
    seen = set()
    for _ in range(3000):
        b = bytearray(good)
        what = rng.randrange(5)
        if what == 0:
            b = b[:rng.randrange(0, len(b) + 1)]
        elif what == 1:
            b += bytes(rng.randrange(1, 80))
        elif what == 2:
            b[8:12] = struct.pack(">i", rng.choice((-1, 0, 13, 14, 48, 49, len(good) - 13, len(good) - 12,
                                                    len(good) - 11, 1 << 20)))
        elif what == 3:
            b[16] = rng.choice((0, 1, 2, 3, 0x7F, 0x80, 0xFF))
        else:
            b[22] = (b[22] & ~0x07) | rng.randrange(8)  # the codec bits
        version = rng.choice((3, 6, 7, 9))
        expected = _reference(bytes(b), version)
        assert _precheck(bytes(b), version) == expected, (what, bytes(b[:24]).hex(), version)
        assert _precheck(memoryview(b), version) == expected
        seen.add(expected)
    assert seen == {ErrorCode.NONE, ErrorCode.INVALID_RECORD, ErrorCode.CORRUPT_MESSAGE,
                    ErrorCode.UNSUPPORTED_COMPRESSION_TYPE}
