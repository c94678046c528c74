"""The leader epoch cache of one partition, persisted as Kafka's ``leader-epoch-checkpoint``.

Owns Kafka's ``LeaderEpochFileCache``: the ordered (epoch, start offset) pairs recording at which
offset each leader epoch began, updated when a batch with a new partition leader epoch is appended,
truncated from the end (log truncation) and from the start (retention, DeleteRecords), and the
OffsetForLeaderEpoch lookup ``end_offset_for``. Every change is written through atomically; epochs
change rarely, so the fsync is off the hot path. A new leader's epoch entry (no batch of it yet,
`Partition.make_leader`) is written without an fsync, as Kafka does since KAFKA-15046 (its
LeaderEpochFileCache no longer fsyncs on assign): a node taking the leadership of thousands of partitions
at once (a one-voter node's restart and controlled shutdown) paid two fsyncs each, tens of seconds. The
file is fsynced by the log's next flush that has data to make durable (`sync_if_needed`); lost in a power
failure before that, the entry names an epoch without batches, which OffsetsForLeaderEpoch answers the
same from the entry before it.
"""

from __future__ import annotations

import bisect
import logging
from pathlib import Path

from kbroker.log.checkpoints import (
    CheckpointError,
    read_leader_epoch_checkpoint,
    write_leader_epoch_checkpoint,
)

__all__ = ["LeaderEpochFileCache", "LEADER_EPOCH_CHECKPOINT", "UNDEFINED_EPOCH", "UNDEFINED_EPOCH_OFFSET"]

logger = logging.getLogger(__name__)

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class LeaderEpochFileCache:
    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._epochs: list[int] = []
        self._starts: list[int] = []
        self._unsynced = False  # written without an fsync since the last synced write
        if path is not None:
            try:
                entries = read_leader_epoch_checkpoint(path)
            except CheckpointError as err:
                logger.warning("Ignoring the corrupt leader epoch checkpoint %s (%s): the epochs are rebuilt from "
                               "the batches that recovery scans", path, err)
                entries = []
            for e, o in entries:
                self._epochs.append(e)
                self._starts.append(o)

    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._epochs, self._starts, strict=True))

    def flush(self, sync: bool = True) -> None:
        """Write the checkpoint file (atomically; fsynced unless ``sync`` is False)."""
        if self.path is not None:
            write_leader_epoch_checkpoint(self.path, self.entries(), sync=sync)
            self._unsynced = not sync

    def sync_if_needed(self) -> None:
        """fsync the checkpoint if the last write skipped it."""
        if self._unsynced:
            self.flush()

    @property
    def latest_epoch(self) -> int:
        return self._epochs[-1] if self._epochs else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int, flush: bool = True, sync: bool = True) -> bool:
        """Record that ``epoch`` starts at ``start_offset``; returns True if the cache changed. ``sync``
        False: written without an fsync (see the module docstring)."""
        if epoch < 0 or start_offset < 0:
            return False
        if self._epochs and self._epochs[-1] == epoch and start_offset >= self._starts[-1]:
            return False
        # Kafka drops entries that would no longer be monotonic (epoch or start offset >= the new one).
        while self._epochs and (self._epochs[-1] >= epoch or self._starts[-1] >= start_offset):
            self._epochs.pop()
            self._starts.pop()
        self._epochs.append(epoch)
        self._starts.append(start_offset)
        if flush:
            self.flush(sync)
        return True

    def epoch_for_offset(self, offset: int) -> int | None:
        i = bisect.bisect_right(self._starts, offset) - 1
        return self._epochs[i] if i >= 0 else None

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) as Kafka's ``LeaderEpochFileCache.endOffsetFor``."""
        if requested_epoch == UNDEFINED_EPOCH:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if self._epochs and requested_epoch == self._epochs[-1]:
            return requested_epoch, log_end_offset
        hi = bisect.bisect_right(self._epochs, requested_epoch)  # first epoch > requested
        if hi >= len(self._epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if hi == 0:
            # Older than anything known: the data is gone, answer with the first later epoch's start.
            return requested_epoch, self._starts[0]
        return self._epochs[hi - 1], self._starts[hi]

    def truncate_from_end(self, end_offset: int, flush: bool = True) -> None:
        """Drop entries whose start offset is >= ``end_offset`` (log truncation)."""
        n = len(self._starts)
        while self._starts and self._starts[-1] >= end_offset:
            self._starts.pop()
            self._epochs.pop()
        if len(self._starts) != n and flush:
            self.flush()

    def truncate_from_start(self, start_offset: int, flush: bool = True) -> None:
        """Drop entries starting at or before ``start_offset`` but keep the last of them, moved to it."""
        i = bisect.bisect_right(self._starts, start_offset)
        if i == 0:
            return
        last_epoch = self._epochs[i - 1]
        if i == 1 and self._starts[0] == start_offset:
            return
        del self._epochs[:i]
        del self._starts[:i]
        self._epochs.insert(0, last_epoch)
        self._starts.insert(0, start_offset)
        if flush:
            self.flush()

    def clear(self) -> None:
        self._epochs.clear()
        self._starts.clear()
        self.flush()
