"""Loading a partition directory at startup and recovering it after an unclean shutdown.

Owns Kafka's ``LogLoader`` steps: complete or discard a log cleaner swap cut short by a crash
(``.cleaned``/``.swap`` files), remove leftovers of interrupted operations (``.deleted``, ``.tmp``
files, indexes without a ``.log``), open the segments in base-offset order,
rebuild missing or insane indexes, and - when the broker did not shut down cleanly - rescan every
segment from the one holding the recovery point: each batch is CRC-checked, the first torn or
corrupt batch and everything after it (including later segments) is truncated away, indexes are
rebuilt and the leader epoch cache is refilled from the batches. Then the log end offset, log start
offset, epoch cache and producer state (latest snapshot + header replay) are made consistent.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from kbroker.log.errors import KafkaStorageError
from kbroker.log.segment import LogSegment, segment_file_name
from kbroker.protocol.record_format import HEADER, LOG_OVERHEAD, RECORD_BATCH_OVERHEAD, BatchHeader
from kbroker.protocol.records import RecordBatch

if TYPE_CHECKING:
    from kbroker.log.unified_log import UnifiedLog

__all__ = ["load_log", "rebuild_producer_state"]

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


def _complete_interrupted_swaps(d: os.PathLike[str]) -> None:
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
            os.unlink(d / name)
    swaps = []
    for name in names:
        if not name.endswith(".swap") or not name[:20].isdigit():
            continue
        if (min_cleaned is not None and int(name[:20]) >= min_cleaned) or not name.endswith(".log.swap"):
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
            os.unlink(d / name)  # compacted away, but not yet renamed .deleted before the crash
    for name in swaps:
        os.replace(d / name, d / name[:-len(".swap")])


def load_log(log: UnifiedLog, had_clean_shutdown: bool) -> None:
    d = log.dir
    c = log.config
    try:
        _complete_interrupted_swaps(d)
        names = os.listdir(d)
        for name in names:
            if name.endswith(_LEFTOVER_SUFFIXES):
                os.unlink(d / name)
        names = os.listdir(d)
    except OSError as e:
        raise KafkaStorageError(f"cannot list {d}: {e}") from e
    bases = sorted(int(n[:20]) for n in names if _is_segment_name(n, ".log"))
    base_set = set(bases)
    for n in names:  # an index without its .log is an orphan of an interrupted deletion
        for suffix in (".index", ".timeindex"):
            if _is_segment_name(n, suffix) and int(n[:20]) not in base_set:
                os.unlink(d / n)

    def on_batch(batch: RecordBatch) -> None:
        epoch = batch.partition_leader_epoch
        if epoch >= 0 and epoch > log.leader_epoch_cache.latest_epoch:
            log.leader_epoch_cache.assign(epoch, batch.base_offset, flush=False)

    segments: list[LogSegment] = []
    for base in bases:
        missing_index = not (d / segment_file_name(base, ".index")).exists() or \
            not (d / segment_file_name(base, ".timeindex")).exists()
        try:
            # Kafka's LogSegment.created is the load time; segment.ms prefers the first batch's timestamp.
            seg = LogSegment(d, base, index_interval_bytes=c.index_interval_bytes,
                             max_index_size=c.segment_index_bytes, created_ms=log._time(),
                             roll_jitter_ms=LogSegment.roll_jitter(c.segment_jitter_ms, c.segment_ms))
            if missing_index or not seg.sanity_check_indexes():
                seg.recover()
        except OSError as e:
            raise KafkaStorageError(f"cannot open segment {base} in {d}: {e}") from e
        segments.append(seg)

    if not had_clean_shutdown and segments:
        start = 0
        for i, seg in enumerate(segments):
            if seg.base_offset <= log.recovery_point:
                start = i
        for i in range(start, len(segments)):
            try:
                truncated = segments[i].recover(on_batch)
            except OSError as e:
                raise KafkaStorageError(f"recovery of {segments[i].log_path} failed: {e}") from e
            if truncated > 0:
                # Everything after the first bad byte is suspect: drop the later segments (Kafka does).
                for seg in segments[i + 1:]:
                    seg.rename_to_deleted()
                    for suffix in (".log", ".index", ".timeindex"):
                        p = d / (segment_file_name(seg.base_offset, suffix) + ".deleted")
                        if p.exists():
                            os.unlink(p)
                del segments[i + 1:]
                break
        for seg in segments[start:]:
            seg.flush()

    for seg in segments:
        log._add_segment(seg)
    if not log.segments:
        log._add_segment(log._new_segment(log.log_start_offset))
    log.active_segment.make_active(c.segment_index_bytes)
    log.log_end_offset = log.active_segment.read_next_offset()
    if log.log_end_offset < log.log_start_offset:
        # Recovery (or lost files) left less than the checkpointed log start offset: like Kafka's
        # LogLoader, drop every segment and start empty at the log start offset.
        start = log.log_start_offset
        for seg in log.segments:
            seg.rename_to_deleted()
        log.segments.clear()
        log._bases.clear()
        for name in os.listdir(d):
            if name.endswith(".deleted"):
                os.unlink(d / name)
        log._add_segment(log._new_segment(start))
        log.leader_epoch_cache.clear()
        log.log_end_offset = start
    log.log_start_offset = max(log.log_start_offset, log.segments[0].base_offset)
    log.recovery_point = log.log_end_offset
    cache = log.leader_epoch_cache
    cache.truncate_from_end(log.log_end_offset)
    cache.truncate_from_start(log.log_start_offset)
    if cache.path is not None:
        cache._flush()
    log.producer_state.delete_snapshots_above(log.log_end_offset)
    rebuild_producer_state(log)


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
        for _pos, h in seg.iter_headers(pos):
            ps.replay(h)
    ps.map_end_offset = log.log_end_offset
