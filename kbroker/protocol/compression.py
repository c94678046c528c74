"""Record-batch compression codecs as Kafka's clients write them: gzip, snappy, lz4, zstd.

Owns the byte formats inside a compressed v2 record batch (everything after ``recordsCount``).
Sans-IO: pure functions over bytes-like objects. Imports no other kbroker package besides
``protocol.errors``.

Library choices (and why):

- gzip: the standard library's ``zlib`` with the gzip wrapper (wbits=31 to write, 47 to read so a
  zlib-wrapped stream from an odd client still decodes). ``max_length`` gives the bomb guard for free.
- snappy: ``cramjam`` (raw snappy in Rust, ships wheels, no C library at install time;
  python-snappy itself is a thin layer over cramjam since 0.7). The Java client writes the *xerial*
  framing (``SnappyOutputStream``: an 8-byte magic ``\\x82SNAPPY\\x00``, int32 version, int32
  compatible version, then int32-length-prefixed raw snappy blocks of at most 32 KiB uncompressed);
  librdkafka writes raw snappy. We read both and write xerial, which every client reads
  (snappy-java's ``SnappyInputStream`` also falls back to raw, so the choice is about Java readers
  older than that fallback).
- lz4: the ``lz4`` package's frame API, which exposes ``max_length`` on its streaming
  decompressor. Kafka uses the LZ4 *frame* format (KIP-57). Before KIP-57 (KAFKA-3160), Kafka's Java
  client computed the frame header checksum (HC) over the magic number as well as the frame
  descriptor. Those frames only ever appeared inside magic v0/v1 message sets, but a v2 batch
  rewritten by an old tool may still carry one, so :func:`decompress` accepts an HC that is either
  correct or equal to the legacy (magic-inclusive) value, and rejects anything else. We always write
  the correct HC, 64 KiB independent blocks, no content size and no content checksum -- exactly
  what ``KafkaLZ4BlockOutputStream`` writes.
- zstd: ``zstandard`` (the reference C library's binding). Kafka's Java producer writes frames
  through a streaming encoder, so the frame header carries no content size; we decompress through
  a streaming reader that works either way and can read concatenated frames.

The produce path streams: :func:`iter_decompressed` yields the output in chunks (the validator walks
each chunk and drops it) and :class:`StreamCompressor` recompresses chunk by chunk, so a batch is
never held decompressed. A snappy block that declares more than 24x its size is corrupt (snappy
cannot expand more than ~21x), so a lying length preamble is not mistaken for a big batch.

Every ``decompress`` takes ``max_size``: output beyond it raises :class:`DecompressionBombError`
before the whole output is materialised (for snappy the declared length is checked first).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from enum import IntEnum
from typing import Any

import cramjam
import lz4.frame
import zstandard

from kbroker.protocol.errors import ErrorCode, KafkaError

#: Default cap on the decompressed size of one batch's records section.
DEFAULT_MAX_DECOMPRESSED_SIZE = 256 * 1024 * 1024


class CompressionType(IntEnum):
    """The compression codec in bits 0-2 of a v2 batch's attributes."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @property
    def kafka_name(self) -> str:
        """Kafka's config name (``compression.type``): none, gzip, snappy, lz4, zstd."""
        return self.name.lower()

    @classmethod
    def for_name(cls, name: str) -> CompressionType:
        """Parse a codec name (case-insensitive): the producer's ``none`` or the topic/broker
        config's ``uncompressed`` both mean NONE (``producer`` is not a codec: callers handle it)."""
        key = name.strip().upper()
        try:
            return cls.NONE if key == "UNCOMPRESSED" else cls[key]
        except KeyError:
            raise ValueError(f"unknown compression type {name!r}") from None


class CompressionError(KafkaError):
    """The compressed bytes could not be decoded (a corrupt batch)."""

    error_code = ErrorCode.CORRUPT_MESSAGE


