"""Sparse, memory-mapped segment indexes in Kafka's byte formats: ``.index`` and ``.timeindex``.

Owns ``OffsetIndex`` (8-byte entries: int32 offset relative to the segment's base offset, int32
physical position in the ``.log``) and ``TimeIndex`` (12-byte entries: int64 timestamp, int32
relative offset), both big-endian like Kafka's ``OffsetIndex``/``TimeIndex``. The active segment's
index files are preallocated to ``segment.index.bytes`` (rounded down to whole entries) and
memory-mapped; they are trimmed to their valid entries when the segment rolls or the log closes,
which is also how the number of entries is recovered when a file is reopened. Lookups are binary
searches over the mapped entries. Mappings are opened lazily so an idle partition with many
segments holds no maps.
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path

__all__ = ["AbstractIndex", "IndexCorruptError", "OffsetIndex", "TimeIndex"]


class IndexCorruptError(Exception):
    """An index failed its sanity check; the segment rebuilds it from the log."""


class AbstractIndex:
    """Shared machinery: a preallocated, memory-mapped file of fixed-size big-endian entries."""

    ENTRY: struct.Struct
    KEY: struct.Struct  # the first field, the search key

    def __init__(self, path: Path, base_offset: int, max_index_size: int = -1) -> None:
        self.path = Path(path)
        self.base_offset = base_offset
        self.entry_size = self.ENTRY.size
        self._mmap: mmap.mmap | None = None
        exists = self.path.exists()
        length = self.path.stat().st_size if exists else 0
        # Kafka: a new index starts empty; an existing one has length / entrySize entries (it was trimmed).
        self._entries = 0 if not exists else length // self.entry_size
        if max_index_size < 0:
            max_index_size = max(length, self.entry_size)
        self.max_index_size = max_index_size - max_index_size % self.entry_size
        self._file_length = length
        if not exists:
            self.path.touch()
            self._file_length = 0

    # --- mapping --------------------------------------------------------------------------------
    def _open(self) -> mmap.mmap | None:
        if self._mmap is None and self._file_length > 0:
            fd = os.open(self.path, os.O_RDWR)
            try:
                self._mmap = mmap.mmap(fd, self._file_length)
            finally:
                os.close(fd)  # the mapping keeps its own reference: one descriptor fewer per index
        return self._mmap

    def _unmap(self) -> None:
        if self._mmap is not None:
            self._mmap.close()
            self._mmap = None

    def resize(self, new_size: int) -> None:
        """Set the file length (rounded to whole entries); never drops valid entries."""
        new_size = new_size - new_size % self.entry_size
        new_size = max(new_size, self._entries * self.entry_size)
        if new_size == self._file_length:
            return
        if self._mmap is not None:
            self._mmap.flush()
        self._unmap()
        os.truncate(self.path, new_size)
        self._file_length = new_size

    def make_active(self, max_index_size: int) -> None:
        """Preallocate to ``max_index_size`` for appends (the active segment)."""
        self.max_index_size = max_index_size - max_index_size % self.entry_size
        self.resize(self.max_index_size)

    def trim_to_valid_size(self) -> None:
        self.resize(self._entries * self.entry_size)

    # --- state ----------------------------------------------------------------------------------
    @property
    def entries(self) -> int:
        return self._entries

    @property
    def max_entries(self) -> int:
        return self.max_index_size // self.entry_size

    @property
    def is_full(self) -> bool:
        return self._entries >= self.max_entries

    @property
    def size_in_bytes(self) -> int:
        return self._entries * self.entry_size

    def entry(self, n: int) -> tuple[int, int]:
        m = self._open()
        assert m is not None
        return self.ENTRY.unpack_from(m, n * self.entry_size)  # type: ignore[return-value]

    def _largest_lower_bound(self, key: int) -> int:
        """Slot of the last entry whose key is <= ``key``, or -1 (keys are strictly increasing)."""
        n = self._entries
        if n == 0:
            return -1
        m = self._open()
        assert m is not None
        unpack, size = self.KEY.unpack_from, self.entry_size
        if unpack(m, 0)[0] > key:
            return -1
        lo, hi = 0, n - 1
        while lo < hi:
            mid = (lo + hi + 1) >> 1
            if unpack(m, mid * size)[0] <= key:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def _write_entry(self, *fields: int) -> None:
        if self._entries * self.entry_size + self.entry_size > self._file_length:
            # Not preallocated (e.g. an index being rebuilt for an inactive segment): grow geometrically.
            self.resize(max(self.max_index_size, (self._entries + 1) * self.entry_size))
            if self._entries * self.entry_size + self.entry_size > self._file_length:
                self.resize((self._entries + 1) * self.entry_size * 2)
        m = self._open()
        assert m is not None
        self.ENTRY.pack_into(m, self._entries * self.entry_size, *fields)
        self._entries += 1

    def truncate_entries(self, n: int) -> None:
        self._entries = max(0, min(n, self._entries))

    def reset(self) -> None:
        self._entries = 0

    def flush(self) -> None:
        """Make the entries durable: msync the mapping, or fsync the (trimmed, unmapped) file."""
        if self._mmap is not None:
            self._mmap.flush()
        else:
            try:
                fd = os.open(self.path, os.O_RDONLY)
            except FileNotFoundError:
                return  # deleted meanwhile (retention/truncation): nothing left to make durable
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def close(self) -> None:
        self.trim_to_valid_size()
        self._unmap()

    def close_handler(self) -> None:
        """Release the mapping without trimming (the files are being deleted)."""
        self._unmap()

    def rename_to(self, new_path: Path) -> None:
        if self.path.exists():
            os.replace(self.path, new_path)
        self.path = Path(new_path)

    def delete_if_exists(self) -> None:
        self._unmap()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def _drop_zero_tail(self, is_garbage_slot_zero_ok: bool) -> None:
        """Drop trailing all-zero entries left by a preallocated file that was never trimmed."""
        n = self._entries
        if n == 0:
            return
        m = self._open()
        assert m is not None
        zero = bytes(self.entry_size)
        size = self.entry_size

        def is_zero(i: int) -> bool:
            return m[i * size:(i + 1) * size] == zero

        if not is_zero(n - 1):
            return
        lo, hi = (1 if is_garbage_slot_zero_ok else 0), n - 1  # first zero entry in [lo, hi]
        while lo < hi:
            mid = (lo + hi) >> 1
            if is_zero(mid):
                hi = mid
            else:
                lo = mid + 1
        self._entries = lo


class OffsetIndex(AbstractIndex):
    """Maps offsets to physical positions in the segment's ``.log`` (Kafka's ``.index``)."""

    ENTRY = struct.Struct(">ii")
    KEY = struct.Struct(">i")

    def __init__(self, path: Path, base_offset: int, max_index_size: int = -1) -> None:
        super().__init__(path, base_offset, max_index_size)
        # A never-trimmed preallocated file ends in zero entries: position 0 never appears in an
        # entry (the first batch of a segment is never indexed), so zeros are garbage.
        self._drop_zero_tail(False)

    @property
    def last_offset(self) -> int:
        if self._entries == 0:
            return self.base_offset
        return self.base_offset + self.entry(self._entries - 1)[0]

    def append(self, offset: int, position: int) -> None:
        if self._entries > 0 and offset <= self.last_offset:
            raise ValueError(f"offset index append of {offset} after {self.last_offset} in {self.path}")
        if self.is_full:
            raise ValueError(f"offset index {self.path} is full")
        self._write_entry(offset - self.base_offset, position)

    def lookup(self, target_offset: int) -> tuple[int, int]:
        """Largest indexed (offset, position) with offset <= target, or (base_offset, 0)."""
        slot = self._largest_lower_bound(target_offset - self.base_offset)
        if slot < 0:
            return self.base_offset, 0
        rel, pos = self.entry(slot)
        return self.base_offset + rel, pos

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose offset is >= ``offset`` (Kafka's OffsetIndex.truncateTo)."""
        rel = offset - self.base_offset
        slot = self._largest_lower_bound(rel)
        if slot < 0:
            self._entries = 0
        elif self.entry(slot)[0] == rel:
            self._entries = slot
        else:
            self._entries = slot + 1

    def sanity_check(self) -> None:
        if self._file_length % self.entry_size:
            raise IndexCorruptError(f"{self.path}: length {self._file_length} is not a multiple of {self.entry_size}")
        prev_rel, prev_pos = -1, -1
        if self._entries:
            # Check the first and last entries and that the last is past the first (O(1) like Kafka's check).
            first, last = self.entry(0), self.entry(self._entries - 1)
            prev_rel, prev_pos = first
            if last[0] < prev_rel or last[1] < prev_pos or prev_rel < 0:
                raise IndexCorruptError(f"{self.path}: entries are not increasing")


