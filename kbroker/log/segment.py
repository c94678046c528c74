"""One log segment: a ``.log`` file of RecordBatch v2 batches plus its ``.index`` and ``.timeindex``.

Owns Kafka's ``LogSegment`` behaviour: appending already-validated batches at the end of the file
(``os.pwrite``, page cache only; ``flush`` fsyncs), the sparse index rule (an entry for a batch's
last offset at the batch's start position whenever more than ``index.interval.bytes`` were written
since the previous entry), offset -> position translation (index floor entry, then a forward scan
of batch headers with ``os.pread`` of a few KiB, never the record bytes), timestamp search, roll
decisions, truncation, and recovery (CRC-checking every batch, truncating a torn or corrupt tail,
rebuilding both indexes). File names are the base offset zero-padded to 20 digits.
"""

from __future__ import annotations

import errno
import os
import random
from collections.abc import Callable, Iterator
from pathlib import Path

from kbroker.log.errors import KafkaStorageError
from kbroker.log.indexes import IndexCorruptError, OffsetIndex, TimeIndex
from kbroker.protocol.record_format import (
    HEADER,
    LOG_OVERHEAD,
    MAGIC_V2,
    PREFIX,
    PREFIX_SIZE,
    RECORD_BATCH_OVERHEAD,
    BatchHeader,
)
from kbroker.protocol.records import RecordBatch

__all__ = ["LogSegment", "segment_file_name", "DELETED_SUFFIX", "INT32_MAX"]

DELETED_SUFFIX = ".deleted"
INT32_MAX = 2147483647
_READ_CHUNK = 8192
_RECOVERY_CHUNK = 1 << 20


def segment_file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