class UnsupportedCodecError(CompressionError):
    """Attribute bits name a codec Kafka does not define (5-7)."""


class DecompressionBombError(CompressionError):
    """Decompressed output would exceed the caller's ``max_size``."""

    error_code = ErrorCode.RECORD_LIST_TOO_LARGE


Buffer = bytes | bytearray | memoryview

# ---------------------------------------------------------------------------------------------
# gzip


def _gzip_compress(data: Buffer, level: int | None) -> bytes:
    c = zlib.compressobj(6 if level is None or level < 0 else level, zlib.DEFLATED, 31)
    return c.compress(data) + c.flush()


def _gzip_decompress(data: Buffer, max_size: int) -> bytearray:
    out = bytearray()
    rest: Buffer = data
    # Java's GZIPInputStream reads concatenated gzip members, so we do too.
    while True:
        d = zlib.decompressobj(47)
        try:
            out += d.decompress(rest, max_size + 1 - len(out))
        except zlib.error as e:
            raise CompressionError(f"gzip: {e}") from e
        if len(out) > max_size:
            raise DecompressionBombError(f"gzip output exceeds {max_size} bytes")
        if not d.eof:
            raise CompressionError("gzip: truncated stream")
        rest = d.unused_data
        if not rest:
            return out


# ---------------------------------------------------------------------------------------------
# snappy

XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = struct.Struct(">8sii")  # magic, version, compatible version
XERIAL_BLOCK_SIZE = 32 * 1024  # snappy-java SnappyOutputStream's default block size
_INT32 = struct.Struct(">i")


def _raw_snappy_length(block: Buffer) -> int:
    """The uncompressed length a raw snappy block declares in its varint preamble."""
    value = shift = 0
    for i in range(min(len(block), 5)):
        b = block[i]
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value
        shift += 7
    raise CompressionError("snappy: bad length preamble")


#: Snappy cannot expand more than ~21x (a 3-byte copy tag yields at most 64 bytes): a block that
#: declares more than this ratio is corrupt, not merely large.
_SNAPPY_MAX_RATIO = 24


def _raw_snappy_decompress(block: Buffer, budget: int) -> bytes:
    declared = _raw_snappy_length(block)
    if declared > _SNAPPY_MAX_RATIO * len(block) + 64:
        raise CompressionError(f"snappy: a {len(block)}-byte block cannot expand to {declared} bytes")
    if declared > budget:
        raise DecompressionBombError("snappy output exceeds the size cap")
    try:
        return bytes(cramjam.snappy.decompress_raw(block))
    except cramjam.DecompressionError as e:
        raise CompressionError(f"snappy: {e}") from e