class TimeIndex(AbstractIndex):
    """Maps timestamps to offsets (Kafka's ``.timeindex``): entry n's timestamp is the largest seen
    up to its offset, so timestamps strictly increase along the file."""

    ENTRY = struct.Struct(">qi")
    KEY = struct.Struct(">q")

    def __init__(self, path: Path, base_offset: int, max_index_size: int = -1) -> None:
        super().__init__(path, base_offset, max_index_size)
        self._drop_zero_tail(True)

    @property
    def is_full(self) -> bool:
        # Kafka keeps the last slot free for the entry written when the segment rolls.
        return self._entries >= self.max_entries - 1

    def last_entry(self) -> tuple[int, int]:
        """(timestamp, offset) of the last entry, or (-1, base_offset) when empty."""
        if self._entries == 0:
            return -1, self.base_offset
        ts, rel = self.entry(self._entries - 1)
        return ts, self.base_offset + rel

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        """Append only when ``timestamp`` is larger than the last entry's (Kafka's maybeAppend)."""
        if not skip_full_check and self.is_full:
            raise ValueError(f"time index {self.path} is full")
        if self._entries >= self.max_entries and self._entries * self.entry_size >= self._file_length:
            return  # no slot at all (tiny segment.index.bytes); the entry is an optimisation only
        last_ts, last_off = self.last_entry()
        if self._entries and offset < last_off:
            raise ValueError(f"time index append of offset {offset} before {last_off} in {self.path}")
        if timestamp > last_ts:
            self._write_entry(timestamp, offset - self.base_offset)

    def lookup(self, target_timestamp: int) -> tuple[int, int]:
        """Largest (timestamp, offset) entry with timestamp <= target, or (-1, base_offset)."""
        slot = self._largest_lower_bound(target_timestamp)
        if slot < 0:
            return -1, self.base_offset
        ts, rel = self.entry(slot)
        return ts, self.base_offset + rel

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose offset is >= ``offset``."""
        rel = offset - self.base_offset
        n = self._entries
        while n > 0 and self.entry(n - 1)[1] >= rel:
            n -= 1
        self._entries = n

    def sanity_check(self) -> None:
        if self._file_length % self.entry_size:
            raise IndexCorruptError(f"{self.path}: length {self._file_length} is not a multiple of {self.entry_size}")
        if self._entries:
            first, last = self.entry(0), self.entry(self._entries - 1)
            if last[0] < first[0] or last[1] < first[1] or first[1] < 0:
                raise IndexCorruptError(f"{self.path}: entries are not increasing")
