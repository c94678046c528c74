"""Loading a partition directory at startup and recovering it after an unclean shutdown.

Owns Kafka's ``LogLoader`` steps: complete or discard a log cleaner swap cut short by a crash
(``.cleaned``/``.swap`` files), remove leftovers of interrupted operations (``.deleted``, ``.tmp``
files, indexes without a ``.log``), open the segments in base-offset order,
rebuild missing or insane indexes, and - when the broker did not shut down cleanly - rescan every
segment from the one holding the recovery point: each batch is CRC-checked, the first torn or
corrupt batch and everything after it (including later segments) is truncated away, indexes are
rebuilt and the leader epoch cache is refilled from the batches. Then the log end offset, log start
offset, epoch cache and producer state (latest snapshot + header replay) are made consistent.

``load_segments`` returns what it found (``LoadedLog``: the segments and offsets); the ``UnifiedLog``
installs it itself, so this module never writes a log's private state. Like Kafka, recovery does not
fsync what it scanned and leaves the recovery point where the checkpoint had it (clamped to the log
end): only a flush moves the recovery point. Every index is released once loaded (the mappings are
made again on first use), so a crash-recovery start needs one descriptor per segment, like a clean one.

Every repair is logged with what and how much, with Kafka's wording where Kafka has a line: a rebuilt
index, a truncated tail (bytes, offsets, and the batches and records its headers announce), segments
deleted after a corruption, a log emptied because its end fell below the log start offset, an
interrupted cleaner swap completed or undone, stray files removed. Must not import asyncio.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kbroker.log.config import LogConfig
from kbroker.log.errors import KafkaStorageError
from kbroker.log.leader_epoch import LeaderEpochFileCache
from kbroker.log.producer_state import ProducerStateManager
from kbroker.log.segment import LogSegment, segment_file_name
from kbroker.protocol.record_format import HEADER, LOG_OVERHEAD, RECORD_BATCH_OVERHEAD, BatchHeader
from kbroker.protocol.records import RecordBatch

if TYPE_CHECKING:
    from kbroker.log.unified_log import UnifiedLog

__all__ = ["LoadedLog", "load_segments", "rebuild_producer_state"]

logger = logging.getLogger(__name__)

_LEFTOVER_SUFFIXES = (".deleted", ".tmp", ".cleaned", ".swap")


def _is_segment_name(name: str, suffix: str) -> bool:
    return name.endswith(suffix) and len(name) == 20 + len(suffix) and name[:20].isdigit()


def _next_offset_of_file(path: str | os.PathLike[str], base: int) -> int:
    """The offset after the last complete batch of a raw ``.log`` file (``base`` when it has none)."""
    nxt = base
    with open(path, "rb", buffering=0) as f:
        fd, size, pos = f.fileno(), os.fstat(f.fileno()).st_size, 0
        while pos + RECORD_BATCH_OVERHEAD <= size:
            h = BatchHeader._make(HEADER.unpack_from(os.pread(fd, RECORD_BATCH_OVERHEAD, pos)))
            bsize = h.batch_length + LOG_OVERHEAD
            if h.batch_length < RECORD_BATCH_OVERHEAD - LOG_OVERHEAD or pos + bsize > size:
                break
            nxt = h.next_offset
            pos += bsize
    return nxt


def _complete_interrupted_swaps(d: os.PathLike[str], prefix: str) -> None:
    """Finish or undo a log cleaner swap cut short by a crash, as Kafka's LogLoader does.

    ``.cleaned`` files are an unfinished clean: deleted, and any ``.swap`` file at or above the
    lowest of their offsets is deleted too (the renaming to ``.swap`` had not completed, KAFKA-6264).
    A remaining ``.swap`` segment is complete and fsynced: the segments it replaces (base offsets in
    [its base offset, its next offset)) are deleted and it takes its live name. Index ``.swap``
    files are dropped; the indexes are rebuilt from the ``.log``.
    """
    d = Path(d)
    names = os.listdir(d)
    min_cleaned = None
    for name in names:
        if name.endswith(".cleaned"):
            if name[:20].isdigit():
                off = int(name[:20])
                min_cleaned = off if min_cleaned is None else min(min_cleaned, off)
            logger.info("%sDeleting stray .cleaned file %s (a log cleaner round cut short)", prefix, d / name)
            os.unlink(d / name)
    swaps = []
    for name in names:
        if not name.endswith(".swap") or not name[:20].isdigit():
            continue
        if (min_cleaned is not None and int(name[:20]) >= min_cleaned) or not name.endswith(".log.swap"):
            logger.info("%sDeleting swap file %s (incomplete, or an index rebuilt from the log)", prefix, d / name)
            os.unlink(d / name)
        else:
            swaps.append(name)
    if not swaps:
        return
    lo = min(int(n[:20]) for n in swaps)
    # At least base + 1: an emptied swap segment still replaces the old files of its own name.
    hi = max(max(_next_offset_of_file(d / n, int(n[:20])), int(n[:20]) + 1) for n in swaps)
    for name in os.listdir(d):
        if name.endswith(".swap") or not name[:20].isdigit() or name.endswith(".snapshot"):
            continue
        if lo <= int(name[:20]) < hi:
            logger.info("%sDeleting %s: replaced by a completed log cleaner swap", prefix, d / name)
            os.unlink(d / name)  # compacted away, but not yet renamed .deleted before the crash
    for name in swaps:
        logger.info("%sRecovering file %s: the cleaned segment replaces the old ones", prefix, d / name)
        os.replace(d / name, d / name[:-len(".swap")])


@dataclass
class LoadedLog:
    """What ``load_segments`` found: the segments (the last is active) and the offsets (Kafka's
    LoadedLogOffsets)."""

    segments: list[LogSegment]
    log_start_offset: int
    log_end_offset: int
    recovery_point: int


def _describe_tail(path: Path, base: int, start: int, size: int) -> str:
    """What a truncated tail held, by the headers it announces: batches, records and offsets (best effort)."""
    batches = records = 0
    first = last = -1
    try:
        with open(path, "rb", buffering=0) as f:
            fd, pos = f.fileno(), start
            while pos + RECORD_BATCH_OVERHEAD <= size:
                raw = os.pread(fd, RECORD_BATCH_OVERHEAD, pos)
                if len(raw) < RECORD_BATCH_OVERHEAD:
                    break
                h = BatchHeader._make(HEADER.unpack_from(raw))
                bsize = h.batch_length + LOG_OVERHEAD
                if h.batch_length < RECORD_BATCH_OVERHEAD - LOG_OVERHEAD or h.base_offset < base or h.records_count < 0:
                    break
                batches += 1
                records += h.records_count
                first = h.base_offset if first < 0 else first
                last = h.last_offset
                pos += bsize
    except OSError:
        pass
    if not batches:
        return "no complete batch header"
    return f"{batches} batches with {records} records (offsets {first} to {last} by their headers)"


def new_log_segments(d: Path, config: LogConfig, *, log_start_offset: int, recovery_point: int,
                     had_clean_shutdown: bool, time_ms: Callable[[], int]) -> LoadedLog:
    """What `load_segments` finds in a directory the caller has just created: nothing to complete,
    delete, load or recover, so the first segment is created at once (the same segment, offsets and
    recovery point). Hosting 1,000 new partitions spent a seventh of its time listing, probing and
    truncating empty directories (issue 17)."""
    c = config
    active = LogSegment(d, log_start_offset, index_interval_bytes=c.index_interval_bytes,
                        max_index_size=c.segment_index_bytes, created_ms=time_ms(),
                        roll_jitter_ms=LogSegment.roll_jitter(c.segment_jitter_ms, c.segment_ms), active=True)
    active.make_active(c.segment_index_bytes)
    active.release_indexes()
    point = log_start_offset if had_clean_shutdown else min(recovery_point, log_start_offset)
    return LoadedLog([active], log_start_offset, log_start_offset, point)


def load_segments(d: Path, config: LogConfig, *, log_start_offset: int, recovery_point: int, had_clean_shutdown: bool,
                  leader_epoch_cache: LeaderEpochFileCache, producer_state: ProducerStateManager,
                  time_ms: Callable[[], int], topic_partition: str) -> LoadedLog:
    """Kafka's LogLoader.load: open, check and (after a crash) recover the segments of one partition."""
    c = config
    prefix = f"[LogLoader partition={topic_partition}, dir={d.parent}] "
    try:
        _complete_interrupted_swaps(d, prefix)
        names = os.listdir(d)
        for name in names:
            if name.endswith(_LEFTOVER_SUFFIXES):
                logger.debug("%sDeleting stray temporary file %s", prefix, d / name)
                os.unlink(d / name)
        names = os.listdir(d)
    except OSError as e:
        raise KafkaStorageError(f"cannot list {d}: {e}") from e
    bases = sorted(int(n[:20]) for n in names if _is_segment_name(n, ".log"))
    base_set = set(bases)
    for n in names:  # an index without its .log is an orphan of an interrupted deletion
        for suffix in (".index", ".timeindex"):
            if _is_segment_name(n, suffix) and int(n[:20]) not in base_set:
                logger.warning("%sFound an orphaned index file %s, with no corresponding log file.", prefix, d / n)
                os.unlink(d / n)

    epochs_before = leader_epoch_cache.entries()

    def on_batch(batch: RecordBatch) -> None:
        epoch = batch.partition_leader_epoch
        if epoch >= 0 and epoch > leader_epoch_cache.latest_epoch:
            leader_epoch_cache.assign(epoch, batch.base_offset, flush=False)

    segments: list[LogSegment] = []
    for base in bases:
        missing_index = not (d / segment_file_name(base, ".index")).exists() or \
            not (d / segment_file_name(base, ".timeindex")).exists()
        try:
            # Kafka's LogSegment.created is the load time; segment.ms prefers the first batch's timestamp.
            seg = LogSegment(d, base, index_interval_bytes=c.index_interval_bytes,
                             max_index_size=c.segment_index_bytes, created_ms=time_ms(),
                             roll_jitter_ms=LogSegment.roll_jitter(c.segment_jitter_ms, c.segment_ms))
            if missing_index:
                if had_clean_shutdown or base < recovery_point:
                    logger.error("%sCould not find offset index file corresponding to log file %s, recovering "
                                 "segment and rebuilding index files...", prefix, seg.log_path)
                _recover_segment(seg, None, prefix)
            elif not seg.sanity_check_indexes():
                logger.warning("%sFound a corrupted index file corresponding to log file %s, recovering segment "
                               "and rebuilding index files...", prefix, seg.log_path)
                _recover_segment(seg, None, prefix)
        except OSError as e:
            raise KafkaStorageError(f"cannot open segment {base} in {d}: {e}") from e
        seg.release_indexes()
        segments.append(seg)

    if not had_clean_shutdown and segments:
        start = 0
        for i, seg in enumerate(segments):
            if seg.base_offset <= recovery_point:
                start = i
        for i in range(start, len(segments)):
            seg = segments[i]
            logger.debug("%sRecovering unflushed segment %d", prefix, seg.base_offset)
            truncated = _recover_segment(seg, on_batch, prefix)
            seg.release_indexes()
            if truncated > 0:
                # Everything after the first bad byte is suspect: drop the later segments (Kafka does).
                doomed = segments[i + 1:]
                if doomed:
                    logger.warning("%sDeleting segments as part of log recovery: %s", prefix,
                                   ", ".join(f"{s.log_path.name} ({s.size} bytes)" for s in doomed))
                for later in doomed:
                    later.rename_to_deleted()
                    later.close_files()
                    for suffix in (".log", ".index", ".timeindex"):
                        p = d / (segment_file_name(later.base_offset, suffix) + ".deleted")
                        if p.exists():
                            os.unlink(p)
                del segments[i + 1:]
                break

    if not segments:
        segments.append(LogSegment(d, log_start_offset, index_interval_bytes=c.index_interval_bytes,
                                   max_index_size=c.segment_index_bytes, created_ms=time_ms(),
                                   roll_jitter_ms=LogSegment.roll_jitter(c.segment_jitter_ms, c.segment_ms),
                                   active=True))
    active = segments[-1]
    active.make_active(c.segment_index_bytes)
    log_end_offset = active.read_next_offset()
    active.release_indexes()
    if log_end_offset < log_start_offset:
        # Recovery (or lost files) left less than the checkpointed log start offset: like Kafka's
        # LogLoader, drop every segment and start empty at the log start offset.
        logger.warning("%sDeleting all segments because logEndOffset (%d) is smaller than logStartOffset %d. This "
                       "could happen if segment files were deleted from the file system.", prefix, log_end_offset,
                       log_start_offset)
        for seg in segments:
            seg.rename_to_deleted()
            seg.close_files()
        for name in os.listdir(d):
            if name.endswith(".deleted"):
                os.unlink(d / name)
        segments = [LogSegment(d, log_start_offset, index_interval_bytes=c.index_interval_bytes,
                               max_index_size=c.segment_index_bytes, created_ms=time_ms(),
                               roll_jitter_ms=LogSegment.roll_jitter(c.segment_jitter_ms, c.segment_ms),
                               active=True)]
        leader_epoch_cache.clear()
        log_end_offset = log_start_offset
    log_start_offset = max(log_start_offset, segments[0].base_offset)
    # Kafka: only a clean shutdown vouches for the data; otherwise the recovery point stays where the
    # checkpoint had it (never past the end), so a second crash scans the same segments again.
    new_recovery_point = log_end_offset if had_clean_shutdown else min(recovery_point, log_end_offset)
    leader_epoch_cache.truncate_from_end(log_end_offset, flush=False)
    leader_epoch_cache.truncate_from_start(log_start_offset, flush=False)
    if leader_epoch_cache.entries() != epochs_before:
        # Written once, and only when recovery changed it; not fsynced (Kafka's LogLoader calls
        # truncateFromEndAsyncFlush, KAFKA-15046): the log's next flush with data syncs it, and a
        # crash before that rebuilds the same entries from the batches. A one-voter node's restart
        # drops each partition's entry of the last epoch (it began at the log end: no batch of it).
        leader_epoch_cache.flush(sync=False)
    producer_state.delete_snapshots_above(log_end_offset)
    return LoadedLog(segments, log_start_offset, log_end_offset, new_recovery_point)