def _snappy_compress(data: Buffer) -> bytes:
    mv = memoryview(data)
    parts = [XERIAL_HEADER.pack(XERIAL_MAGIC, 1, 1)]
    for start in range(0, len(mv), XERIAL_BLOCK_SIZE):
        block = bytes(cramjam.snappy.compress_raw(mv[start : start + XERIAL_BLOCK_SIZE]))
        parts.append(_INT32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_decompress(data: Buffer, max_size: int) -> bytes | bytearray:
    mv = memoryview(data)
    if bytes(mv[:8]) != XERIAL_MAGIC:
        return _raw_snappy_decompress(mv, max_size)
    if len(mv) < XERIAL_HEADER.size:
        raise CompressionError("snappy: truncated xerial header")
    # First pass over the block headers: sizes are declared, so check the cap and allocate once.
    blocks: list[tuple[memoryview, int]] = []
    total = 0
    pos = XERIAL_HEADER.size
    end = len(mv)
    while pos < end:
        if pos + 4 > end:
            raise CompressionError("snappy: truncated xerial block length")
        (n,) = _INT32.unpack_from(mv, pos)
        pos += 4
        if n < 0 or pos + n > end:
            raise CompressionError("snappy: truncated xerial block")
        block = mv[pos : pos + n]
        size = _raw_snappy_length(block)
        if size > _SNAPPY_MAX_RATIO * n + 64:
            raise CompressionError(f"snappy: a {n}-byte block cannot expand to {size} bytes")
        total += size
        if total > max_size:
            raise DecompressionBombError(f"snappy output exceeds {max_size} bytes")
        blocks.append((block, size))
        pos += n
    out = bytearray(total)
    omv = memoryview(out)
    at = 0
    try:
        for block, size in blocks:
            if cramjam.snappy.decompress_raw_into(block, omv[at : at + size]) != size:
                raise CompressionError("snappy: block shorter than its declared length")
            at += size
    except cramjam.DecompressionError as e:
        raise CompressionError(f"snappy: {e}") from e
    return out


# ---------------------------------------------------------------------------------------------
# lz4

LZ4_MAGIC = b"\x04\x22\x4d\x18"
_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M32 = 0xFFFFFFFF
_U32LE = struct.Struct("<I")


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def xxh32(data: Buffer, seed: int = 0) -> int:
    """XXH32 of a short input (LZ4 frame descriptors are at most 19 bytes, so pure Python is fine)."""
    mv = memoryview(data)
    n = len(mv)
    pos = 0
    if n >= 16:
        v = [(seed + _P1 + _P2) & _M32, (seed + _P2) & _M32, seed & _M32, (seed - _P1) & _M32]
        while pos + 16 <= n:
            for i in range(4):
                lane = _U32LE.unpack_from(mv, pos + 4 * i)[0]
                v[i] = (_rotl((v[i] + lane * _P2) & _M32, 13) * _P1) & _M32
            pos += 16
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & _M32
    else:
        h = (seed + _P5) & _M32
    h = (h + n) & _M32
    while pos + 4 <= n:
        h = (_rotl((h + _U32LE.unpack_from(mv, pos)[0] * _P3) & _M32, 17) * _P4) & _M32
        pos += 4
    while pos < n:
        h = (_rotl((h + mv[pos] * _P5) & _M32, 11) * _P1) & _M32
        pos += 1
    h ^= h >> 15
    h = (h * _P2) & _M32
    h ^= h >> 13
    h = (h * _P3) & _M32
    return h ^ (h >> 16)


def lz4_header_checksum_position(frame: Buffer) -> int:
    """Offset of the HC byte in an LZ4 frame header (after magic, FLG, BD and optional fields)."""
    if len(frame) < 7 or bytes(frame[:4]) != LZ4_MAGIC:
        raise CompressionError("lz4: bad frame magic")
    flg = frame[4]
    pos = 6 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0)
    if len(frame) <= pos:
        raise CompressionError("lz4: truncated frame header")
    return pos


def lz4_legacy_frame(frame: Buffer) -> bytes:
    """Rewrite a frame's HC the way pre-KIP-57 Kafka did (over magic + descriptor). For tests."""
    out = bytearray(frame)
    hc = lz4_header_checksum_position(out)
    out[hc] = (xxh32(out[:hc]) >> 8) & 0xFF
    return bytes(out)


def _lz4_compress(data: Buffer, level: int | None) -> bytes:
    return lz4.frame.compress(
        data,
        compression_level=0 if level is None else level,
        block_size=lz4.frame.BLOCKSIZE_MAX64KB,
        block_linked=False,
        content_checksum=False,
        store_size=False,
    )


def _lz4_decompress(data: Buffer, max_size: int) -> bytes:
    frame: Buffer = data
    hc = lz4_header_checksum_position(frame)
    correct = (xxh32(memoryview(frame)[4:hc]) >> 8) & 0xFF
    if frame[hc] != correct:
        legacy = (xxh32(memoryview(frame)[:hc]) >> 8) & 0xFF
        if frame[hc] != legacy:
            raise CompressionError("lz4: frame header checksum mismatch")
        # KAFKA-3160: accept the magic-inclusive HC; patch a copy so the library accepts it.
        patched = bytearray(frame)
        patched[hc] = correct
        frame = patched
    d = lz4.frame.LZ4FrameDecompressor()
    try:
        out = d.decompress(frame, max_length=max_size + 1)
    except RuntimeError as e:
        raise CompressionError(f"lz4: {e}") from e
    if len(out) > max_size:
        raise DecompressionBombError(f"lz4 output exceeds {max_size} bytes")
    if not d.eof:
        raise CompressionError("lz4: truncated frame")
    return out


