"""Tests for kbroker.protocol.compression: every codec as Kafka clients write it, plus bomb caps."""

from __future__ import annotations

import gzip
import os
import struct
import zlib

import cramjam
import lz4.frame
import pytest
import zstandard

from kbroker.protocol.compression import (
    XERIAL_BLOCK_SIZE,
    XERIAL_MAGIC,
    CompressionError,
    CompressionType,
    DecompressionBombError,
    UnsupportedCodecError,
    compress,
    decompress,
    lz4_header_checksum_position,
    lz4_legacy_frame,
    xxh32,
)
from kbroker.protocol.errors import ErrorCode

CODECS = [c for c in CompressionType if c != CompressionType.NONE]
PAYLOADS = {
    "empty": b"",
    "tiny": b"a",
    "random": os.urandom(70_000),
    "text": b"The quick brown fox jumps over the lazy dog. " * 4000,
}


def test_names() -> None:
    assert [c.kafka_name for c in CompressionType] == ["none", "gzip", "snappy", "lz4", "zstd"]
    assert CompressionType.for_name("ZSTD") is CompressionType.ZSTD
    assert CompressionType.for_name("uncompressed") is CompressionType.NONE  # topic config spelling
    with pytest.raises(ValueError):
        CompressionType.for_name("producer")
    with pytest.raises(ValueError):
        CompressionType.for_name("brotli")
    with pytest.raises(UnsupportedCodecError):
        compress(5, b"x")
    with pytest.raises(UnsupportedCodecError):
        decompress(7, b"x")


@pytest.mark.parametrize("codec", list(CompressionType), ids=lambda c: c.kafka_name)
@pytest.mark.parametrize("name", sorted(PAYLOADS))
def test_round_trip(codec: CompressionType, name: str) -> None:
    data = PAYLOADS[name]
    packed = compress(codec, data)
    assert decompress(codec, packed) == data
    assert decompress(codec, memoryview(bytearray(packed))) == data
    if name == "text" and codec != CompressionType.NONE:
        assert len(packed) < len(data) // 10


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.kafka_name)
def test_levels(codec: CompressionType) -> None:
    data = PAYLOADS["text"]
    level = {CompressionType.GZIP: 9, CompressionType.LZ4: 9, CompressionType.ZSTD: 19}.get(codec)
    assert decompress(codec, compress(codec, data, level=level)) == data


# --- gzip --------------------------------------------------------------------------------------


def test_gzip_wrapper_and_variants() -> None:
    data = PAYLOADS["text"]
    packed = compress(CompressionType.GZIP, data)
    assert packed[:2] == b"\x1f\x8b"  # gzip wrapper, as java.util.zip.GZIPOutputStream writes
    assert gzip.decompress(packed) == data
    assert decompress(CompressionType.GZIP, gzip.compress(data[:100]) + gzip.compress(data[100:])) == data
    assert decompress(CompressionType.GZIP, zlib.compress(data)) == data  # zlib wrapper tolerated
    with pytest.raises(CompressionError):
        decompress(CompressionType.GZIP, packed[:-10])
    with pytest.raises(CompressionError):
        decompress(CompressionType.GZIP, b"\x1f\x8b garbage")


# --- snappy ------------------------------------------------------------------------------------


def _xerial_fixture(data: bytes, block: int) -> bytes:
    """The xerial SnappyOutputStream format, built from its documented layout."""
    out = [XERIAL_MAGIC, struct.pack(">ii", 1, 1)]
    for i in range(0, len(data), block):
        chunk = bytes(cramjam.snappy.compress_raw(data[i : i + block]))
        out += [struct.pack(">i", len(chunk)), chunk]
    return b"".join(out)


def test_snappy_xerial_as_java_writes_it() -> None:
    data = PAYLOADS["text"] + PAYLOADS["random"]
    for block in (XERIAL_BLOCK_SIZE, 1024, 200_000):
        assert decompress(CompressionType.SNAPPY, _xerial_fixture(data, block)) == data
    # An old snappy-java wrote version/compat as 1/1; the reader must not insist on either.
    other_version = bytearray(_xerial_fixture(data, XERIAL_BLOCK_SIZE))
    other_version[8:16] = struct.pack(">ii", 2, 1)
    assert decompress(CompressionType.SNAPPY, other_version) == data


