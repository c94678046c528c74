"""Sparse, memory-mapped segment indexes in Kafka's byte formats: ``.index`` and ``.timeindex``.

Owns ``OffsetIndex`` (8-byte entries: int32 offset relative to the segment's base offset, int32
physical position in the ``.log``) and ``TimeIndex`` (12-byte entries: int64 timestamp, int32
relative offset), both big-endian like Kafka's ``OffsetIndex``/``TimeIndex``. The active segment's
index files are preallocated to ``segment.index.bytes`` (rounded down to whole entries) and
memory-mapped; they are trimmed to their valid entries when the segment rolls or the log closes,
which is also how the number of entries is recovered when a file is reopened. Lookups are binary
searches over the mapped entries. Must not import asyncio.

Resources, as Kafka's ``LazyIndex``: nothing is read or mapped when an index is opened; the number of
entries of a file that was never trimmed (a crash) is found on first use with a few ``pread``s, and
the mapping is made on first lookup or append and dropped by ``release()`` (recovery releases every
index it touched). A mapping holds no file descriptor: on Linux it is made with libc's ``mmap`` and
the descriptor closed at once, as Java's ``MappedByteBuffer`` does (CPython's ``mmap`` module keeps a
``dup`` of the descriptor, which made every partition cost three descriptors). The munmap runs when
the last reference to the mapped buffer goes, so a reader holding it never touches unmapped memory.

The first entry (issue 17): a fresh index's first entry is written with one ``pwrite``, not through a
mapping. Mapping costs an ``open``, a ``posix_fallocate`` of the page, the ``mmap`` and a write fault of
the page: about 60 µs on this project's machines, against about 15 µs for ``open`` + ``pwrite`` +
``close``, paid twice (``.index``, ``.timeindex``) by every new segment. A broker with many quiet
partitions - or a load that spreads over 10,000 new ones, where a profile put this set-up at a quarter
of the broker's time (the throughput gain measured there was within the runs' spread) - writes one
entry per segment for a long while, so most of them never map at all (and hold no mapping:
``vm.max_map_count`` is not spent on them). The second entry maps the file, with one
``open`` for the page's allocation and the mapping; a ``pwrite`` and a shared mapping see the same page
cache, so the entry written first is in the mapping. A ``pwrite`` on a full disk fails with ENOSPC
rather than a SIGBUS, so it needs no ``posix_fallocate``.

Page faults (issue 17): an index is read by binary search and written an entry at a time, never
streamed, so its mapping is advised ``MADV_RANDOM``: a fault brings in its own page and no read-around.
Without the advice a fault reads the device's ``read_ahead_kb`` around it; on a machine where that is
8 MiB (this project's CI machines) the first append to a fresh partition zero-filled 16 MiB of page
cache for its two preallocated indexes, and a load spread over 1,000 new partitions ran at ~800 records/s
for its first 20 seconds, the broker's core busy in the kernel's memset (Kafka's own broker, which maps
its indexes without advice, shows the same collapse there).

Full disks (issue 19): the preallocated file is sparse, and a store into a hole of a memory mapping
on a full file system is a SIGBUS, not an error. So every page is allocated with ``posix_fallocate``
before the first entry is written into it; when that fails (ENOSPC) the entry is skipped with one
warning. An index is an optimisation (a lookup scans forward from the previous entry), so a skipped
entry costs speed, never correctness, and the broker never dies on a full disk.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import mmap
import os
import struct
import weakref
from pathlib import Path
from typing import TypeAlias

__all__ = ["AbstractIndex", "IndexCorruptError", "OffsetIndex", "TimeIndex"]

logger = logging.getLogger(__name__)

_PAGE = mmap.PAGESIZE


class IndexCorruptError(Exception):
    """An index failed its sanity check; the segment rebuilds it from the log."""


# A mapped index: libc's mapping as a ctypes char array (no descriptor held), or CPython's mmap where
# there is no libc.
IndexBuffer: TypeAlias = "ctypes.Array[ctypes.c_char] | mmap.mmap"


def _load_libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                              ctypes.c_int64]
        libc.munmap.restype = ctypes.c_int
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        libc.msync.restype = ctypes.c_int
        libc.msync.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        libc.madvise.restype = ctypes.c_int
        libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        return libc
    except (OSError, AttributeError):  # pragma: no cover - not a libc platform: CPython's mmap below
        return None


_LIBC = _load_libc()
_MAP_FAILED = ctypes.c_void_p(-1).value
_MS_SYNC = getattr(mmap, "MS_SYNC", 4)
_MADV_RANDOM = getattr(mmap, "MADV_RANDOM", 1)


def _munmap(addr: int, length: int) -> None:
    if _LIBC is not None:
        _LIBC.munmap(addr, length)


def _map(path: Path, length: int) -> IndexBuffer:
    """A writable shared mapping of the first ``length`` bytes of ``path`` that holds no descriptor."""
    fd = os.open(path, os.O_RDWR)
    try:
        return _map_fd(fd, path, length)
    finally:
        os.close(fd)


def _map_fd(fd: int, path: Path, length: int) -> IndexBuffer:
    """``_map`` on a descriptor the caller opened (and closes: the mapping does not need it)."""
    if _LIBC is None:  # pragma: no cover
        m = mmap.mmap(fd, length)
        if hasattr(m, "madvise"):
            m.madvise(_MADV_RANDOM)
        return m
    addr = _LIBC.mmap(None, length, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED, fd, 0)
    if addr is None or addr == _MAP_FAILED:
        err = ctypes.get_errno()
        raise OSError(err, f"mmap of {path} failed: {os.strerror(err)}")
    _LIBC.madvise(addr, length, _MADV_RANDOM)  # advice only: a failure changes nothing else
    buf = (ctypes.c_char * length).from_address(addr)
    # Unmapped when the buffer object dies: a lookup that still holds it keeps the memory valid.
    weakref.finalize(buf, _munmap, addr, length)
    return buf


def _msync(m: IndexBuffer, length: int) -> None:
    if isinstance(m, mmap.mmap) or _LIBC is None:  # pragma: no cover
        if isinstance(m, mmap.mmap):
            m.flush()
        return
    if _LIBC.msync(ctypes.addressof(m), length, _MS_SYNC) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


class AbstractIndex:
    """Shared machinery: a preallocated, lazily memory-mapped file of fixed-size big-endian entries."""

    ENTRY: struct.Struct
    KEY: struct.Struct  # the first field, the search key
    GARBAGE_SLOT_ZERO_OK = False  # whether an all-zero first entry is a real entry

    def __init__(self, path: Path, base_offset: int, max_index_size: int = -1) -> None:
        self.path = Path(path)
        self.base_offset = base_offset
        self.entry_size = self.ENTRY.size
        self._mmap: IndexBuffer | None = None
        try:
            length = os.stat(self.path).st_size
        except FileNotFoundError:
            self.path.touch()
            length = 0
        # Kafka: a new index starts empty; an existing one has length / entrySize entries (it was
        # trimmed) - unless a crash left it preallocated: then the zero tail is dropped on first use.
        self._entries: int | None = 0 if length == 0 else None
        # The last entry written, valid while the count is still `_last_n` (the count only grows back
        # through `_write_entry`, which refreshes it): appends compare with it without reading the map.
        self._last: tuple[int, ...] = ()
        self._last_n = -1
        if max_index_size < 0:
            max_index_size = max(length, self.entry_size)
        self.max_index_size = max_index_size - max_index_size % self.entry_size
        self._file_length = length
        # Bytes of the file known to be allocated on disk (see the module docstring, full disks).
        self._allocated = 0
        self._alloc_warned = False

    # --- mapping --------------------------------------------------------------------------------
    def _open(self) -> IndexBuffer | None:
        if self._mmap is None and self._file_length > 0:
            self._mmap = _map(self.path, self._file_length)
        return self._mmap

    def _unmap(self) -> None:
        self._mmap = None  # the finalizer unmaps once no lookup holds the buffer any more

    def release(self) -> None:
        """Drop the mapping (dirty pages stay in the page cache); the next use maps again."""
        self._unmap()

    @property
    def is_mapped(self) -> bool:
        return self._mmap is not None

    def resize(self, new_size: int) -> None:
        """Set the file length (rounded to whole entries); never drops valid entries."""
        new_size = new_size - new_size % self.entry_size
        new_size = max(new_size, self.entries * self.entry_size)
        if new_size == self._file_length:
            return
        self._unmap()
        os.truncate(self.path, new_size)  # growing leaves a sparse tail: pages are allocated on use
        self._file_length = new_size
        self._allocated = min(self._allocated, new_size)

    def make_active(self, max_index_size: int) -> None:
        """Preallocate to ``max_index_size`` for appends (the active segment)."""
        self.max_index_size = max_index_size - max_index_size % self.entry_size
        self.resize(self.max_index_size)

    def trim_to_valid_size(self) -> None:
        self.resize(self.entries * self.entry_size)

    # --- state ----------------------------------------------------------------------------------
    @property
    def entries(self) -> int:
        if self._entries is None:
            self._entries = self._count_entries()
        return self._entries

    def _count_entries(self) -> int:
        """Entries of a file opened from disk: all of it, less a zero tail a crash left behind.

        Reads a handful of entries with pread (a binary search), never maps: a preallocated 10 MiB
        file would otherwise fault its pages into the process (the 2.4 GB RSS of issue 19).
        """
        size = self.entry_size
        n = self._file_length // size
        if n == 0:
            return 0
        zero = bytes(size)
        fd = os.open(self.path, os.O_RDONLY)
        try:
            def is_zero(i: int) -> bool:
                return os.pread(fd, size, i * size) == zero

            if not is_zero(n - 1):
                return n
            lo, hi = (1 if self.GARBAGE_SLOT_ZERO_OK else 0), n - 1  # first zero entry in [lo, hi]
            while lo < hi:
                mid = (lo + hi) >> 1
                if is_zero(mid):
                    hi = mid
                else:
                    lo = mid + 1
            return lo
        finally:
            os.close(fd)

    @property
    def max_entries(self) -> int:
        return self.max_index_size // self.entry_size

    @property
    def is_full(self) -> bool:
        # Asked before every append (`LogSegment.should_roll`): no nested property calls once counted.
        entries = self._entries if self._entries is not None else self.entries
        return entries >= self.max_index_size // self.entry_size

    @property
    def size_in_bytes(self) -> int:
        return self.entries * self.entry_size

    def entry(self, n: int) -> tuple[int, int]:
        m = self._open()
        assert m is not None
        return self.ENTRY.unpack_from(m, n * self.entry_size)  # type: ignore[return-value]

    def _largest_lower_bound(self, key: int) -> int:
        """Slot of the last entry whose key is <= ``key``, or -1 (keys are strictly increasing)."""
        n = self.entries
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

    def _allocate(self, end: int) -> bool:
        """Make sure the file's blocks up to ``end`` exist before a store through the mapping."""
        if end <= self._allocated:
            return True
        try:
            fd = os.open(self.path, os.O_RDWR)
        except OSError as e:
            return self._no_space(e)
        try:
            return self._fallocate(fd, end)
        finally:
            os.close(fd)

    def _fallocate(self, fd: int, end: int) -> bool:
        start = self._allocated - self._allocated % _PAGE
        stop = min(self._file_length, -(-end // _PAGE) * _PAGE)
        try:
            os.posix_fallocate(fd, start, stop - start)
        except OSError as e:
            if e.errno in (errno.EOPNOTSUPP, errno.EINVAL):  # no fallocate here: nothing better to do
                self._allocated = stop
                return True
            return self._no_space(e)
        self._space_again()
        self._allocated = stop
        return True

    def _no_space(self, e: OSError) -> bool:
        """An entry is skipped (False): warn once until the disk has room again."""
        if not self._alloc_warned:
            self._alloc_warned = True
            logger.warning("Cannot allocate index space in %s (%s): the index skips entries until the disk "
                           "has room; lookups scan further, nothing is lost", self.path, e.strerror or e)
        return False

    def _space_again(self) -> None:
        if self._alloc_warned:
            self._alloc_warned = False
            logger.info("Index %s has disk space again", self.path)

    def _map_for_write(self, end: int) -> IndexBuffer | None:
        """Map the file for the entry that ends at ``end``, allocating its page first; one ``open`` for both."""
        fd = os.open(self.path, os.O_RDWR)
        try:
            if end > self._allocated and not self._fallocate(fd, end):
                return None
            self._mmap = _map_fd(fd, self.path, self._file_length)
        finally:
            os.close(fd)
        return self._mmap

    def _pwrite_first_entry(self, fields: tuple[int, ...]) -> bool:
        """The first entry of an index that is not mapped, written with ``pwrite`` (see the module docstring)."""
        data = self.ENTRY.pack(*fields)
        try:
            fd = os.open(self.path, os.O_WRONLY)
            try:
                written = os.pwrite(fd, data, 0)
            finally:
                os.close(fd)
        except OSError as e:
            return self._no_space(e)
        if written != len(data):  # only a full disk writes short; the count below is what makes an entry valid
            return self._no_space(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
        self._space_again()
        return True

    def _last_fields(self, n: int) -> tuple[int, ...]:
        """Entry ``n - 1`` (``n`` the count, not 0): remembered when this index wrote it."""
        if self._last_n == n:
            return self._last
        return self.entry(n - 1)

    def _write_entry(self, *fields: int) -> bool:
        """Store one entry after the last; False when the disk has no room for it (it is skipped)."""
        n = self._entries if self._entries is not None else self.entries
        end = (n + 1) * self.entry_size
        if end > self._file_length:
            # Not preallocated (e.g. an index being rebuilt for an inactive segment): grow geometrically.
            self.resize(max(self.max_index_size, end))
            if end > self._file_length:
                self.resize(end * 2)
        m = self._mmap
        if m is None and n == 0:
            if not self._pwrite_first_entry(fields):
                return False
        else:
            if m is None:
                m = self._map_for_write(end)
                if m is None:
                    return False
            elif end > self._allocated and not self._allocate(end):
                return False
            self.ENTRY.pack_into(m, n * self.entry_size, *fields)
        self._entries = n + 1
        self._last, self._last_n = fields, n + 1
        return True

    def truncate_entries(self, n: int) -> None:
        self._entries = max(0, min(n, self.entries))

    def reset(self) -> None:
        self._entries = 0

    def flush(self) -> None:
        """Make the entries durable: msync the mapping, or fsync the (trimmed, unmapped) file."""
        m = self._mmap
        if m is not None:
            _msync(m, self._file_length if isinstance(m, mmap.mmap) else len(m))
            return
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


class OffsetIndex(AbstractIndex):
    """Maps offsets to physical positions in the segment's ``.log`` (Kafka's ``.index``)."""

    ENTRY = struct.Struct(">ii")
    KEY = struct.Struct(">i")

    # A never-trimmed preallocated file ends in zero entries: position 0 never appears in an
    # entry (the first batch of a segment is never indexed), so zeros are garbage.
    GARBAGE_SLOT_ZERO_OK = False

    @property
    def last_offset(self) -> int:
        n = self._entries if self._entries is not None else self.entries
        if n == 0:
            return self.base_offset
        return self.base_offset + self._last_fields(n)[0]

    def append(self, offset: int, position: int) -> bool:
        """Add an entry; False when a full disk made it skip the entry (see the module docstring)."""
        n = self._entries if self._entries is not None else self.entries
        if n > 0 and offset <= (last := self.base_offset + self._last_fields(n)[0]):
            raise ValueError(f"offset index append of {offset} after {last} in {self.path}")
        if n >= self.max_index_size // self.entry_size:  # is_full
            raise ValueError(f"offset index {self.path} is full")
        return self._write_entry(offset - self.base_offset, position)

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
        if self.entries:
            # Check the first and last entries and that the last is past the first (O(1) like Kafka's check).
            first, last = self.entry(0), self.entry(self.entries - 1)
            prev_rel, prev_pos = first
            if last[0] < prev_rel or last[1] < prev_pos or prev_rel < 0:
                raise IndexCorruptError(f"{self.path}: entries are not increasing")


class TimeIndex(AbstractIndex):
    """Maps timestamps to offsets (Kafka's ``.timeindex``): entry n's timestamp is the largest seen
    up to its offset, so timestamps strictly increase along the file."""

    ENTRY = struct.Struct(">qi")
    KEY = struct.Struct(">q")

    # An all-zero first entry (timestamp 0 at the base offset) is dropped with the zero tail: a time
    # index that was preallocated and never written is all holes, and reading a hole through a tmpfs
    # mapping allocates a page - a SIGBUS on a full disk. Dropping a real (0, base) entry only makes
    # lookups start at the segment's first batch, which is still correct.
    GARBAGE_SLOT_ZERO_OK = False

    @property
    def is_full(self) -> bool:
        # Kafka keeps the last slot free for the entry written when the segment rolls.
        entries = self._entries if self._entries is not None else self.entries
        return entries >= self.max_index_size // self.entry_size - 1

    def last_entry(self) -> tuple[int, int]:
        """(timestamp, offset) of the last entry, or (-1, base_offset) when empty."""
        n = self._entries if self._entries is not None else self.entries
        if n == 0:
            return -1, self.base_offset
        ts, rel = self._last_fields(n)
        return ts, self.base_offset + rel

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> bool:
        """Append only when ``timestamp`` is larger than the last entry's (Kafka's maybeAppend).

        False only when the entry was due but a full disk made the index skip it."""
        n = self._entries if self._entries is not None else self.entries
        max_entries = self.max_index_size // self.entry_size
        if not skip_full_check and n >= max_entries - 1:  # is_full
            raise ValueError(f"time index {self.path} is full")
        if n >= max_entries and n * self.entry_size >= self._file_length:
            return True  # no slot at all (tiny segment.index.bytes); the entry is an optimisation only
        if n == 0:
            last_ts = -1
        else:
            last_ts, last_rel = self._last_fields(n)
            if offset < self.base_offset + last_rel:
                raise ValueError(f"time index append of offset {offset} before {self.base_offset + last_rel} in "
                                 f"{self.path}")
        if timestamp > last_ts:
            return self._write_entry(timestamp, offset - self.base_offset)
        return True

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
        n = self.entries
        while n > 0 and self.entry(n - 1)[1] >= rel:
            n -= 1
        self._entries = n

    def sanity_check(self) -> None:
        if self._file_length % self.entry_size:
            raise IndexCorruptError(f"{self.path}: length {self._file_length} is not a multiple of {self.entry_size}")
        if self.entries:
            first, last = self.entry(0), self.entry(self.entries - 1)
            if last[0] < first[0] or last[1] < first[1] or first[1] < 0:
                raise IndexCorruptError(f"{self.path}: entries are not increasing")