def _recover_segment(seg: LogSegment, on_batch: Callable[[RecordBatch], None] | None, prefix: str) -> int:
    """Rebuild a segment's indexes from its log; log what a truncation dropped. Returns the bytes truncated."""
    dropped: list[str] = []

    def before_truncate(valid: int, size: int) -> None:
        dropped.append(f"Found invalid messages in log segment {seg.log_path} at byte offset {valid}: truncating "
                       f"{size - valid} bytes ({_describe_tail(seg.log_path, seg.base_offset, valid, size)})")

    try:
        truncated = seg.recover(on_batch, before_truncate)
    except OSError as e:
        raise KafkaStorageError(f"recovery of {seg.log_path} failed: {e}") from e
    if truncated:
        logger.warning("%s%s. Corruption found in segment %d, truncating to offset %d", prefix, dropped[0],
                       seg.base_offset, seg.read_next_offset())
    return truncated


def rebuild_producer_state(log: UnifiedLog) -> None:
    """Latest snapshot at or below the log end offset, then replay batch headers up to the end."""
    ps = log.producer_state
    ps.load(log.log_start_offset, log.log_end_offset)
    start = ps.map_end_offset
    for i, seg in enumerate(log.segments):
        nxt = log.segments[i + 1].base_offset if i + 1 < len(log.segments) else None
        if nxt is not None and nxt <= start:
            continue
        pos = seg.offset_index.lookup(start)[1] if seg.base_offset <= start else 0
        for hpos, h in seg.iter_headers(pos):
            marker = None
            if h.is_control and h.producer_id >= 0:
                from kbroker.log.unified_log import marker_type  # noqa: PLC0415 - builds on this module

                marker = marker_type(os.pread(seg.fd, h.size, hpos))
            log.on_completed_txn(ps.replay(h, marker), seg.base_offset)
    ps.map_end_offset = log.log_end_offset