# ---------------------------------------------------------------------------------------------
# zstd

_ZSTD_CHUNK = 1 << 20
_zstd_dctx = zstandard.ZstdDecompressor()


_ZSTD_MAGIC = 0xFD2FB528
_U32LE_ZSTD = struct.Struct("<I")


def _zstd_frames_complete(data: Buffer) -> bool:
    """Walk frame and block headers: True when ``data`` is whole frames, nothing cut short.

    The streaming reader returns silently at the end of a truncated input; this O(blocks) walk is
    how we notice.
    """
    mv = memoryview(data)
    n = len(mv)
    pos = 0
    while pos < n:
        if pos + 8 > n:
            return False
        magic = _U32LE_ZSTD.unpack_from(mv, pos)[0]
        if magic & 0xFFFFFFF0 == 0x184D2A50:  # skippable frame
            pos += 8 + _U32LE_ZSTD.unpack_from(mv, pos + 4)[0]
            continue
        if magic != _ZSTD_MAGIC:
            return False
        has_checksum = mv[pos + 4] & 0x04
        pos += zstandard.frame_header_size(mv[pos : pos + 18])
        while True:
            if pos + 3 > n:
                return False
            header = mv[pos] | mv[pos + 1] << 8 | mv[pos + 2] << 16
            block_type = (header >> 1) & 3
            pos += 3 + (1 if block_type == 1 else header >> 3)
            if block_type == 3:
                return False
            if header & 1:
                break
        if has_checksum:
            pos += 4
    return pos == n


def _zstd_compress(data: Buffer, level: int | None) -> bytes:
    return zstandard.ZstdCompressor(level=3 if level is None else level).compress(data)


def _zstd_decompress(data: Buffer, max_size: int) -> bytearray:
    try:
        size = zstandard.frame_content_size(data)
    except zstandard.ZstdError as e:
        raise CompressionError(f"zstd: {e}") from e
    if size > max_size:
        raise DecompressionBombError(f"zstd frame declares {size} bytes, over the {max_size} cap")
    out = bytearray()
    # A stream reader handles frames without a content size (Java's streaming encoder) and
    # concatenated frames; reading in bounded chunks keeps a bomb from allocating past the cap.
    try:
        with _zstd_dctx.stream_reader(data, read_across_frames=True) as reader:
            chunk = size + 1 if size >= 0 else _ZSTD_CHUNK
            while True:
                got = reader.read(min(chunk, max_size + 1 - len(out)))
                if not got:
                    break
                out += got
                if len(out) > max_size:
                    raise DecompressionBombError(f"zstd output exceeds {max_size} bytes")
    except zstandard.ZstdError as e:
        raise CompressionError(f"zstd: {e}") from e
    if not _zstd_frames_complete(data):
        raise CompressionError("zstd: truncated or malformed frame")
    return out


# ---------------------------------------------------------------------------------------------


#: Output chunk of :func:`iter_decompressed`: what one step of a streaming validation holds.
STREAM_CHUNK = 256 * 1024


