"""File regions: record bytes that a response carries by reference to a log segment file.

Owns ``FileRegion``, the value a ``records`` field may hold on encode so that Fetch responses never
copy record bytes: the network layer sends the region with ``os.sendfile``; and the ``records``
field writers the generated encoders call, which pass regions (and large bytes-like values) through
as separate parts. Sans-IO apart from the ``read_bytes`` fallback (``os.pread``) used where sendfile
is unavailable (TLS, tests, clients).
"""

from __future__ import annotations

import os
from typing import Any, BinaryIO

from kbroker.protocol.types import I32, EncodeError, Regions, write_uvarint
from kbroker.protocol.varint import encode_unsigned_varint

# A bytes-like records value at least this large is passed through as its own part instead of being
# copied into the response buffer.
RECORDS_PASSTHROUGH_MIN = 1024
_NULL_I32 = I32.pack(-1)


class FileRegion:
    """``size`` bytes of an open binary ``file`` starting at ``position``.

    The region holds the file object itself (not a path or a bare descriptor) so that a segment
    deleted by retention stays readable until the response that references it has been written.
    """

    __slots__ = ("file", "position", "size")

    def __init__(self, file: BinaryIO, position: int, size: int) -> None:
        if position < 0 or size < 0:
            raise ValueError(f"invalid file region position={position} size={size}")
        self.file = file
        self.position = position
        self.size = size

    def __len__(self) -> int:
        return self.size

    def read_bytes(self) -> bytes:
        """Read the region with ``os.pread`` (does not move the file's offset)."""
        fd = self.file.fileno()
        chunks: list[bytes] = []
        pos = self.position
        remaining = self.size
        while remaining > 0:
            chunk = os.pread(fd, remaining, pos)
            if not chunk:
                raise EOFError(f"file region {self!r} runs past the end of the file")
            chunks.append(chunk)
            pos += len(chunk)
            remaining -= len(chunk)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, FileRegion):
            return NotImplemented
        return self.file is other.file and self.position == other.position and self.size == other.size

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        name = getattr(self.file, "name", self.file)
        return f"FileRegion({name!r}, position={self.position}, size={self.size})"


def records_size(value: Any) -> int:
    if isinstance(value, FileRegion):
        return value.size
    if isinstance(value, (list, tuple)):
        return sum(records_size(p) for p in value)
    return memoryview(value).nbytes


def _place_part(out: bytearray, regions: Regions | None, part: Any) -> None:
    if isinstance(part, FileRegion):
        if regions is None:
            out += part.read_bytes()
        else:
            regions.append((len(out), part))
    elif regions is not None and memoryview(part).nbytes >= RECORDS_PASSTHROUGH_MIN:
        regions.append((len(out), part))
    else:
        out += part


def write_records(out: bytearray, regions: Regions | None, value: Any, nullable: bool, compact: bool) -> None:
    """A ``records`` field: length prefix, then the bytes (or FileRegion parts) passed through.

    ``regions is None`` means "inline everything" (used inside tagged fields, whose size must be
    known before they are written).
    """
    if value is None:
        if not nullable:
            raise EncodeError("null value in a non-nullable records field")
        out += b"\x00" if compact else _NULL_I32
        return
    n = records_size(value)
    if compact:
        write_uvarint(out, n + 1)
    else:
        out += I32.pack(n)
    if isinstance(value, (list, tuple)):
        for part in value:
            _place_part(out, regions, part)
    else:
        _place_part(out, regions, value)


def write_compact_records(out: bytearray, regions: Regions | None, value: Any, nullable: bool) -> None:
    """``write_records`` for flexible versions, with a fast path for a single FileRegion (Fetch)."""
    if value.__class__ is FileRegion and regions is not None:
        n = value.size + 1
        if n < 0x80:
            out.append(n)
        else:
            out += encode_unsigned_varint(n)
        regions.append((len(out), value))
        return
    write_records(out, regions, value, nullable, True)


def write_legacy_records(out: bytearray, regions: Regions | None, value: Any, nullable: bool) -> None:
    """``write_records`` for non-flexible versions (int32 length prefix)."""
    if value.__class__ is FileRegion and regions is not None:
        out += I32.pack(value.size)
        regions.append((len(out), value))
        return
    write_records(out, regions, value, nullable, False)
