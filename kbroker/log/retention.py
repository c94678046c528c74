"""Removing whole segments from a partition's log: DeleteRecords and time/size retention.

Owns Kafka's ``UnifiedLog.deleteOldSegments`` rules as a mixin of ``UnifiedLog``: the log start
offset moved by DeleteRecords (never past the high watermark), deletable segments (oldest first,
only below the high watermark; rolling an empty active segment first when every segment goes),
``retention.ms`` / ``retention.bytes`` for ``cleanup.policy=delete``, and Kafka's asynchronous
deletion (files renamed ``.deleted``, unlinked after ``file.delete.delay.ms``; their open file
objects stay readable for FileRegions in flight). Log compaction replaces segments through the
same ``.deleted`` path (``kbroker.log.cleaner``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from kbroker.log.errors import KafkaStorageError, OffsetOutOfRangeError
from kbroker.log.segment import LogSegment

if TYPE_CHECKING:
    from kbroker.log.config import LogConfig
    from kbroker.log.leader_epoch import LeaderEpochFileCache
    from kbroker.log.producer_state import ProducerStateManager
    from kbroker.log.transaction_index import AbortedTransactions

__all__ = ["LogRetention"]


class LogRetention:
    """Segment deletion for ``UnifiedLog`` (which provides every attribute declared here)."""

    topic: str
    partition: int
    config: LogConfig
    segments: list[LogSegment]
    _bases: list[int]
    log_start_offset: int
    log_end_offset: int
    recovery_point: int
    high_watermark: int
    leader_epoch_cache: LeaderEpochFileCache
    producer_state: ProducerStateManager
    aborted_txns: AbortedTransactions
    _pending_deletes: list[tuple[int, list[Path], LogSegment | None]]
    _time: Callable[[], int]

    if TYPE_CHECKING:  # defined by UnifiedLog
        def _check_online(self) -> None: ...

        def roll(self, expected_next_offset: int | None = None) -> LogSegment: ...

        @property
        def size_in_bytes(self) -> int: ...

    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: raise the log start offset (<= high watermark); drop fully covered segments."""
        self._check_online()
        if offset == -1:  # DeleteRecordsRequest.HIGH_WATERMARK: delete up to the high watermark
            offset = self.high_watermark
        if offset < 0 or offset > self.high_watermark:
            raise OffsetOutOfRangeError(f"Cannot increment the log start offset to {offset} of partition "
                                        f"{self.topic}-{self.partition} since it is larger than the high watermark {self.high_watermark}")
        if offset > self.log_start_offset:
            self._set_log_start_offset(offset)
            self._delete_segments(self._deletable(lambda seg, nxt: nxt is not None and nxt <= self.log_start_offset))
        return self.log_start_offset

    def _set_log_start_offset(self, offset: int) -> None:
        self.log_start_offset = offset
        self.leader_epoch_cache.truncate_from_start(offset)
        self.producer_state.delete_snapshots_before(self.segments[0].base_offset)
        if self.recovery_point < offset:
            self.recovery_point = offset

    def _deletable(self, predicate: Callable[[LogSegment, int | None], bool]) -> list[LogSegment]:
        """Oldest segments satisfying ``predicate`` below the high watermark (Kafka's deletableSegments)."""
        out = []
        for i, seg in enumerate(self.segments):
            nxt = self._bases[i + 1] if i + 1 < len(self._bases) else None
            upper = nxt if nxt is not None else self.log_end_offset
            if nxt is None and seg.size == 0:
                break
            if self.high_watermark >= upper and predicate(seg, nxt):
                out.append(seg)
            else:
                break
        return out

    def _delete_segments(self, segs: list[LogSegment]) -> int:
        if not segs:
            return 0
        if len(segs) == len(self.segments):
            self.roll()  # never delete the active segment's data in place: roll first, as Kafka does
        now = self._time()
        for seg in segs:
            i = self.segments.index(seg)
            del self.segments[i]
            del self._bases[i]
            try:
                paths = seg.rename_to_deleted()
            except OSError as e:
                raise KafkaStorageError(f"cannot delete segment {seg.log_path}: {e}") from e
            self._pending_deletes.append((now + self.config.file_delete_delay_ms, paths, seg))
        self.aborted_txns.drop_segments([seg.base_offset for seg in segs])
        if self.segments[0].base_offset > self.log_start_offset:
            self._set_log_start_offset(self.segments[0].base_offset)
        else:
            self.producer_state.delete_snapshots_before(self.segments[0].base_offset)
        self.delete_pending_files(now)
        return len(segs)

    def delete_old_segments(self, now_ms: int | None = None) -> int:
        """Retention: segments past retention.ms, beyond retention.bytes, or below the log start offset."""
        self._check_online()
        now = self._time() if now_ms is None else now_ms
        c = self.config
        n = self._delete_segments(self._deletable(lambda seg, nxt: nxt is not None and nxt <= self.log_start_offset))
        if not c.delete:
            return n
        if c.retention_ms >= 0:
            n += self._delete_segments(self._deletable(lambda seg, nxt: now - seg.largest_timestamp() > c.retention_ms))
        if c.retention_bytes >= 0:
            diff = self.size_in_bytes - c.retention_bytes

            def over(seg: LogSegment, nxt: int | None) -> bool:
                nonlocal diff
                if diff - seg.size >= 0:
                    diff -= seg.size
                    return True
                return False

            n += self._delete_segments(self._deletable(over))
        return n

    def delete_pending_files(self, now_ms: int, force: bool = False) -> None:
        """Unlink ``.deleted`` files whose delay has passed. Open file objects are not closed here:
        a FileRegion still being sent keeps its file readable (POSIX unlink semantics)."""
        keep = []
        for due, paths, seg in self._pending_deletes:
            if force or due <= now_ms:
                for p in paths:
                    try:
                        os.unlink(p)
                    except FileNotFoundError:
                        pass
                    except OSError as e:
                        raise KafkaStorageError(f"cannot delete {p}: {e}") from e
            else:
                keep.append((due, paths, seg))
        self._pending_deletes = keep