class LogSegment:
    """A ``.log`` file with its two indexes, covering offsets from ``base_offset`` up to the next segment."""

    def __init__(self, directory: Path, base_offset: int, *, index_interval_bytes: int = 4096,
                 max_index_size: int = 10485760, roll_jitter_ms: int = 0, created_ms: int = 0,
                 active: bool = False, file_suffix: str = "") -> None:
        self.dir = Path(directory)
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.roll_jitter_ms = roll_jitter_ms
        self.created_ms = created_ms
        # ``file_suffix`` is "" for live segments; the log cleaner writes ``.cleaned`` segments.
        self.log_path = self.dir / (segment_file_name(base_offset, ".log") + file_suffix)
        # Unbuffered binary file: FileRegions hold it, os.pwrite/os.pread/os.sendfile use its fd.
        self.file = open(self.log_path, "r+b" if self.log_path.exists() else "w+b", buffering=0)  # noqa: SIM115
        self.fd = self.file.fileno()
        self.size = os.fstat(self.fd).st_size
        self.offset_index = OffsetIndex(self.dir / (segment_file_name(base_offset, ".index") + file_suffix),
                                        base_offset, max_index_size)
        self.time_index = TimeIndex(self.dir / (segment_file_name(base_offset, ".timeindex") + file_suffix),
                                    base_offset, max_index_size)
        self.bytes_since_last_index_entry = 0
        self._max_timestamp: int | None = None  # loaded lazily, like Kafka's maxTimestampAndOffsetSoFar
        self._offset_of_max_timestamp = -1
        self._rolling_based_timestamp: int | None = None
        self._rolling_loaded = False
        self.deleted = False
        # An inactive segment's last time-index entry is its max timestamp (written at roll or by
        # recovery), so loading it needs no scan; the active segment scans after that entry.
        self._time_index_exact = not active
        if active:
            self.make_active(max_index_size)

    @staticmethod
    def roll_jitter(segment_jitter_ms: int, segment_ms: int) -> int:
        if segment_jitter_ms <= 0:
            return 0
        return random.randrange(min(segment_jitter_ms, segment_ms))

    def make_active(self, max_index_size: int) -> None:
        self._time_index_exact = False
        self.offset_index.make_active(max_index_size)
        self.time_index.make_active(max_index_size)

    # --- timestamps -----------------------------------------------------------------------------
    def _load_largest_timestamp(self) -> None:
        ts, off = self.time_index.last_entry()
        self._max_timestamp, self._offset_of_max_timestamp = ts, off
        if self._time_index_exact and self.time_index.entries:
            return
        pos = self.offset_index.lookup(off)[1]
        for _pos, h in self.iter_headers(pos):
            if h.max_timestamp > self._max_timestamp:
                self._max_timestamp, self._offset_of_max_timestamp = h.max_timestamp, h.last_offset

    @property
    def max_timestamp_so_far(self) -> int:
        if self._max_timestamp is None:
            self._load_largest_timestamp()
        assert self._max_timestamp is not None
        return self._max_timestamp

    @property
    def offset_of_max_timestamp_so_far(self) -> int:
        if self._max_timestamp is None:
            self._load_largest_timestamp()
        return self._offset_of_max_timestamp

    def largest_timestamp(self) -> int:
        """The segment's max record timestamp, or the file's mtime when it has none (retention)."""
        ts = self.max_timestamp_so_far
        return ts if ts >= 0 else self.last_modified_ms()

    def last_modified_ms(self) -> int:
        try:
            return int(os.stat(self.log_path).st_mtime * 1000)
        except OSError:
            return 0

    def _rolling_timestamp(self) -> int | None:
        if not self._rolling_loaded:
            self._rolling_loaded = True
            first = next(self.iter_headers(0), None)
            self._rolling_based_timestamp = first[1].max_timestamp if first else None
        return self._rolling_based_timestamp

    def time_waited_for_roll(self, now_ms: int, message_timestamp: int) -> int:
        # Kafka measures segment.ms from the first batch's timestamp when it has one, else the creation time.
        t = self._rolling_based_timestamp if self._rolling_loaded else self._rolling_timestamp()
        if t is not None and t >= 0:
            return message_timestamp - t
        return now_ms - self.created_ms

    def should_roll(self, *, segment_bytes: int, segment_ms: int, messages_size: int, max_timestamp: int,
                    max_offset: int, now_ms: int) -> bool:
        # Checked before every append (one per partition of a Produce request): cheapest first.
        size = self.size
        return (size > segment_bytes - messages_size
                or (size > 0 and self.time_waited_for_roll(now_ms, max_timestamp) > segment_ms - self.roll_jitter_ms)
                or self.offset_index.is_full or self.time_index.is_full
                or not 0 <= max_offset - self.base_offset <= INT32_MAX)

    def can_convert_to_relative_offset(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= INT32_MAX

    # --- append ---------------------------------------------------------------------------------
    def append(self, data: bytes | bytearray | memoryview, batches: list[tuple[int, int, int]]) -> None:
        """Write ``data`` (whole batches) at the end; ``batches`` is [(last_offset, max_timestamp, size)].

        On any I/O error the file is truncated back to its previous size before KafkaStorageError
        is raised, so the segment never keeps a partial batch the in-memory state does not know about.
        """
        if not batches:
            return
        if not 0 <= batches[-1][0] - self.base_offset <= INT32_MAX:  # can_convert_to_relative_offset
            raise ValueError(f"offset {batches[-1][0]} does not fit segment {self.base_offset}")
        start = self.size
        if self._max_timestamp is None:
            self._load_largest_timestamp()
        if start > 0 and not self._rolling_loaded:
            self._rolling_timestamp()
        total = len(data)
        try:
            written = os.pwrite(self.fd, data, start)  # one call writes it all, short of a full disk
            if written < total:
                view = memoryview(data)
                while written < total:
                    n = os.pwrite(self.fd, view[written:], start + written)
                    if n <= 0:
                        raise OSError(errno.EIO, "short write")
                    written += n
        except OSError as e:
            try:
                os.ftruncate(self.fd, start)
            except OSError as e2:
                raise KafkaStorageError(f"write to {self.log_path} failed ({e}) and truncation failed ({e2})",
                                        ) from e2
            raise KafkaStorageError(f"write to {self.log_path} failed: {e}") from e
        self.size = start + total
        if start == 0:
            self._rolling_loaded = True
            self._rolling_based_timestamp = batches[0][1]
        pos = start
        interval = self.index_interval_bytes
        for last_offset, max_ts, size in batches:
            if max_ts > self._max_timestamp:  # type: ignore[operator]
                self._max_timestamp, self._offset_of_max_timestamp = max_ts, last_offset
            if self.bytes_since_last_index_entry > interval:
                self._index_entry(last_offset, pos)
            pos += size
            self.bytes_since_last_index_entry += size

    def _index_entry(self, last_offset: int, pos: int) -> None:
        # A full index only means a coarser index: the entries are an optimisation, never needed for
        # correctness. (A multi-batch append, or a rebuild that spaces entries differently from a
        # writer restarted mid-segment, can meet a full index; a full index also makes the next
        # append roll.)
        if not self.offset_index.is_full:
            self.offset_index.append(last_offset, pos)
        if not self.time_index.is_full:
            self.time_index.maybe_append(self._max_timestamp, self._offset_of_max_timestamp,  # type: ignore[arg-type]
                                         skip_full_check=True)
        self.bytes_since_last_index_entry = 0

    # --- scanning -------------------------------------------------------------------------------
    def iter_headers(self, start_pos: int, end_pos: int | None = None) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) of every batch from ``start_pos``: headers only, read in small chunks."""
        end = self.size if end_pos is None else end_pos
        fd, pos, buf, buf_start = self.fd, start_pos, b"", start_pos
        unpack = HEADER.unpack_from
        want = _READ_CHUNK
        while pos + RECORD_BATCH_OVERHEAD <= end:
            off = pos - buf_start
            if off + RECORD_BATCH_OVERHEAD > len(buf):
                buf, buf_start, off = os.pread(fd, want, pos), pos, 0
                if len(buf) < RECORD_BATCH_OVERHEAD:
                    return
            h = BatchHeader._make(unpack(buf, off))
            if h.batch_length < RECORD_BATCH_OVERHEAD - LOG_OVERHEAD:
                return
            yield pos, h
            size = h.batch_length + LOG_OVERHEAD
            # Small batches: one chunk holds many headers. Big ones: read just the next header.
            want = _READ_CHUNK if size < _READ_CHUNK // 2 else RECORD_BATCH_OVERHEAD
            pos += size

    def translate_offset(self, offset: int, start_pos: int = 0) -> tuple[int, int, int] | None:
        """(position, size, last_offset) of the first batch whose last offset is >= ``offset``."""
        pos = max(start_pos, self.offset_index.lookup(offset)[1])
        fd, end = self.fd, self.size
        buf, buf_start = b"", pos
        unpack = PREFIX.unpack_from
        want = _READ_CHUNK
        while pos + PREFIX_SIZE <= end:
            off = pos - buf_start
            if off + PREFIX_SIZE > len(buf):
                buf, buf_start, off = os.pread(fd, want, pos), pos, 0
                if len(buf) < PREFIX_SIZE:
                    return None
            base, length, _ple, _magic, _crc, _attrs, delta = unpack(buf, off)
            size = length + LOG_OVERHEAD
            if base + delta >= offset:
                return pos, size, base + delta
            # Small batches: one 8 KiB pread covers many headers; past big ones read only 27 bytes.
            want = _READ_CHUNK if size < _READ_CHUNK // 2 else PREFIX_SIZE
            pos += size
        return None

    def read(self, start_offset: int, max_size: int, max_position: int | None = None,
             min_one_message: bool = True) -> tuple[int, int] | None:
        """(position, size) of the bytes to send for a fetch at ``start_offset``, or None if past the end.

        The region starts at the batch containing ``start_offset``; it is cut at ``max_size``
        (KIP-74: widened to the whole first batch when ``min_one_message``) and at ``max_position``.
        """
        found = self.translate_offset(start_offset)
        if found is None:
            return None
        pos, batch_size, _last = found
        limit = self.size if max_position is None else min(max_position, self.size)
        adjusted = max(max_size, batch_size) if min_one_message else max_size
        return pos, max(0, min(limit - pos, adjusted))

    def read_next_offset(self) -> int:
        """The offset after the last batch (the base offset for an empty segment)."""
        last_off, pos = self.offset_index.lookup(1 << 62)
        nxt = self.base_offset
        for _p, h in self.iter_headers(pos):
            nxt = h.next_offset
        return nxt

    def read_batch(self, pos: int, size: int) -> RecordBatch:
        return RecordBatch(memoryview(bytearray(os.pread(self.fd, size, pos))))

    def find_offset_by_timestamp(self, timestamp: int, starting_offset: int) -> tuple[int, int, int] | None:
        """(offset, timestamp, leader epoch) of the first record with timestamp >= target and offset >= start."""
        _ts, ts_offset = self.time_index.lookup(timestamp)
        pos = self.offset_index.lookup(max(ts_offset, starting_offset))[1]
        for p, h in self.iter_headers(pos):
            if h.max_timestamp >= timestamp and h.last_offset >= starting_offset:
                batch = self.read_batch(p, h.size)
                for rec in batch:
                    if rec.timestamp >= timestamp and rec.offset >= starting_offset:
                        return rec.offset, rec.timestamp, h.partition_leader_epoch
        return None

    # --- recovery -------------------------------------------------------------------------------
    def sanity_check_indexes(self) -> bool:
        try:
            self.offset_index.sanity_check()
            self.time_index.sanity_check()
        except IndexCorruptError:
            return False
        return True

    def recover(self, on_batch: Callable[[RecordBatch], None] | None = None,
                before_truncate: Callable[[int, int], None] | None = None) -> int:
        """Rebuild both indexes from the log, CRC-checking every batch; returns the bytes truncated.

        Stops at the first incomplete, malformed or corrupt batch (or one whose offsets go backwards)
        and truncates the file there, so everything before the first bad byte is kept.
        ``before_truncate(valid_bytes, file_size)`` is called before a truncation (recovery logs it).
        """
        self.offset_index.reset()
        self.time_index.reset()
        self.bytes_since_last_index_entry = 0
        self._max_timestamp, self._offset_of_max_timestamp = -1, -1
        self._rolling_loaded = False
        size = os.fstat(self.fd).st_size
        valid = self._recover_from(size, on_batch)
        truncated = size - valid
        if truncated:
            if before_truncate is not None:
                before_truncate(valid, size)
            try:
                os.ftruncate(self.fd, valid)
            except OSError as e:
                raise KafkaStorageError(f"cannot truncate {self.log_path} during recovery: {e}") from e
        self.size = valid
        if not self.time_index.maybe_append(self._max_timestamp, self._offset_of_max_timestamp, skip_full_check=True):
            self._time_index_exact = False  # a full disk skipped the max-timestamp entry
        return truncated

    def _recover_from(self, size: int, on_batch: Callable[[RecordBatch], None] | None) -> int:
        # Reads in 1 MiB chunks with os.pread (recovery is off the hot path; copies are fine here).
        pos, expected_next = 0, self.base_offset
        interval = self.index_interval_bytes
        buf, buf_start = b"", 0
        while pos + RECORD_BATCH_OVERHEAD <= size:
            off = pos - buf_start
            if off + RECORD_BATCH_OVERHEAD > len(buf):
                buf, buf_start, off = os.pread(self.fd, _RECOVERY_CHUNK, pos), pos, 0
                if len(buf) < RECORD_BATCH_OVERHEAD:
                    break
            h = BatchHeader._make(HEADER.unpack_from(buf, off))
            bsize = h.batch_length + LOG_OVERHEAD
            if (h.batch_length < RECORD_BATCH_OVERHEAD - LOG_OVERHEAD or pos + bsize > size or h.magic != MAGIC_V2
                    or h.base_offset < expected_next or h.last_offset_delta < 0
                    or not self.can_convert_to_relative_offset(h.last_offset)):
                break
            if off + bsize > len(buf):
                buf, buf_start, off = os.pread(self.fd, max(_RECOVERY_CHUNK, bsize), pos), pos, 0
                if len(buf) < bsize:
                    break
            batch = RecordBatch(memoryview(buf)[off:off + bsize])
            if not batch.is_valid():
                break
            if h.max_timestamp > self._max_timestamp:  # type: ignore[operator]
                self._max_timestamp, self._offset_of_max_timestamp = h.max_timestamp, h.last_offset
            if self.bytes_since_last_index_entry > interval:
                self._index_entry(h.last_offset, pos)
            self.bytes_since_last_index_entry += bsize
            if on_batch is not None:
                on_batch(batch)
            expected_next = h.next_offset
            pos += bsize
        return pos

    # --- truncation, flush, lifecycle ----------------------------------------------------------
    def truncate_to(self, offset: int, now_ms: int = 0) -> int:
        """Drop every batch whose last offset is >= ``offset``; returns the bytes removed."""
        found = self.translate_offset(offset)
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        if found is None:
            return 0
        pos = found[0]
        removed = self.size - pos
        try:
            os.ftruncate(self.fd, pos)
        except OSError as e:
            raise KafkaStorageError(f"cannot truncate {self.log_path}: {e}") from e
        self.size = pos
        if pos == 0:
            self.created_ms = now_ms
        self._rolling_loaded = False
        self.bytes_since_last_index_entry = 0
        self._max_timestamp = None
        return removed

    def on_become_inactive(self) -> None:
        """At roll: record the max timestamp in the time index, trim both indexes (Kafka does the same)."""
        # The last time-index entry is the segment's max timestamp only if a full disk did not skip it.
        self._time_index_exact = self.time_index.maybe_append(self.max_timestamp_so_far,
                                                              self.offset_of_max_timestamp_so_far, skip_full_check=True)
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()

    def release_indexes(self) -> None:
        """Drop both index mappings (Kafka's LazyIndex): they are mapped again on first use."""
        self.offset_index.release()
        self.time_index.release()

    def close_files(self) -> None:
        """Close the ``.log`` descriptor of a segment that is gone (recovery deleted it)."""
        self.offset_index.close_handler()
        self.time_index.close_handler()
        self.file.close()

    def flush(self) -> None:
        try:
            os.fsync(self.fd)
            self.offset_index.flush()
            self.time_index.flush()
        except OSError as e:
            raise KafkaStorageError(f"flush of {self.log_path} failed: {e}") from e

    def close(self) -> None:
        if self._max_timestamp is not None and self._max_timestamp >= 0 and not self.deleted:
            self.time_index.maybe_append(self._max_timestamp, self._offset_of_max_timestamp, skip_full_check=True)
        self.offset_index.close()
        self.time_index.close()
        self.file.close()

    def change_file_suffixes(self, old_suffix: str, new_suffix: str) -> None:
        """Rename the three files from ``old_suffix`` to ``new_suffix`` (Kafka's changeFileSuffixes; the
        cleaner's ``.cleaned`` -> ``.swap`` -> "" steps). Open descriptors and mappings follow the rename."""

        def renamed(p: Path) -> Path:
            base = p.name[:len(p.name) - len(old_suffix)] if old_suffix and p.name.endswith(old_suffix) else p.name
            return p.with_name(base + new_suffix)

        target = renamed(self.log_path)
        os.replace(self.log_path, target)
        self.log_path = target
        self.offset_index.rename_to(renamed(self.offset_index.path))
        self.time_index.rename_to(renamed(self.time_index.path))

    def set_last_modified(self, ms: int) -> None:
        """Keep the replaced segment's mtime (retention falls back to it when there are no timestamps)."""
        try:
            os.utime(self.log_path, ns=(ms * 1_000_000, ms * 1_000_000))
        except OSError:
            pass

    def rename_to_deleted(self) -> list[Path]:
        """Rename the files with the ``.deleted`` suffix (Kafka's asynchronous delete); returns the new paths."""
        self.deleted = True
        self.offset_index.close_handler()
        self.time_index.close_handler()
        paths = []
        # The aborted-transaction index goes with its segment (Kafka's LogSegment.deleteIfExists
        # covers the .txnindex too); the log drops its entries from memory.
        txn_index = self.dir / segment_file_name(self.base_offset, ".txnindex")
        for p in (self.log_path, self.offset_index.path, self.time_index.path, txn_index):
            target = p.with_name(p.name + DELETED_SUFFIX)
            try:
                os.replace(p, target)
                paths.append(target)
            except FileNotFoundError:
                pass
        return paths

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size={self.size}, path={self.log_path})"
