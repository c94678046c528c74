"""Log compaction of one partition: Kafka's ``Cleaner.doClean`` and the segment swap it ends with.

Owns the offset map (latest offset per key over the dirty section, bounded like Kafka's
``SkimpyOffsetMap`` by ``log.cleaner.dedupe.buffer.size``), the record filter (keep a record only when
its offset is the latest for its key or lies past the map; drop keyless records; keep tombstones
until their batch's delete horizon, KIP-534), the batch rebuild (same base offset, same
lastOffsetDelta, producer fields and partition leader epoch; records re-encoded with their original
offsets and timestamps; re-compressed with the batch's codec; an emptied batch is kept as a bare
header only where Kafka keeps one: the last batch of an active producer, or the last batch of the
cleaning round), the records of aborted transactions and the transaction markers (Kafka's
CleanedTransactionMetadata, below), grouping segments by size, writing each group into a ``.cleaned``
segment, and the swap (``.cleaned`` -> ``.swap`` -> live name, old segments renamed ``.deleted`` with
their ``.txnindex`` and unlinked after ``file.delete.delay.ms``; the new segment's ``.txnindex`` holds
the aborted transactions whose marker it keeps).

Transactions (Kafka's ``CleanedTransactionMetadata`` and ``LogCleaner``'s batch retention, KIP-534 for
the markers' delete horizon), walking the log from its start each round:
- a transactional data batch inside an aborted transaction (from the ``.txnindex``) is dropped (neither
  mapped nor kept); the transaction is then "observed" in this round;
- an ABORT marker is kept while its transaction still had data in this round (its ``.txnindex``
  entry is carried into the cleaned segment); a COMMIT marker is kept while a batch of its
  transaction was read in this round;
- otherwise the marker is discardable: the first round that finds it so stamps its batch with a delete
  horizon (now + ``delete.retention.ms``), and the first round after the horizon removes it, so a
  consumer that read the data has ``delete.retention.ms`` to read the marker too.

Threading: ``Cleaner.clean`` runs on a worker thread. It only reads inactive segments (whose bytes
never change) through their open descriptors with ``os.pread`` and writes new ``.cleaned`` files no
reader knows about. The only step that touches the ``UnifiedLog`` is :func:`replace_segments`, which
``clean`` hands to the ``run_on_log_thread`` callable (the broker runs it on the event loop with
``call_soon_threadsafe`` and waits for it), so it never races appends, reads or retention.
Never imports asyncio.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kbroker.log.errors import KafkaStorageError
from kbroker.log.segment import LogSegment
from kbroker.protocol.compression import CompressionType, compress
from kbroker.protocol.record_format import (
    COMPRESSION_CODEC_MASK,
    DELETE_HORIZON_FLAG_MASK,
    HEADER,
    LOG_OVERHEAD,
    MAGIC_V2,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    ControlRecordType,
    Record,
    encode_record,
)
from kbroker.protocol.records import InvalidRecordError, RecordBatch, _assemble
from kbroker.protocol.varint import VarintError, read_varint, read_varlong

if TYPE_CHECKING:
    from kbroker.log.unified_log import UnifiedLog

__all__ = ["CLEANED_SUFFIX", "SWAP_SUFFIX", "OffsetMap", "Cleaner", "CleanAborted", "replace_segments",
           "CleanResult", "CleanedTransactionMetadata", "record_keys"]

logger = logging.getLogger(__name__)

CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
_INT32_MAX = 2147483647
_CHUNK = 1 << 20
# Kafka's SkimpyOffsetMap spends 16 bytes (an MD5 of the key) + 8 (the offset) per slot and fills
# the map to log.cleaner.io.buffer.load.factor (0.9) before it stops.
_BYTES_PER_ENTRY = 24
_LOAD_FACTOR = 0.9


class CleanAborted(Exception):
    """The clean was abandoned (shutdown, log deleted or changed under it); nothing was swapped in."""


class OffsetMap:
    """key -> latest offset over the dirty section, with a slot budget like Kafka's SkimpyOffsetMap.

    Keys are stored whole (no MD5 digests, so no collisions); the budget counts entries the way
    Kafka's does, so ``log.cleaner.dedupe.buffer.size`` bounds how much of the dirty section one
    round can cover.
    """

    def __init__(self, memory: int) -> None:
        self.slots = max(1, memory // _BYTES_PER_ENTRY)
        self.max_entries = max(1, int(self.slots * _LOAD_FACTOR))
        self._map: dict[bytes, int] = {}
        self.latest_offset = -1

    def __len__(self) -> int:
        return len(self._map)

    def put(self, key: bytes, offset: int) -> bool:
        """Record ``offset`` for ``key``; False (nothing stored) when a new key no longer fits."""
        if key not in self._map and len(self._map) >= self.max_entries:
            return False
        self._map[key] = offset
        self.latest_offset = offset
        return True

    def get(self, key: bytes) -> int:
        return self._map.get(key, -1)

    def update_latest_offset(self, offset: int) -> None:
        if offset > self.latest_offset:
            self.latest_offset = offset


@dataclass
class CleanResult:
    end_offset: int  # the new cleaner checkpoint: the first offset not covered by this round's map
    bytes_before: int = 0
    bytes_after: int = 0
    records_read: int = 0
    records_kept: int = 0
    groups: list[list[int]] = field(default_factory=list)  # base offsets of the replaced segments
    markers_removed: int = 0  # transaction markers past their delete horizon, removed this round


def iter_file_batches(seg: LogSegment, abort: Callable[[], bool] | None = None) -> Iterator[tuple[int, RecordBatch]]:
    """(position, batch) for every complete batch of an inactive segment, read with ``os.pread``."""
    pos, size, fd = 0, seg.size, seg.fd
    buf, buf_start = b"", 0
    while pos + RECORD_BATCH_OVERHEAD <= size:
        if abort is not None and abort():
            raise CleanAborted("cleaning aborted")
        off = pos - buf_start
        if off + RECORD_BATCH_OVERHEAD > len(buf):
            buf, buf_start, off = os.pread(fd, _CHUNK, pos), pos, 0
            if len(buf) < RECORD_BATCH_OVERHEAD:
                return
        h = BatchHeader._make(HEADER.unpack_from(buf, off))
        bsize = h.batch_length + LOG_OVERHEAD
        if h.batch_length < RECORD_BATCH_OVERHEAD - LOG_OVERHEAD or pos + bsize > size or h.magic != MAGIC_V2:
            raise KafkaStorageError(f"unexpected bytes at position {pos} of {seg.log_path} while cleaning")
        if off + bsize > len(buf):
            buf, buf_start, off = os.pread(fd, max(_CHUNK, bsize), pos), pos, 0
            if len(buf) < bsize:
                return
        yield pos, RecordBatch(memoryview(buf)[off:off + bsize])
        pos += bsize


def record_keys(b: RecordBatch) -> list[tuple[int, bytes | None, bool]]:
    """(offset, key, has value) of every record of ``b``: a lean walk that skips timestamps,
    values and headers (the cleaner's two passes need only these; a full decode happens only for
    batches it rebuilds)."""
    count = b.records_count
    if count <= 0:
        return []
    buf = b.uncompressed_records()
    base = b.base_offset
    out: list[tuple[int, bytes | None, bool]] = []
    pos, end = 0, len(buf)
    try:
        for _ in range(count):
            c = buf[pos]
            size, pos = ((c >> 1) ^ -(c & 1), pos + 1) if c < 0x80 else read_varint(buf, pos)
            rec_end = pos + size
            if size < 0 or rec_end > end:
                raise InvalidRecordError(f"record size {size} runs past the batch")
            pos += 1  # attributes
            c = buf[pos]
            pos = pos + 1 if c < 0x80 else read_varlong(buf, pos)[1]  # timestamp delta
            c = buf[pos]
            delta, pos = ((c >> 1) ^ -(c & 1), pos + 1) if c < 0x80 else read_varint(buf, pos)
            c = buf[pos]
            klen, pos = ((c >> 1) ^ -(c & 1), pos + 1) if c < 0x80 else read_varint(buf, pos)
            key = None
            if klen >= 0:
                key = bytes(buf[pos:pos + klen])
                pos += klen
            c = buf[pos]
            vlen = (c >> 1) ^ -(c & 1) if c < 0x80 else read_varint(buf, pos)[0]
            out.append((base + delta, key, vlen >= 0))
            pos = rec_end
    except (IndexError, VarintError) as e:
        raise InvalidRecordError(f"malformed record in batch at offset {base}: {e}") from e
    return out


def _empty_batch(b: RecordBatch) -> bytearray:
    """A header-only batch (recordsCount 0) that keeps the offsets and producer fields of ``b``
    (Kafka's DefaultRecordBatch.writeEmptyHeader: no compression, both timestamps = maxTimestamp)."""
    attrs = b.attributes & ~COMPRESSION_CODEC_MASK & ~DELETE_HORIZON_FLAG_MASK
    fields = (b.base_offset, b.partition_leader_epoch, attrs, b.last_offset_delta, b.max_timestamp, b.max_timestamp,
              b.producer_id, b.producer_epoch, b.base_sequence, 0)
    return _assemble(b"", fields)


def _rebuilt_batch(b: RecordBatch, kept: list[Record], delete_horizon: int) -> bytearray:
    """``b`` with only ``kept`` records, as Kafka's MemoryRecords.buildRetainedRecordsInto builds it:
    same base offset and lastOffsetDelta (the producer's last sequence must survive), same producer
    fields, codec and timestamp type; the base timestamp is the delete horizon when one is set."""
    attrs = b.attributes & ~DELETE_HORIZON_FLAG_MASK
    log_append = bool(attrs & TIMESTAMP_TYPE_MASK)
    if delete_horizon >= 0:
        base_ts = delete_horizon
        attrs |= DELETE_HORIZON_FLAG_MASK
    else:
        base_ts = kept[0].timestamp if not log_append else b.base_timestamp
    if log_append:
        max_ts = b.max_timestamp
        # Under LogAppendTime every record reads the batch's maxTimestamp; the deltas are unused.
        section = b"".join(encode_record(r.offset - b.base_offset, 0, r.key, r.value, r.headers) for r in kept)
    else:
        max_ts = max(r.timestamp for r in kept)
        section = b"".join(encode_record(r.offset - b.base_offset, r.timestamp - base_ts, r.key, r.value, r.headers)
                           for r in kept)
    codec = attrs & COMPRESSION_CODEC_MASK
    if codec != CompressionType.NONE:
        section = compress(codec, section)
    fields = (b.base_offset, b.partition_leader_epoch, attrs, b.last_offset_delta, base_ts, max_ts,
              b.producer_id, b.producer_epoch, b.base_sequence, len(kept))
    return _assemble(section, fields)


class CleanedTransactionMetadata:
    """The transactions met while one cleaning round walks the log in offset order (Kafka's
    CleanedTransactionMetadata): which aborted transaction each producer is inside, whether its data
    was seen, and which producers have committed data pending their marker."""

    def __init__(self, aborted: list[tuple[int, int, int]]) -> None:
        # (producer id, first offset, marker offset), in first-offset order.
        self._aborted = sorted(aborted, key=lambda t: (t[1], t[2]))
        self._next = 0
        self._ongoing_aborted: dict[int, list[int]] = {}  # producer id -> [marker offset, observed 0/1]
        self._ongoing_committed: set[int] = set()
        # Marker offsets of the aborted transactions whose index entries the cleaned log keeps.
        self.kept_aborted: set[int] = set()

    def _consume_up_to(self, offset: int) -> None:
        while self._next < len(self._aborted) and self._aborted[self._next][1] <= offset:
            pid, _first, last = self._aborted[self._next]
            self._ongoing_aborted[pid] = [last, 0]
            self._next += 1

    def on_batch_read(self, b: RecordBatch) -> bool:
        """A data batch: True when it belongs to an aborted transaction (discard it)."""
        self._consume_up_to(b.last_offset)
        if not b.is_transactional or b.producer_id < 0:
            return False
        ongoing = self._ongoing_aborted.get(b.producer_id)
        if ongoing is not None:
            ongoing[1] = 1
            return True
        self._ongoing_committed.add(b.producer_id)
        return False

    def on_control_batch_read(self, b: RecordBatch) -> bool:
        """A control batch: True when the marker may go (once its delete horizon passed)."""
        self._consume_up_to(b.last_offset)
        try:
            first = next(iter(b.iter_records()), None)
        except (InvalidRecordError, VarintError, ValueError):
            return False
        if first is None:
            return True  # an emptied control batch: already cleaned
        key = first.key
        if key is None or len(key) < 4:
            return False
        control_type = int.from_bytes(bytes(key[2:4]), "big", signed=True)
        pid = b.producer_id
        if control_type == ControlRecordType.ABORT:
            ongoing = self._ongoing_aborted.pop(pid, None)
            if ongoing is not None and ongoing[1]:
                self.kept_aborted.add(ongoing[0])  # its data is still in this round: keep marker and entry
                return False
            return True
        if control_type == ControlRecordType.COMMIT:
            if pid in self._ongoing_committed:
                self._ongoing_committed.discard(pid)
                return False
            return True
        return False


class Cleaner:
    """One cleaning round over one log (Kafka's ``Cleaner``); stateless between rounds."""

    def __init__(self, dedupe_buffer_size: int = 134217728, *,
                 abort: Callable[[], bool] | None = None,
                 run_on_log_thread: Callable[[Callable[[], bool]], bool] | None = None,
                 hook: Callable[[str], None] | None = None) -> None:
        self.dedupe_buffer_size = dedupe_buffer_size
        self._abort = abort or (lambda: False)
        # Runs the swap where the log is owned (the event loop); default: call it right here.
        self._run_on_log_thread = run_on_log_thread or (lambda fn: fn())
        # Tests: called at the named steps ("cleaned", "swap-renamed", "old-renamed", "old-deleted", "swapped").
        self._hook = hook
        # producer id -> (first offset, marker offset) of its aborted transactions (this round).
        self._aborted: dict[int, list[tuple[int, int]]] = {}
        self._txns = CleanedTransactionMetadata([])

    def _is_aborted(self, b: RecordBatch) -> bool:
        """A data batch of an aborted transaction (its records must not survive compaction)."""
        if not b.is_transactional or b.is_control or b.producer_id < 0:
            return False
        return any(first <= b.base_offset < last for first, last in self._aborted.get(b.producer_id, ()))

    # --- the offset map ------------------------------------------------------------------------------
    def build_offset_map(self, segments: list[LogSegment], start: int, end: int) -> OffsetMap:
        """Latest offset per key for records in [start, end) (Kafka's buildOffsetMap)."""
        m = OffsetMap(self.dedupe_buffer_size)
        for i, seg in enumerate(segments):
            next_start = segments[i + 1].base_offset if i + 1 < len(segments) else end
            for _pos, b in iter_file_batches(seg, self._abort):
                last = b.last_offset
                if last < start:
                    continue
                if b.base_offset >= end:
                    break
                if not b.is_control and not self._is_aborted(b):
                    for offset, key, _has_value in record_keys(b):
                        if key is not None and start <= offset < end and not m.put(key, offset):
                            return m  # full: the round stops at the last offset mapped, as in Kafka
                m.update_latest_offset(min(last, end - 1))
            m.update_latest_offset(min(next_start, end) - 1)
        return m

    # --- one round -------------------------------------------------------------------------------------
    def clean(self, log: UnifiedLog, segments: list[LogSegment], first_dirty: int, first_uncleanable: int,
              now_ms: int, last_offsets_of_producers: dict[int, int],
              aborted_txns: list[tuple[int, int, int]] | None = None) -> CleanResult:
        """Clean ``segments`` (every inactive segment below ``first_uncleanable``, oldest first).

        ``last_offsets_of_producers`` (producer id -> last data offset, read on the log's thread)
        keeps the batches that hold an active producer's last sequence; ``aborted_txns`` (producer
        id, first offset, marker offset), from the aborted-transaction index, are dropped. Returns
        the new checkpoint.
        """
        self._aborted = {}
        for pid, first, last in aborted_txns or ():
            self._aborted.setdefault(pid, []).append((first, last))
        self._txns = CleanedTransactionMetadata(list(aborted_txns or ()))
        dirty = [s for i, s in enumerate(segments)
                 if (segments[i + 1].base_offset if i + 1 < len(segments) else first_uncleanable) > first_dirty]
        m = self.build_offset_map(dirty, first_dirty, first_uncleanable)
        end_offset = m.latest_offset + 1
        result = CleanResult(end_offset)
        if end_offset <= first_dirty:
            raise CleanAborted("nothing to clean")
        to_clean = [s for s in segments if s.base_offset < end_offset]
        c = log.config
        for group in group_segments_by_size(to_clean, c.segment_bytes, c.segment_index_bytes, first_uncleanable):
            self._clean_segments(log, group, m, now_ms, c.delete_retention_ms, last_offsets_of_producers,
                                 first_uncleanable, result)
        return result

    def _clean_segments(self, log: UnifiedLog, group: list[LogSegment], m: OffsetMap, now_ms: int,
                        delete_retention_ms: int, producers: dict[int, int], upper_bound: int,
                        result: CleanResult) -> None:
        c = log.config
        base = group[0].base_offset
        for suffix in (".log", ".index", ".timeindex"):  # a leftover of an earlier, abandoned round
            for ext in (CLEANED_SUFFIX, SWAP_SUFFIX):
                try:
                    os.unlink(log.dir / f"{base:020d}{suffix}{ext}")
                except FileNotFoundError:
                    pass
        cleaned = LogSegment(log.dir, base, index_interval_bytes=c.index_interval_bytes,
                             max_index_size=c.segment_index_bytes, active=True, file_suffix=CLEANED_SUFFIX)
        swapped = False
        try:
            for seg in group:
                self._clean_into(seg, cleaned, m, now_ms, delete_retention_ms, producers, upper_bound, result)
                result.bytes_before += seg.size
            cleaned.on_become_inactive()
            cleaned.flush()  # durable before it can replace anything
            mtime = group[-1].last_modified_ms()
            if mtime > 0:  # 0: the old file is gone already, and the swap below will refuse anyway
                cleaned.set_last_modified(mtime)
            result.bytes_after += cleaned.size
            if self._hook:
                self._hook("cleaned")
            if self._abort():
                raise CleanAborted("cleaning aborted")
            kept_aborted = set(self._txns.kept_aborted)
            swapped = self._run_on_log_thread(lambda: replace_segments(
                log, cleaned, group, self._hook, keep_aborted=lambda last: last in kept_aborted))
            if not swapped:
                raise CleanAborted(f"log {log.dir.name} changed during cleaning")
            result.groups.append([s.base_offset for s in group])
            if self._hook:
                self._hook("swapped")
        finally:
            if not swapped:
                cleaned.close()
                for p in (cleaned.log_path, cleaned.offset_index.path, cleaned.time_index.path):
                    try:
                        os.unlink(p)
                    except FileNotFoundError:
                        pass

    def _clean_into(self, seg: LogSegment, dest: LogSegment, m: OffsetMap, now_ms: int, delete_retention_ms: int,
                    producers: dict[int, int], upper_bound: int, result: CleanResult) -> None:
        """Filter one source segment into ``dest`` (Kafka's cleanInto + MemoryRecords.filterTo)."""
        latest = m.latest_offset
        out: list[bytes | bytearray | memoryview] = []
        infos: list[tuple[int, int, int]] = []
        out_bytes = 0
        for _pos, b in iter_file_batches(seg, self._abort):
            last = b.last_offset
            kept_batch: bytes | bytearray | memoryview | None
            if b.is_control:
                discardable = self._txns.on_control_batch_read(b)
                horizon = b.delete_horizon_ms if b.has_delete_horizon else -1
                if not discardable:
                    kept_batch = b.buf
                elif horizon >= 0 and horizon <= now_ms:
                    kept_batch = None  # past its delete horizon: the marker goes (KIP-534)
                    result.markers_removed += 1
                elif horizon < 0:
                    kept_batch = _rebuilt_batch(b, list(b.iter_records()), now_ms + delete_retention_ms)
                else:
                    kept_batch = b.buf
            elif self._txns.on_batch_read(b):
                result.records_read += b.records_count
                retain = (producers.get(b.producer_id) == last) or last + 1 == upper_bound
                kept_batch = _empty_batch(b) if retain else None
            else:
                horizon = b.delete_horizon_ms if b.has_delete_horizon else -1
                keep_offsets: set[int] = set()
                n = 0
                tombstones = False
                for offset, key, has_value in record_keys(b):
                    n += 1
                    if offset > latest:
                        keep = True
                    elif key is None:
                        keep = False  # Kafka counts it as an invalid message and drops it
                    else:
                        keep = offset >= m.get(key) and (has_value or horizon < 0 or now_ms < horizon)
                    if keep:
                        keep_offsets.add(offset)
                        tombstones = tombstones or not has_value
                result.records_read += n
                result.records_kept += len(keep_offsets)
                set_horizon = tombstones and horizon < 0
                if len(keep_offsets) == n and n > 0 and not set_horizon:
                    kept_batch = b.buf
                elif keep_offsets:
                    kept = [r for r in b.iter_records() if r.offset in keep_offsets]
                    kept_batch = _rebuilt_batch(b, kept, now_ms + delete_retention_ms if set_horizon else horizon)
                elif (b.producer_id >= 0 and producers.get(b.producer_id) == last) or last + 1 == upper_bound:
                    # Kafka's RETAIN_EMPTY: the producer's last sequence, or the round's last offset, survive.
                    kept_batch = _empty_batch(b)
                else:
                    kept_batch = None
            if kept_batch is None:
                continue
            if out_bytes + len(kept_batch) > _CHUNK and out:
                dest.append(b"".join(out), infos)
                out, infos, out_bytes = [], [], 0
            max_ts = HEADER.unpack_from(kept_batch, 0)[8]
            out.append(kept_batch if not isinstance(kept_batch, memoryview) else bytes(kept_batch))
            infos.append((last, max_ts, len(kept_batch)))
            out_bytes += len(kept_batch)
        if out:
            dest.append(b"".join(out), infos)


def group_segments_by_size(segments: list[LogSegment], max_size: int, max_index_size: int,
                           first_uncleanable: int) -> list[list[LogSegment]]:
    """Consecutive segments whose total log and index sizes stay within one segment's limits and
    whose offsets fit a relative (int32) offset (Kafka's groupSegmentsBySize)."""
    groups: list[list[LogSegment]] = []
    i = 0
    while i < len(segments):
        group = [segments[i]]
        log_size = segments[i].size
        idx = segments[i].offset_index.size_in_bytes
        tidx = segments[i].time_index.size_in_bytes
        i += 1
        while i < len(segments):
            s = segments[i]
            last_estimate = (segments[i + 1].base_offset if i + 1 < len(segments) else first_uncleanable) - 1
            if (log_size + s.size <= max_size and idx + s.offset_index.size_in_bytes <= max_index_size
                    and tidx + s.time_index.size_in_bytes <= max_index_size
                    and (s.size == 0 or last_estimate - group[0].base_offset <= _INT32_MAX)):
                group.append(s)
                log_size += s.size
                idx += s.offset_index.size_in_bytes
                tidx += s.time_index.size_in_bytes
                i += 1
            else:
                break
        groups.append(group)
    return groups


def replace_segments(log: UnifiedLog, new: LogSegment, old: list[LogSegment],
                     hook: Callable[[str], None] | None = None,
                     keep_aborted: Callable[[int], bool] | None = None) -> bool:
    """Swap ``new`` (a ``.cleaned`` segment) in for ``old``; runs on the thread that owns the log.

    Kafka's LocalLog.replaceSegments order, which recovery relies on: ``.cleaned`` -> ``.swap``, the
    new segment joins the log, the old ones are renamed ``.deleted`` (their open files stay readable
    for FileRegions in flight and are unlinked after ``file.delete.delay.ms``), then ``.swap`` -> the
    live names. Returns False, touching nothing, when the old segments are no longer all in the log
    (retention, DeleteRecords, truncation or deletion got there first) or the log is offline.
    """
    # The caller runs this on the log's own thread: no lock needed, nothing else mutates the log meanwhile.
    if log.offline or not old or any(s.deleted for s in old):
        return False
    try:
        i = log.segments.index(old[0])
    except ValueError:
        return False
    if log.segments[i:i + len(old)] != old or i + len(old) >= len(log.segments):
        return False  # never the active segment
    try:
        new.change_file_suffixes(CLEANED_SUFFIX, SWAP_SUFFIX)
    except OSError as e:
        raise KafkaStorageError(f"cannot rename cleaned segment {new.log_path}: {e}") from e
    if hook:
        hook("swap-renamed")
    del log.segments[i:i + len(old)]
    del log._bases[i:i + len(old)]
    log._add_segment(new)
    now = log._time()
    for seg in old:
        try:
            paths = seg.rename_to_deleted()
        except OSError as e:
            log.offline = True
            raise KafkaStorageError(f"cannot delete replaced segment {seg.log_path}: {e}") from e
        log._pending_deletes.append((now + log.config.file_delete_delay_ms, paths, seg))
    if hook:
        hook("old-renamed")  # the old .txnindex files are .deleted, the new one is not written yet
    try:
        # The old segments' .txnindex files went with them: the new segment's holds the aborted
        # transactions whose markers it kept (Kafka's cleanedIndex).
        log.aborted_txns.replace_segments([s.base_offset for s in old], new.base_offset,
                                          keep_aborted or (lambda _last: True))
    except OSError as e:
        log.offline = True
        raise KafkaStorageError(f"cannot write the transaction index of {new.log_path}: {e}") from e
    if hook:
        hook("old-deleted")
    try:
        new.change_file_suffixes(SWAP_SUFFIX, "")
    except OSError as e:
        log.offline = True  # the next start completes the swap from the .swap files
        raise KafkaStorageError(f"cannot rename swap segment {new.log_path}: {e}") from e
    log.delete_pending_files(now)
    return True
