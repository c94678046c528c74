"""Variable-length integers as Kafka encodes them (protobuf-style base-128, zig-zag for signed).

Used by the generated codecs (unsigned varints for compact lengths and tagged fields) and by the
record format (signed varints/varlongs inside records). Sans-IO: functions over bytes-like objects.
"""

from __future__ import annotations


class VarintError(ValueError):
    """A varint ran past the buffer or past its maximum width."""


def read_unsigned_varint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """Decode an unsigned 32-bit varint at ``pos``; return ``(value, new_pos)``."""
    value = 0
    shift = 0
    end = len(buf)
    while True:
        if pos >= end:
            raise VarintError("varint runs past the end of the buffer")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise VarintError("varint is longer than 5 bytes")


def read_unsigned_varlong(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """Decode an unsigned 64-bit varint at ``pos``; return ``(value, new_pos)``."""
    value = 0
    shift = 0
    end = len(buf)
    while True:
        if pos >= end:
            raise VarintError("varlong runs past the end of the buffer")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise VarintError("varlong is longer than 10 bytes")


def read_varint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """Decode a signed (zig-zag) 32-bit varint."""
    raw, pos = read_unsigned_varint(buf, pos)
    return (raw >> 1) ^ -(raw & 1), pos


def read_varlong(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """Decode a signed (zig-zag) 64-bit varlong."""
    raw, pos = read_unsigned_varlong(buf, pos)
    return (raw >> 1) ^ -(raw & 1), pos


def encode_unsigned_varint(value: int) -> bytes:
    """Encode a non-negative integer as an unsigned varint."""
    if value < 0x80:
        # Fast path: compact lengths and empty tagged-field sections are almost always one byte.
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_varint(value: int) -> bytes:
    """Encode a signed 32-bit integer as a zig-zag varint."""
    return encode_unsigned_varint(((value << 1) ^ (value >> 31)) & 0xFFFFFFFF)


def encode_varlong(value: int) -> bytes:
    """Encode a signed 64-bit integer as a zig-zag varlong."""
    return encode_unsigned_varint(((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF)


def sizeof_unsigned_varint(value: int) -> int:
    """Number of bytes ``encode_unsigned_varint(value)`` produces."""
    n = 1
    while value >= 0x80:
        value >>= 7
        n += 1
    return n