def test_snappy_our_output_is_xerial_with_32k_blocks() -> None:
    data = PAYLOADS["text"] + PAYLOADS["random"]
    packed = compress(CompressionType.SNAPPY, data)
    assert packed[:8] == XERIAL_MAGIC and struct.unpack_from(">ii", packed, 8) == (1, 1)
    pos, sizes = 16, []
    while pos < len(packed):
        (n,) = struct.unpack_from(">i", packed, pos)
        sizes.append(len(cramjam.snappy.decompress_raw(packed[pos + 4 : pos + 4 + n])))
        pos += 4 + n
    assert pos == len(packed)
    assert all(s == XERIAL_BLOCK_SIZE for s in sizes[:-1]) and 0 < sizes[-1] <= XERIAL_BLOCK_SIZE
    assert sum(sizes) == len(data)


def test_snappy_interop_with_kafka_python_codec() -> None:
    codec = pytest.importorskip("kafka.codec", reason="kafka-python is a test dependency")
    data = PAYLOADS["text"]
    theirs = codec.snappy_encode(data, xerial_compatible=True, xerial_blocksize=XERIAL_BLOCK_SIZE)
    assert theirs[:8] == XERIAL_MAGIC
    assert decompress(CompressionType.SNAPPY, theirs) == data
    assert codec.snappy_decode(compress(CompressionType.SNAPPY, data)) == data


def test_snappy_raw_as_librdkafka_writes_it() -> None:
    data = PAYLOADS["text"]
    assert decompress(CompressionType.SNAPPY, bytes(cramjam.snappy.compress_raw(data))) == data


def test_snappy_corrupt() -> None:
    packed = compress(CompressionType.SNAPPY, PAYLOADS["text"])
    with pytest.raises(CompressionError):
        decompress(CompressionType.SNAPPY, packed[:-3])  # block length runs past the end
    with pytest.raises(CompressionError):
        decompress(CompressionType.SNAPPY, packed[:14])  # truncated header
    with pytest.raises(CompressionError):
        decompress(CompressionType.SNAPPY, b"\x05\xff\xff\xff")


# --- lz4 ---------------------------------------------------------------------------------------


def test_xxh32_matches_lz4_content_checksum() -> None:
    for n in (0, 1, 3, 4, 15, 16, 17, 31, 32, 100):
        data = os.urandom(n)
        frame = lz4.frame.compress(data, content_checksum=True)
        assert xxh32(data) == struct.unpack("<I", frame[-4:])[0], n


def test_lz4_frame_as_kafka_writes_it() -> None:
    data = PAYLOADS["text"]
    packed = compress(CompressionType.LZ4, data)
    assert packed[:4] == b"\x04\x22\x4d\x18"
    # KafkaLZ4BlockOutputStream: FLG = version 01 + block independence; BD = 64 KiB max block.
    assert packed[4] == 0x60 and packed[5] == 0x40
    hc = lz4_header_checksum_position(packed)
    assert hc == 6 and packed[hc] == (xxh32(packed[4:6]) >> 8) & 0xFF
    assert lz4.frame.decompress(packed) == data
    # Frames from other writers (linked blocks, content size, checksums) decode too.
    other = lz4.frame.compress(data, block_linked=True, store_size=True, content_checksum=True)
    assert decompress(CompressionType.LZ4, other) == data


def test_lz4_legacy_header_checksum_accepted() -> None:
    """KAFKA-3160: pre-KIP-57 Java clients computed HC over magic + descriptor; we accept that."""
    data = PAYLOADS["text"]
    for frame in (compress(CompressionType.LZ4, data), lz4.frame.compress(data, store_size=True)):
        legacy = lz4_legacy_frame(frame)
        hc = lz4_header_checksum_position(frame)
        assert legacy[hc] != frame[hc]  # the two checksums differ for these headers
        with pytest.raises(RuntimeError):
            lz4.frame.decompress(legacy)  # the library alone rejects it
        assert decompress(CompressionType.LZ4, legacy) == data
        neither = bytearray(frame)
        neither[hc] = next(v for v in range(256) if v not in (frame[hc], legacy[hc]))
        with pytest.raises(CompressionError, match="checksum"):
            decompress(CompressionType.LZ4, neither)


