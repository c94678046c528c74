"""File regions: record bytes that a response carries by reference to a log segment file.

Owns ``FileRegion``, the value a ``records`` field may hold on encode so that Fetch responses never
copy record bytes: the network layer sends the region with ``os.sendfile``. Sans-IO apart from the
``read_bytes`` fallback (``os.pread``) used where sendfile is unavailable (TLS, tests, clients).
"""

from __future__ import annotations

import os
from typing import BinaryIO


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
