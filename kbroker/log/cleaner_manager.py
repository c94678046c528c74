"""Which compacted log to clean next, and where cleaning has got to: Kafka's ``LogCleanerManager``.

Owns ``cleaner-offset-checkpoint`` (one per log dir, Kafka's offset checkpoint format: the first
dirty offset of each compacted partition), the cleanable range of a log (first dirty offset from the
checkpoint, reset to the log start offset when it is out of range; first uncleanable offset = the
lowest of the last stable offset, the active segment's base offset, and the first segment younger
than ``min.compaction.lag.ms``), the dirty ratio (cleanable bytes / (clean + cleanable bytes)),
``max.compaction.lag.ms`` (KIP-354: a log whose oldest dirty batch is older than that is cleaned
whatever its ratio) and the choice of the filthiest log (ratio above ``min.cleanable.dirty.ratio``,
or overdue).

Threading (see ``kbroker.log.cleaner``): :meth:`LogCleaner.next_job` runs on the thread that owns
the logs (the event loop) and snapshots everything the clean needs; the job it returns runs on a
worker thread and hands the segment swap and the checkpoint update back through
``run_on_log_thread``; only the checkpoint file write happens on the worker. :meth:`clean_once`
does a whole round synchronously (tests, tools). Never imports asyncio.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kbroker.log.checkpoints import CheckpointError, read_offset_checkpoint, write_offset_checkpoint
from kbroker.log.cleaner import CleanAborted, Cleaner, CleanResult
from kbroker.log.segment import LogSegment

if TYPE_CHECKING:
    from kbroker.log.manager import LogManager
    from kbroker.log.unified_log import UnifiedLog

__all__ = ["CLEANER_CHECKPOINT", "LogCleaner", "LogToClean", "cleanable_offsets", "max_compaction_delay"]

logger = logging.getLogger(__name__)

CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
RunOnLogThread = Callable[[Callable[[], object]], object]


@dataclass
class LogToClean:
    """A compacted log and its cleanable range (Kafka's LogToClean)."""

    tp: tuple[str, int]
    log: UnifiedLog
    first_dirty: int
    first_uncleanable: int
    need_compaction_now: bool = False
    clean_bytes: int = 0
    cleanable_bytes: int = 0

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        return self.cleanable_bytes / self.total_bytes if self.total_bytes else 0.0


def _segments_in(log: UnifiedLog, start: int, end: int) -> list[LogSegment]:
    """Segments holding offsets in [start, end) (Kafka's logSegments(from, to))."""
    segs = log.segments
    out = []
    for i, seg in enumerate(segs):
        nxt = segs[i + 1].base_offset if i + 1 < len(segs) else log.log_end_offset + 1
        if seg.base_offset < end and nxt > start:
            out.append(seg)
    return out


def cleanable_offsets(log: UnifiedLog, checkpoint: int | None, now_ms: int) -> tuple[int, int, bool]:
    """(first dirty offset, first uncleanable offset, checkpoint needs rewriting)."""
    start = log.log_start_offset
    force = False
    if checkpoint is None:
        first_dirty = start
    elif checkpoint < start or checkpoint > log.log_end_offset:
        # Below the log start (retention/DeleteRecords moved it) or past the end (truncation).
        first_dirty, force = start, True
    else:
        first_dirty = checkpoint
    bounds = [log.last_stable_offset, log.active_segment.base_offset]
    lag = log.config.min_compaction_lag_ms
    if lag > 0:  # KIP-58: the first non-active dirty segment holding a record younger than the lag
        for seg in log.segments[:-1]:
            if seg.base_offset >= first_dirty or _next_base(log, seg) > first_dirty:
                if seg.size and seg.largest_timestamp() > now_ms - lag:
                    bounds.append(seg.base_offset)
                    break
    first_uncleanable = max(first_dirty, min(bounds))
    return first_dirty, first_uncleanable, force


def _next_base(log: UnifiedLog, seg: LogSegment) -> int:
    i = log.segments.index(seg)
    return log.segments[i + 1].base_offset if i + 1 < len(log.segments) else log.log_end_offset + 1


def max_compaction_delay(log: UnifiedLog, first_dirty: int, now_ms: int) -> int:
    """How long past ``max.compaction.lag.ms`` the oldest dirty batch is (0 = not overdue, KIP-354)."""
    stamps = []
    for seg in _segments_in(log, first_dirty, log.active_segment.base_offset):
        if seg is log.active_segment or not seg.size:
            continue
        ts = seg._rolling_timestamp()  # the first batch's max timestamp, as Kafka's getFirstBatchTimestamp
        if ts is not None and ts > 0:
            stamps.append(ts)
    if not stamps:
        return 0
    clean_until = now_ms - max(log.config.max_compaction_lag_ms, 0)
    earliest = min(stamps)
    return clean_until - earliest if earliest < clean_until else 0


class LogCleaner:
    """Picks logs to compact and keeps ``cleaner-offset-checkpoint`` (Kafka's LogCleaner + manager)."""

    def __init__(self, log_manager: LogManager, *, enabled: bool = True, dedupe_buffer_size: int = 134217728,
                 threads: int = 1, time_ms: Callable[[], int] | None = None) -> None:
        self.log_manager = log_manager
        self.enabled = enabled and threads > 0
        # Kafka splits log.cleaner.dedupe.buffer.size among the cleaner threads.
        self.dedupe_buffer_size = dedupe_buffer_size // max(1, threads)
        self._time = time_ms or log_manager._time
        self._checkpoints: dict[Path, dict[tuple[str, int], int]] = {}
        self._file_lock = threading.Lock()  # serialises checkpoint file writes from worker threads
        self._snapshot_seq = 0
        self._written_seq: dict[Path, int] = {}
        self._aborted = False
        self.in_progress: tuple[str, int] | None = None
        self.last_result: CleanResult | None = None
        self.rounds = 0
        self.hook: Callable[[str], None] | None = None  # tests: crash points of the swap protocol
        # Kafka's uncleanable partitions: a log whose clean failed unexpectedly is skipped until
        # restart instead of failing again every backoff.
        self.uncleanable: set[tuple[str, int]] = set()

    # --- checkpoints ---------------------------------------------------------------------------------
    def checkpoints(self, d: Path) -> dict[tuple[str, int], int]:
        cp = self._checkpoints.get(d)
        if cp is None:
            try:
                cp = read_offset_checkpoint(d / CLEANER_CHECKPOINT)
            except CheckpointError:
                cp = {}
            self._checkpoints[d] = cp
        return cp

    def _update_checkpoint(self, log: UnifiedLog, tp: tuple[str, int],
                           offset: int | None) -> tuple[Path, dict[tuple[str, int], int], int]:
        """Set (or with None remove) ``tp``'s entry; returns the snapshot to write. Log thread only."""
        d = log.parent_dir
        cp = self.checkpoints(d)
        if offset is None:
            cp.pop(tp, None)
        else:
            cp[tp] = offset
        live = {k: v for k, v in cp.items() if self.log_manager.get_log(*k) is not None or k == tp}
        self._checkpoints[d] = live
        self._snapshot_seq += 1
        return d, dict(live), self._snapshot_seq

    def _write_checkpoint(self, d: Path, offsets: dict[tuple[str, int], int], seq: int) -> None:
        # Snapshots are taken on the log thread in order; a worker that writes late must not put
        # an older one over a newer one written meanwhile.
        with self._file_lock:
            if seq <= self._written_seq.get(d, 0):
                return
            write_offset_checkpoint(d / CLEANER_CHECKPOINT, offsets)
            self._written_seq[d] = seq

    def forget(self, topic: str, partition: int, parent_dir: Path) -> None:
        """The partition was deleted: drop its checkpoint entry (Kafka's updateCheckpoints remove)."""
        cp = self.checkpoints(parent_dir)
        if cp.pop((topic, partition), None) is not None:
            self._snapshot_seq += 1
            self._write_checkpoint(parent_dir, dict(cp), self._snapshot_seq)

    # --- choosing ------------------------------------------------------------------------------------
    def grab_filthiest(self, now_ms: int | None = None) -> LogToClean | None:
        """The compacted log with the highest dirty ratio above its threshold, or an overdue one."""
        now = self._time() if now_ms is None else now_ms
        best: LogToClean | None = None
        for tp, log in list(self.log_manager._logs.items()):
            if log.offline or not log.config.compact or tp in self.uncleanable:
                continue
            first_dirty, first_uncleanable, force = cleanable_offsets(log, self.checkpoints(log.parent_dir).get(tp), now)
            if force:
                self._write_checkpoint(*self._update_checkpoint(log, tp, first_dirty))
            ltc = LogToClean(tp, log, first_dirty, first_uncleanable,
                             max_compaction_delay(log, first_dirty, now) > 0)
            ltc.clean_bytes = sum(s.size for s in _segments_in(log, -1, first_dirty))
            ltc.cleanable_bytes = sum(s.size for s in _segments_in(log, first_dirty, first_uncleanable))
            if ltc.total_bytes <= 0:
                continue
            ratio = ltc.cleanable_ratio
            if not ((ltc.need_compaction_now and ltc.cleanable_bytes > 0)
                    or ratio > log.config.min_cleanable_dirty_ratio):
                continue
            if best is None or ratio > best.cleanable_ratio:
                best = ltc
        return best

    def next_job(self, run_on_log_thread: RunOnLogThread, now_ms: int | None = None) -> Callable[[], CleanResult | None] | None:
        """On the log thread: choose a log and snapshot what cleaning it needs; the returned job
        runs on a worker thread (None when nothing needs cleaning or cleaning is disabled)."""
        if not self.enabled or self._aborted or self.in_progress is not None:
            return None
        now = self._time() if now_ms is None else now_ms
        ltc = self.grab_filthiest(now)
        if ltc is None:
            return None
        log = ltc.log
        segments = [s for s in log.segments[:-1] if s.base_offset < ltc.first_uncleanable]
        producers = {pid: e.last_offset for pid, e in log.producer_state.producers.items() if e.last_offset >= 0}
        aborted = [(e.producer_id, e.first_offset, e.last_offset) for e in log.aborted_txns.entries()]
        self.in_progress = ltc.tp
        cleaner = Cleaner(self.dedupe_buffer_size, abort=lambda: self._aborted,
                          run_on_log_thread=lambda fn: bool(run_on_log_thread(fn)), hook=self.hook)

        def job() -> CleanResult | None:
            try:
                result = cleaner.clean(log, segments, ltc.first_dirty, ltc.first_uncleanable, now, producers,
                                       aborted_txns=aborted)
            except CleanAborted as e:
                logger.info("Cleaning of %s-%d stopped: %s", ltc.tp[0], ltc.tp[1], e)
                run_on_log_thread(self._done)
                return None
            except Exception as e:
                # A segment truncated or deleted under the clean is not the log's fault: try again later.
                if run_on_log_thread(lambda: self._changed_under_clean(log, segments)):
                    logger.info("Cleaning of %s-%d stopped: the log changed (%s)", ltc.tp[0], ltc.tp[1], e)
                    return None
                logger.exception("Cleaning of %s-%d failed: the partition is marked uncleanable", *ltc.tp)
                run_on_log_thread(lambda: self._failed(ltc.tp))
                raise
            written = run_on_log_thread(lambda: self._finish(log, ltc.tp, result.end_offset))
            if isinstance(written, tuple):
                self._write_checkpoint(*written)
            logger.info("Cleaned %s-%d up to offset %d: %d -> %d bytes, %d of %d records kept",
                        ltc.tp[0], ltc.tp[1], result.end_offset, result.bytes_before, result.bytes_after,
                        result.records_kept, result.records_read)
            return result

        return job

    def _done(self) -> None:
        self.in_progress = None

    def _changed_under_clean(self, log: UnifiedLog, segments: list[LogSegment]) -> bool:
        changed = log.offline is False and any(s.deleted or s not in log.segments for s in segments)
        if changed:
            self.in_progress = None
        return changed

    def _failed(self, tp: tuple[str, int]) -> None:
        self.in_progress = None
        self.uncleanable.add(tp)

    def _finish(self, log: UnifiedLog, tp: tuple[str, int],
                end_offset: int) -> tuple[Path, dict[tuple[str, int], int], int] | None:
        self.in_progress = None
        self.rounds += 1
        if self.log_manager.get_log(*tp) is not log:
            return None  # deleted (or replaced) while being cleaned
        return self._update_checkpoint(log, tp, end_offset)

    def clean_once(self, now_ms: int | None = None) -> CleanResult | None:
        """One whole round on the calling thread (tests and tools): choose, clean, swap, checkpoint."""
        job = self.next_job(lambda fn: fn(), now_ms)
        if job is None:
            return None
        self.last_result = job()
        return self.last_result

    def shutdown(self) -> None:
        """Make a running clean stop at its next batch; no new rounds start."""
        self._aborted = True
