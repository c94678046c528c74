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