def test_lz4_corrupt() -> None:
    packed = compress(CompressionType.LZ4, PAYLOADS["random"])
    with pytest.raises(CompressionError):
        decompress(CompressionType.LZ4, packed[:-20])
    with pytest.raises(CompressionError):
        decompress(CompressionType.LZ4, b"\x00\x01\x02\x03garbage")


# --- zstd --------------------------------------------------------------------------------------


def test_zstd_streaming_frames_without_content_size() -> None:
    data = PAYLOADS["text"]
    cobj = zstandard.ZstdCompressor().compressobj()
    streamed = cobj.compress(data) + cobj.flush()
    assert zstandard.frame_content_size(streamed) == -1  # what Java's streaming encoder writes
    assert decompress(CompressionType.ZSTD, streamed) == data
    two = compress(CompressionType.ZSTD, data[:1000]) + compress(CompressionType.ZSTD, data[1000:])
    assert decompress(CompressionType.ZSTD, two) == data
    with pytest.raises(CompressionError):
        decompress(CompressionType.ZSTD, streamed[:-5])
    with pytest.raises(CompressionError):
        decompress(CompressionType.ZSTD, b"not zstd at all")


# --- decompression bombs -----------------------------------------------------------------------


@pytest.mark.parametrize("codec", list(CompressionType), ids=lambda c: c.kafka_name)
def test_decompression_bomb_capped(codec: CompressionType) -> None:
    zeros = b"\x00" * 5_000_000
    packed = compress(codec, zeros)
    with pytest.raises(DecompressionBombError) as ei:
        decompress(codec, packed, max_size=1_000_000)
    assert ei.value.error_code == ErrorCode.RECORD_LIST_TOO_LARGE
    assert decompress(codec, packed, max_size=5_000_000) == zeros


def test_bomb_caps_without_declared_sizes() -> None:
    zeros = b"\x00" * 3_000_000
    cobj = zstandard.ZstdCompressor().compressobj()
    streamed = cobj.compress(zeros) + cobj.flush()
    with pytest.raises(DecompressionBombError):
        decompress(CompressionType.ZSTD, streamed, max_size=2_999_999)
    with pytest.raises(DecompressionBombError):
        decompress(CompressionType.LZ4, lz4.frame.compress(zeros, store_size=False), max_size=100_000)
    # Raw snappy declares its length up front: refused before decompressing.
    with pytest.raises(DecompressionBombError):
        decompress(CompressionType.SNAPPY, bytes(cramjam.snappy.compress_raw(zeros)), max_size=10)


def test_lz4_old_kafka_frames_from_kafka_python(monkeypatch: pytest.MonkeyPatch) -> None:
    """kafka-python's lz4_encode_old_kafka writes the KAFKA-3160 header checksum; we read it.

    kafka-python needs the `xxhash` package for it; we stand in our own XXH32 (checked against
    lz4's content checksum in test_xxh32_matches_lz4_content_checksum) instead of installing it.
    """
    codec = pytest.importorskip("kafka.codec", reason="kafka-python is a test dependency")

    class _Digest:
        def __init__(self, data: bytes) -> None:
            self._h = xxh32(data)

        def digest(self) -> bytes:
            return struct.pack(">I", self._h)

    class _XXHash:
        xxh32 = _Digest

    monkeypatch.setattr(codec, "xxhash", _XXHash)
    data = PAYLOADS["text"]
    old = codec.lz4_encode_old_kafka(data)
    hc = lz4_header_checksum_position(old)
    assert old[hc] == (xxh32(old[:hc]) >> 8) & 0xFF != (xxh32(old[4:hc]) >> 8) & 0xFF
    assert decompress(CompressionType.LZ4, old) == data
    assert codec.lz4_decode_old_kafka(lz4_legacy_frame(compress(CompressionType.LZ4, data))) == data
