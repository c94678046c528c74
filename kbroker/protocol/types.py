"""Runtime support for the generated message codecs: errors, the non-trivial wire types, the registry.

Owns the encodings the generated code does not inline: (compact) (nullable) strings and bytes,
array length prefixes with their allocation guard, arrays of primitives, UUIDs, tagged-field
sections, ``records`` fields (memoryview slices on decode, FileRegion pass-through on encode), and
the ``ApiSpec``/``FieldInfo`` records the generated registry is built from. Varints come from
``kbroker.protocol.varint``. Must not import asyncio or any kbroker package above protocol.

Conventions (the generated code relies on them):
- decoders take ``(buf: memoryview, pos: int)`` and return ``(value, new_pos)``; they may raise
  ``struct.error``/``IndexError``/``ValueError`` on truncated input, which the frame entry points
  wrap into ``ProtocolError``.
- encoders append to one ``bytearray`` and record FileRegions (and large bytes-like records) in
  ``regions`` as ``(offset_in_out, part)`` so the frame can be split into parts without copying.
"""

from __future__ import annotations

import builtins
import struct
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, TypeAlias

from kbroker.protocol.varint import encode_unsigned_varint, read_unsigned_varint

if TYPE_CHECKING:
    from kbroker.protocol.headers import RequestHeader
    from kbroker.protocol.regions import FileRegion

Buffer = bytes | bytearray | memoryview
# One part of an encoded frame: bytes, or what an encoder passed through uncopied (a FileRegion for
# sendfile, or a large records buffer): what `encode_response_frame` returns and net/writer.py sends.
FramePart: TypeAlias = "bytes | bytearray | memoryview | FileRegion"
# Where the pass-through parts go: (offset in the encoded bytes, part).
Regions = list[tuple[int, FramePart]]


class ProtocolError(ValueError):
    """Bytes that do not follow Kafka's wire format (or a value that cannot be encoded)."""


class UnsupportedVersionError(ProtocolError):
    """A request for an API key or version this codebase does not know; carries the parsed header."""

    def __init__(self, message: str, header: RequestHeader) -> None:
        super().__init__(message)
        self.header = header


class EncodeError(ProtocolError):
    """A message object that cannot be written at the requested version.

    Mirrors the ``UnsupportedVersionException``/``NullPointerException`` Kafka's generated ``write``
    throws: a non-default value in a field the version lacks (unless the field is ignorable), a null
    in a non-nullable version, an out-of-range integer, a string longer than 32767 bytes.
    """