def _gzip_stream(data: Buffer, max_size: int, chunk: int) -> Iterator[bytes]:
    rest: Buffer = data
    total = 0
    while True:  # concatenated members, as Java's GZIPInputStream reads them
        d = zlib.decompressobj(47)
        pending: Buffer = rest
        while not d.eof:
            try:
                out = d.decompress(pending, chunk)
            except zlib.error as e:
                raise CompressionError(f"gzip: {e}") from e
            pending = d.unconsumed_tail
            if out:
                total += len(out)
                if total > max_size:
                    raise DecompressionBombError(f"gzip output exceeds {max_size} bytes")
                yield out
            elif not pending:
                raise CompressionError("gzip: truncated stream")
        rest = d.unused_data
        if not rest:
            return


def _zstd_stream(data: Buffer, max_size: int, chunk: int) -> Iterator[bytes]:
    try:
        size = zstandard.frame_content_size(data)
    except zstandard.ZstdError as e:
        raise CompressionError(f"zstd: {e}") from e
    if size > max_size:
        raise DecompressionBombError(f"zstd frame declares {size} bytes, over the {max_size} cap")
    if not _zstd_frames_complete(data):
        raise CompressionError("zstd: truncated or malformed frame")
    total = 0
    try:
        with _zstd_dctx.stream_reader(data, read_across_frames=True) as reader:
            while True:
                got = reader.read(chunk)
                if not got:
                    return
                total += len(got)
                if total > max_size:
                    raise DecompressionBombError(f"zstd output exceeds {max_size} bytes")
                yield got
    except zstandard.ZstdError as e:
        raise CompressionError(f"zstd: {e}") from e


def _lz4_stream(data: Buffer, max_size: int, chunk: int) -> Iterator[bytes]:
    frame: Buffer = data
    hc = lz4_header_checksum_position(frame)
    correct = (xxh32(memoryview(frame)[4:hc]) >> 8) & 0xFF
    if frame[hc] != correct:
        if frame[hc] != (xxh32(memoryview(frame)[:hc]) >> 8) & 0xFF:
            raise CompressionError("lz4: frame header checksum mismatch")
        patched = bytearray(frame)  # KAFKA-3160's magic-inclusive HC: patch a copy
        patched[hc] = correct
        frame = patched
    d = lz4.frame.LZ4FrameDecompressor()
    total = 0
    pending: Buffer = frame
    try:
        while not d.eof:
            out = d.decompress(pending, max_length=chunk)
            pending = b""
            if out:
                total += len(out)
                if total > max_size:
                    raise DecompressionBombError(f"lz4 output exceeds {max_size} bytes")
                yield out
            elif d.needs_input:
                raise CompressionError("lz4: truncated frame")
    except RuntimeError as e:
        raise CompressionError(f"lz4: {e}") from e


def iter_decompressed(codec: int, data: Buffer, max_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
                      chunk: int = STREAM_CHUNK) -> Iterator[Buffer]:
    """The decompressed records section as a stream of chunks of at most ``chunk`` bytes (snappy:
    one block at a time), never holding the whole output: a batch is validated (and recompressed)
    chunk by chunk. Output beyond ``max_size`` raises :class:`DecompressionBombError` as soon as
    it is produced; a truncated or corrupt stream raises :class:`CompressionError`."""
    if codec == CompressionType.NONE:
        if len(data) > max_size:
            raise DecompressionBombError(f"records exceed {max_size} bytes")
        return iter((data,))
    if codec == CompressionType.GZIP:
        return _gzip_stream(data, max_size, chunk)
    if codec == CompressionType.SNAPPY:
        return iter((_snappy_decompress(data, max_size),))  # block sizes are declared and checked first
    if codec == CompressionType.LZ4:
        return _lz4_stream(data, max_size, chunk)
    if codec == CompressionType.ZSTD:
        return _zstd_stream(data, max_size, chunk)
    raise UnsupportedCodecError(f"Unknown compression type id: {codec}")


class StreamCompressor:
    """Compress a records section fed in chunks, writing what each codec's Java client writes
    (see :func:`compress`): gzip member, xerial snappy blocks of 32 KiB, LZ4 frame with 64 KiB
    independent blocks, zstd frame without a content size (as Java's streaming encoder)."""

    def __init__(self, codec: int, level: int | None = None) -> None:
        self.codec = codec
        self.out = bytearray()
        self._pending = bytearray()  # snappy: bytes of the block being filled
        if codec == CompressionType.GZIP:
            self._z: Any = zlib.compressobj(6 if level is None or level < 0 else level, zlib.DEFLATED, 31)
        elif codec == CompressionType.ZSTD:
            self._z = zstandard.ZstdCompressor(level=3 if level is None else level).compressobj()
        elif codec == CompressionType.LZ4:
            self._z = lz4.frame.LZ4FrameCompressor(
                block_size=lz4.frame.BLOCKSIZE_MAX64KB, block_linked=False, content_checksum=False,
                compression_level=0 if level is None else level)
            self.out += self._z.begin()
        elif codec == CompressionType.SNAPPY:
            self.out += XERIAL_HEADER.pack(XERIAL_MAGIC, 1, 1)
        elif codec != CompressionType.NONE:
            raise UnsupportedCodecError(f"Unknown compression type id: {codec}")

    def _snappy_block(self, block: Buffer) -> None:
        compressed = cramjam.snappy.compress_raw(block)
        self.out += _INT32.pack(len(compressed))
        self.out += compressed

    def feed(self, chunk: Buffer) -> None:
        codec = self.codec
        if codec == CompressionType.NONE:
            self.out += chunk
        elif codec == CompressionType.SNAPPY:
            self._pending += chunk
            if len(self._pending) >= XERIAL_BLOCK_SIZE:
                mv = memoryview(self._pending)
                whole = len(mv) - len(mv) % XERIAL_BLOCK_SIZE
                for start in range(0, whole, XERIAL_BLOCK_SIZE):
                    self._snappy_block(mv[start:start + XERIAL_BLOCK_SIZE])
                mv.release()
                del self._pending[:whole]
        else:
            self.out += self._z.compress(chunk)

    def finish(self) -> bytearray:
        codec = self.codec
        if codec == CompressionType.SNAPPY:
            if self._pending:
                self._snappy_block(self._pending)
        elif codec != CompressionType.NONE:
            self.out += self._z.flush()
        return self.out


def compress(codec: int, data: Buffer, level: int | None = None) -> bytes:
    """Compress ``data`` as a Kafka client would for ``codec``.

    ``level`` follows KIP-390's ``compression.{gzip,lz4,zstd}.level`` (Kafka's defaults: gzip -1 =
    zlib's 6, lz4 9 = LZ4HC, zstd 3). ``None`` means: gzip 6, lz4 the fast compressor (level 0,
    several times faster than HC 9 at a slightly worse ratio), zstd 3. Snappy has no level.
    """
    if codec == CompressionType.NONE:
        return bytes(data)
    if codec == CompressionType.GZIP:
        return _gzip_compress(data, level)
    if codec == CompressionType.SNAPPY:
        return _snappy_compress(data)
    if codec == CompressionType.LZ4:
        return _lz4_compress(data, level)
    if codec == CompressionType.ZSTD:
        return _zstd_compress(data, level)
    raise UnsupportedCodecError(f"unknown compression codec {codec}")


def decompress(codec: int, data: Buffer, max_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE) -> bytes | bytearray:
    """Decompress a batch's records section; raise CompressionError / DecompressionBombError."""
    if codec == CompressionType.NONE:
        if len(data) > max_size:
            raise DecompressionBombError(f"records exceed {max_size} bytes")
        return bytes(data)
    if codec == CompressionType.GZIP:
        return _gzip_decompress(data, max_size)
    if codec == CompressionType.SNAPPY:
        return _snappy_decompress(data, max_size)
    if codec == CompressionType.LZ4:
        return _lz4_decompress(data, max_size)
    if codec == CompressionType.ZSTD:
        return _zstd_decompress(data, max_size)
    raise UnsupportedCodecError(f"unknown compression codec {codec}")