class _Missing:
    """Sentinel for "use the spec default" in generated ``__init__`` for mutable defaults."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()
ZERO_UUID = uuid.UUID(int=0)  # Kafka's Uuid.ZERO_UUID: "unset"

I8 = struct.Struct(">b")
I16 = struct.Struct(">h")
I32 = struct.Struct(">i")
U32 = struct.Struct(">I")
_NULL_I16 = I16.pack(-1)
_NULL_I32 = I32.pack(-1)
_MAX_STRING = 0x7FFF

_new = object.__new__
_set = object.__setattr__
_SAFE_UNKNOWN = uuid.SafeUUID.unknown
_ZERO16 = bytes(16)


def uuid_from_bytes(b: bytes) -> uuid.UUID:
    """``uuid.UUID(bytes=b)`` without its argument checks (b is always 16 bytes from a Struct)."""
    if b == _ZERO16:
        return ZERO_UUID
    u = _new(uuid.UUID)
    _set(u, "int", int.from_bytes(b, "big"))
    _set(u, "is_safe", _SAFE_UNKNOWN)
    return u


def truncated(what: str = "field") -> ProtocolError:
    return ProtocolError(f"{what} runs past the end of the buffer")


def null_error(field: str) -> ProtocolError:
    return ProtocolError(f"non-nullable field {field} was serialized as null")


def unsupported_field(field: str, version: int) -> EncodeError:
    return EncodeError(f"attempted to write a non-default {field} at version {version}")


# ---------------------------------------------------------------------------------------------------
# Decoding
# ---------------------------------------------------------------------------------------------------


def _utf8(buf: memoryview, pos: int, end: int) -> str:
    if end > len(buf):
        raise truncated("string")
    return str(buf[pos:end], "utf-8")


def read_string(buf: memoryview, pos: int) -> tuple[str, int]:
    (n,) = I16.unpack_from(buf, pos)
    if n < 0:
        raise ProtocolError("non-nullable string was serialized as null")
    pos += 2
    return _utf8(buf, pos, pos + n), pos + n


def read_nullable_string(buf: memoryview, pos: int) -> tuple[str | None, int]:
    (n,) = I16.unpack_from(buf, pos)
    pos += 2
    if n < 0:
        if n != -1:
            raise ProtocolError(f"invalid string length {n}")
        return None, pos
    return _utf8(buf, pos, pos + n), pos + n


def read_compact_string(buf: memoryview, pos: int) -> tuple[str, int]:
    n = buf[pos]
    if n < 0x80:
        pos += 1
    else:
        n, pos = read_unsigned_varint(buf, pos)
    if n == 0:
        raise ProtocolError("non-nullable compact string was serialized as null")
    n -= 1
    if n > _MAX_STRING:
        raise ProtocolError(f"string field had invalid length {n}")
    return _utf8(buf, pos, pos + n), pos + n


def read_compact_nullable_string(buf: memoryview, pos: int) -> tuple[str | None, int]:
    n = buf[pos]
    if n < 0x80:
        pos += 1
    else:
        n, pos = read_unsigned_varint(buf, pos)
    if n == 0:
        return None, pos
    n -= 1
    if n > _MAX_STRING:
        raise ProtocolError(f"string field had invalid length {n}")
    return _utf8(buf, pos, pos + n), pos + n


def _slice(buf: memoryview, pos: int, n: int, copy: bool) -> tuple[Any, int]:
    end = pos + n
    if end > len(buf):
        raise truncated("bytes")
    return (bytes(buf[pos:end]) if copy else buf[pos:end]), end


def read_bytes(
    buf: memoryview, pos: int, nullable: bool, compact: bool, copy: bool = True
) -> tuple[Any, int]:
    """A (compact) (nullable) bytes field: ``bytes`` if ``copy`` else a memoryview slice (records)."""
    if compact:
        n = buf[pos]
        if n < 0x80:
            pos += 1
        else:
            n, pos = read_unsigned_varint(buf, pos)
        n -= 1
    else:
        (n,) = I32.unpack_from(buf, pos)
        pos += 4
    if n < 0:
        if n != -1:
            raise ProtocolError(f"invalid bytes length {n}")
        if not nullable:
            raise ProtocolError("non-nullable bytes field was serialized as null")
        return None, pos
    return _slice(buf, pos, n, copy)


def read_records(buf: memoryview, pos: int, nullable: bool, compact: bool) -> tuple[memoryview | None, int]:
    """A ``records`` field: a zero-copy memoryview slice of the request buffer (or None)."""
    if compact:
        n = buf[pos]
        if n < 0x80:
            pos += 1
        else:
            n, pos = read_unsigned_varint(buf, pos)
        n -= 1
    else:
        (n,) = I32.unpack_from(buf, pos)
        pos += 4
    if n >= 0:
        end = pos + n
        if end > len(buf):
            raise truncated("records")
        return buf[pos:end], end
    if n != -1:
        raise ProtocolError(f"invalid records length {n}")
    if not nullable:
        raise ProtocolError("non-nullable records field was serialized as null")
    return None, pos


def read_array_length(buf: memoryview, pos: int, compact: bool, min_element_size: int) -> tuple[int, int]:
    """Array element count (-1 for null), checked against the bytes left before anything is allocated.

    Kafka rejects a count larger than the remaining bytes ("Tried to allocate a collection of size
    N, but there are only M bytes remaining"); we also use the element's minimum encoded size.
    """
    if compact:
        n = buf[pos]
        if n < 0x80:
            pos += 1
        else:
            n, pos = read_unsigned_varint(buf, pos)
        n -= 1
    else:
        (n,) = I32.unpack_from(buf, pos)
        pos += 4
    if n < 0:
        if n != -1:
            raise ProtocolError(f"invalid array length {n}")
        return -1, pos
    if n * min_element_size > len(buf) - pos:
        raise ProtocolError(
            f"tried to allocate a collection of size {n}, but there are only {len(buf) - pos} bytes remaining"
        )
    return n, pos


def read_primitive_array(
    buf: memoryview, pos: int, code: str, width: int, compact: bool
) -> tuple[list[Any] | None, int]:
    n, pos = read_array_length(buf, pos, compact, width)
    if n < 0:
        return None, pos
    values = list(struct.unpack_from(f">{n}{code}", buf, pos))
    return values, pos + n * width


def read_uuid_array(buf: memoryview, pos: int, compact: bool) -> tuple[list[uuid.UUID] | None, int]:
    n, pos = read_array_length(buf, pos, compact, 16)
    if n < 0:
        return None, pos
    raw = bytes(buf[pos : pos + 16 * n])
    return [uuid_from_bytes(raw[i : i + 16]) for i in range(0, 16 * n, 16)], pos + 16 * n


def read_string_array(buf: memoryview, pos: int, compact: bool) -> tuple[list[str] | None, int]:
    n, pos = read_array_length(buf, pos, compact, 1 if compact else 2)
    if n < 0:
        return None, pos
    read = read_compact_string if compact else read_string
    out: list[str] = []
    for _ in range(n):
        s, pos = read(buf, pos)
        out.append(s)
    return out, pos


def read_tag_section(buf: memoryview, pos: int, into: dict[int, bytes]) -> int:
    """A tagged-field section of which this version knows no field (the count byte is non-zero)."""
    count, pos = read_unsigned_varint(buf, pos)
    return read_unknown_tags(buf, pos, count, into)


def read_unknown_tags(buf: memoryview, pos: int, count: int, into: dict[int, bytes]) -> int:
    """Read ``count`` tagged fields, none of which this version knows: keep them raw so they round-trip."""
    for _ in range(count):
        tag, pos = read_unsigned_varint(buf, pos)
        size, pos = read_unsigned_varint(buf, pos)
        end = pos + size
        if end > len(buf):
            raise truncated("tagged field")
        into[tag] = bytes(buf[pos:end])
        pos = end
    return pos


def tag_bounds(buf: memoryview, pos: int) -> tuple[int, int, int]:
    """Read one tagged field's tag and size; return ``(tag, value_start, value_end)``."""
    tag, pos = read_unsigned_varint(buf, pos)
    size, pos = read_unsigned_varint(buf, pos)
    end = pos + size
    if end > len(buf):
        raise truncated("tagged field")
    return tag, pos, end


def check_tag_end(pos: int, end: int, tag: int) -> None:
    if pos > end:
        raise ProtocolError(f"tagged field {tag} is longer than its declared size")


# ---------------------------------------------------------------------------------------------------
# Encoding
# ---------------------------------------------------------------------------------------------------


def write_uvarint(out: bytearray, n: int) -> None:
    if n < 0x80:
        out.append(n)
    else:
        out += encode_unsigned_varint(n)


def _encode_str(s: str) -> bytes:
    b = s.encode("utf-8")
    if len(b) > _MAX_STRING:
        raise EncodeError(f"string of {len(b)} bytes is longer than {_MAX_STRING}")
    return b


def write_string(out: bytearray, s: str) -> None:
    if s is None:
        raise EncodeError("null value in a non-nullable string field")
    b = _encode_str(s)
    out += I16.pack(len(b))
    out += b


def write_nullable_string(out: bytearray, s: str | None) -> None:
    if s is None:
        out += _NULL_I16
        return
    b = _encode_str(s)
    out += I16.pack(len(b))
    out += b


def write_compact_string(out: bytearray, s: str) -> None:
    if s is None:
        raise EncodeError("null value in a non-nullable string field")
    b = _encode_str(s)
    write_uvarint(out, len(b) + 1)
    out += b


def write_compact_nullable_string(out: bytearray, s: str | None) -> None:
    if s is None:
        out.append(0)
        return
    b = _encode_str(s)
    write_uvarint(out, len(b) + 1)
    out += b


def _write_length(out: bytearray, n: int, compact: bool) -> None:
    if compact:
        write_uvarint(out, n + 1)
    else:
        out += I32.pack(n)


def write_bytes(out: bytearray, value: Buffer | None, nullable: bool, compact: bool) -> None:
    if value is None:
        if not nullable:
            raise EncodeError("null value in a non-nullable bytes field")
        out += b"\x00" if compact else _NULL_I32
        return
    n = memoryview(value).nbytes
    _write_length(out, n, compact)
    out += value


def write_null_array(out: bytearray, compact: bool) -> None:
    out += b"\x00" if compact else _NULL_I32


def write_primitive_array(
    out: bytearray, values: Sequence[Any] | None, code: str, nullable: bool, compact: bool
) -> None:
    if values is None:
        if not nullable:
            raise EncodeError("null value in a non-nullable array field")
        write_null_array(out, compact)
        return
    n = len(values)
    _write_length(out, n, compact)
    out += struct.pack(f">{n}{code}", *values)


def write_uuid_array(
    out: bytearray, values: Sequence[uuid.UUID] | None, nullable: bool, compact: bool
) -> None:
    if values is None:
        if not nullable:
            raise EncodeError("null value in a non-nullable array field")
        write_null_array(out, compact)
        return
    _write_length(out, len(values), compact)
    for u in values:
        out += u.bytes


def write_string_array(out: bytearray, values: Sequence[str] | None, nullable: bool, compact: bool) -> None:
    if values is None:
        if not nullable:
            raise EncodeError("null value in a non-nullable array field")
        write_null_array(out, compact)
        return
    _write_length(out, len(values), compact)
    write = write_compact_string if compact else write_string
    for s in values:
        write(out, s)


def write_unknown_tags(out: bytearray, unknown: dict[int, bytes]) -> None:
    write_uvarint(out, len(unknown))
    for tag in sorted(unknown):
        raw = unknown[tag]
        write_uvarint(out, tag)
        write_uvarint(out, len(raw))
        out += raw


def write_tags(out: bytearray, known: list[tuple[int, bytearray]], unknown: dict[int, bytes] | None) -> None:
    """Write a tagged-field section: known and unknown fields merged in ascending tag order."""
    fields: list[tuple[int, Buffer]] = list(known)
    if unknown:
        fields.extend(unknown.items())
        fields.sort(key=lambda item: item[0])
    write_uvarint(out, len(fields))
    for tag, raw in fields:
        write_uvarint(out, tag)
        write_uvarint(out, len(raw))
        out += raw


def split_parts(out: bytearray, regions: Regions) -> list[FramePart]:
    """Cut ``out`` at the recorded offsets and interleave the pass-through parts."""
    if not regions:
        return [out]
    view = memoryview(out)
    parts: list[FramePart] = []
    start = 0
    for offset, part in regions:
        if offset > start:
            parts.append(view[start:offset])
        parts.append(part)
        start = offset
    if start < len(out):
        parts.append(view[start:])
    return parts


def join_parts(parts: Sequence[Any]) -> bytes:
    """Flatten parts into bytes, reading FileRegions (client side and tests; never the hot path)."""
    return b"".join(p.read_bytes() if hasattr(p, "read_bytes") else bytes(p) for p in parts)


# ---------------------------------------------------------------------------------------------------
# Registry records
# ---------------------------------------------------------------------------------------------------

Decoder = Callable[[memoryview, int], tuple[Any, int]]
Encoder = Callable[[Any, bytearray, "Regions | None"], None]


class FieldInfo(NamedTuple):
    """One field of a generated class: enough for tests and tools to walk messages by version."""

    name: str  # snake_case attribute name
    kafka_name: str
    type: str  # Kafka's type string, e.g. "int32", "[]TopicProduceData", "records"
    versions: tuple[int, int]  # inclusive; high 32767 for "N+"
    nullable_versions: tuple[int, int] | None
    tag: int | None
    tagged_versions: tuple[int, int] | None
    ignorable: bool
    struct: builtins.type | None  # the class of a struct / struct array element


def in_range(rng: tuple[int, int] | None, version: int) -> bool:
    return rng is not None and rng[0] <= version <= rng[1]


class ApiSpec:
    """One API key: the spec's versions and listeners, its classes and per-version codec tables.

    The codec tables are indexed by version (``None`` outside the valid range). The generated
    module holding them is imported on first use: importing every codec costs most of a second,
    and a broker serves a couple of dozen of the ~90 APIs, so start-up loads only those.
    """

    __slots__ = (
        "api_key", "name", "min_version", "max_version", "flexible_min", "listeners",
        "latest_version_unstable", "module", "_class_names", "_loaded",
    )

    def __init__(
        self,
        *,
        api_key: int,
        name: str,
        min_version: int,
        max_version: int,
        flexible_min: int | None,
        listeners: tuple[str, ...],
        latest_version_unstable: bool,
        module: str,
        request_class: str,
        response_class: str,
    ) -> None:
        self.api_key = api_key
        self.name = name
        self.min_version = min_version
        self.max_version = max_version
        self.flexible_min = flexible_min
        self.listeners = listeners
        self.latest_version_unstable = latest_version_unstable
        self.module = module  # fully qualified name of the generated codec module
        self._class_names = (request_class, response_class)
        self._loaded: tuple[Any, ...] | None = None

    def _load(self) -> tuple[Any, ...]:
        if self._loaded is None:
            import importlib

            m = importlib.import_module(self.module)
            self._loaded = (
                getattr(m, self._class_names[0]), getattr(m, self._class_names[1]),
                m.REQUEST_DECODERS, m.REQUEST_ENCODERS, m.RESPONSE_DECODERS, m.RESPONSE_ENCODERS,
            )
        return self._loaded

    @property
    def request_class(self) -> type:
        return self._loaded[0] if self._loaded is not None else self._load()[0]  # type: ignore[no-any-return]

    @property
    def response_class(self) -> type:
        return self._loaded[1] if self._loaded is not None else self._load()[1]  # type: ignore[no-any-return]

    @property
    def request_decoders(self) -> Sequence[Decoder | None]:
        return self._loaded[2] if self._loaded is not None else self._load()[2]  # type: ignore[no-any-return]

    @property
    def request_encoders(self) -> Sequence[Encoder | None]:
        return self._loaded[3] if self._loaded is not None else self._load()[3]  # type: ignore[no-any-return]

    @property
    def response_decoders(self) -> Sequence[Decoder | None]:
        return self._loaded[4] if self._loaded is not None else self._load()[4]  # type: ignore[no-any-return]

    @property
    def response_encoders(self) -> Sequence[Encoder | None]:
        return self._loaded[5] if self._loaded is not None else self._load()[5]  # type: ignore[no-any-return]

    def is_flexible(self, version: int) -> bool:
        # Flexible ranges are open-ended ("9+"), so a version newer than max_version is flexible too:
        # that is how Kafka parses the header of an ApiVersions request from a newer client (KIP-511).
        return self.flexible_min is not None and version >= self.flexible_min

    def request_header_version(self, version: int) -> int:
        return 2 if self.is_flexible(version) else 1

    def response_header_version(self, version: int) -> int:
        if self.api_key == 18:
            # ApiVersions responses always use header v0, so a client that does not yet know the
            # broker's versions can parse them (KIP-511).
            return 0
        return 1 if self.is_flexible(version) else 0

    def __repr__(self) -> str:
        return f"ApiSpec({self.api_key}, {self.name!r}, versions {self.min_version}-{self.max_version})"
