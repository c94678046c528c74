"""The replicated log as Raft sees it (Kafka's `ReplicatedLog`), and an in-memory one for tests.

Raft needs only a handful of things from its log: its end offset and the epoch of its last batch,
the end offset of any epoch (the epoch cache, which is how a follower finds where it diverges), append
batches whose offsets and epoch are already stamped, cut the tail, read batches from an offset, make
them durable, and the snapshots at its head (the log start offset is the latest snapshot's end offset
once the log is trimmed behind it).

Entries are Kafka record batches (v2, `partitionLeaderEpoch` = the Raft epoch, offsets assigned by
the leader), so what goes over the wire in a Fetch response is what sits on disk.

`MemoryRaftLog` keeps batches in a list and models a disk for the deterministic simulation: `flush`
makes the batches so far durable, `crash(rng)` returns the log a restart would find (everything
flushed, and a random prefix of what was not), snapshots are durable when created. The on-disk log
over `kbroker.log.UnifiedLog` is `kbroker.raft.metadata_log.KafkaMetadataLog`.
"""

from __future__ import annotations

import bisect
import random
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from kbroker.protocol.records import RecordBatch, batch_size_at


class OffsetAndEpoch(NamedTuple):
    """Kafka's OffsetAndEpoch: an end offset (exclusive) and the epoch of the entry before it.
    A snapshot id is one too: the snapshot holds everything below `offset`, last written in `epoch`."""

    offset: int
    epoch: int


@dataclass(frozen=True)
class LogBatch:
    """One batch in the log: its offsets, its Raft epoch and its bytes (a whole v2 record batch)."""

    base_offset: int
    last_offset: int
    epoch: int
    data: bytes

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @classmethod
    def of(cls, data: bytes) -> LogBatch:
        b = RecordBatch(memoryview(data))
        return cls(b.base_offset, b.last_offset, b.partition_leader_epoch, bytes(data))


class RaftLog(Protocol):
    """What KafkaRaftClient needs from its log (Kafka's ReplicatedLog)."""

    def end_offset(self) -> int: ...

    def start_offset(self) -> int: ...

    def last_fetched_epoch(self) -> int:
        """The epoch of the last batch; of the latest snapshot when the log is empty; 0 when both are."""
        ...

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        """The largest epoch <= `epoch` in the log (or the snapshot) and where it ends (the start of
        the next epoch, or the log end offset). (start offset, 0) when there is none."""
        ...

    def append(self, data: bytes) -> None:
        """Append whole batches whose offsets start at the end offset and whose epochs are stamped."""
        ...

    def truncate_to(self, offset: int) -> None: ...

    def read(self, start_offset: int, max_bytes: int) -> bytes:
        """Whole batches from `start_offset` (a batch boundary), at least one if any, up to `max_bytes`."""
        ...

    def flush(self) -> None: ...

    def flushed_end_offset(self) -> int: ...

    def latest_snapshot_id(self) -> OffsetAndEpoch | None: ...

    def read_snapshot(self, snapshot_id: OffsetAndEpoch) -> bytes | None: ...

    def read_snapshot_slice(self, snapshot_id: OffsetAndEpoch, position: int, max_bytes: int
                            ) -> tuple[int, bytes] | None:
        """Kafka's `RawSnapshotReader.sizeInBytes` + `slice`: the snapshot's size and at most `max_bytes`
        of it from `position` (what one FetchSnapshot answer carries); None if there is no such snapshot."""
        ...

    def create_snapshot(self, snapshot_id: OffsetAndEpoch, data: bytes) -> None:
        """Store a snapshot (durably) of the state up to `snapshot_id.offset`."""
        ...

    def install_snapshot(self, snapshot_id: OffsetAndEpoch, data: bytes) -> None:
        """A follower's fetched snapshot: store it, drop the whole log and start it at the snapshot's end."""
        ...

    def delete_before_snapshot(self, snapshot_id: OffsetAndEpoch) -> bool:
        """Trim the log below the snapshot's end offset (the log start offset moves to it)."""
        ...


class ValidOffsetAndEpoch(NamedTuple):
    """Kafka's ValidOffsetAndEpoch: is a follower's (fetch offset, last fetched epoch) on the leader's log?"""

    kind: str  # "valid" | "diverging" | "snapshot"
    offset_and_epoch: OffsetAndEpoch


def validate_offset_and_epoch(log: RaftLog, offset: int, epoch: int) -> ValidOffsetAndEpoch:
    """Kafka's `ReplicatedLog.validateOffsetAndEpoch`, run by the leader on every Fetch.

    Below the log start (or in an epoch older than the snapshot's): fetch the snapshot. Otherwise the
    follower's last epoch must end at or after its fetch offset in the leader's log, or the follower
    diverges and is told where the largest epoch <= its own ends on the leader.
    """
    snapshot = log.latest_snapshot_id()
    start = log.start_offset()
    if snapshot is not None and (offset < start or (offset == start and epoch != snapshot.epoch)
                                 or epoch < snapshot.epoch):
        return ValidOffsetAndEpoch("snapshot", snapshot)
    if offset == 0 and epoch == 0 and start == 0:
        return ValidOffsetAndEpoch("valid", OffsetAndEpoch(0, 0))
    end = log.end_offset_for_epoch(epoch)
    if end.epoch != epoch or offset > end.offset:
        return ValidOffsetAndEpoch("diverging", end)
    return ValidOffsetAndEpoch("valid", OffsetAndEpoch(offset, epoch))


def truncate_to_end_offset(log: RaftLog, end: OffsetAndEpoch) -> int:
    """Kafka's `ReplicatedLog.truncateToEndOffset`: cut a follower's log where the leader said it
    diverges, or where the follower's own largest epoch <= that one ends, whichever is lower."""
    if end.epoch == 0:
        offset = min(end.offset, log.end_offset())
    else:
        local = log.end_offset_for_epoch(end.epoch)
        offset = min(local.offset, end.offset) if local.epoch == end.epoch else local.offset
    offset = max(offset, log.start_offset())
    log.truncate_to(offset)
    return log.end_offset()  # whole batches go: it may land below `offset`


def epoch_end_offset(entries: list[tuple[int, int]], epoch: int, log_end: int, log_start: int) -> OffsetAndEpoch:
    """End offset for `epoch` over an epoch cache `[(epoch, start offset)]` in ascending order."""
    i = bisect.bisect_right(entries, (epoch, float("inf"))) - 1
    if i < 0:
        return OffsetAndEpoch(log_start, 0)
    end = entries[i + 1][1] if i + 1 < len(entries) else log_end
    return OffsetAndEpoch(end, entries[i][0])


class MemoryRaftLog:
    """An in-memory RaftLog with a modelled disk (the simulation's)."""

    def __init__(self) -> None:
        self.batches: list[LogBatch] = []
        self._bases: list[int] = []
        self._start = 0
        self._flushed = 0
        self.snapshots: dict[OffsetAndEpoch, bytes] = {}

    # --- reads -----------------------------------------------------------------------------------
    def end_offset(self) -> int:
        return self.batches[-1].next_offset if self.batches else self._start

    def start_offset(self) -> int:
        return self._start

    def last_fetched_epoch(self) -> int:
        if self.batches:
            return self.batches[-1].epoch
        snap = self.latest_snapshot_id()
        return snap.epoch if snap is not None else 0

    def _epoch_entries(self) -> list[tuple[int, int]]:
        entries: list[tuple[int, int]] = []
        snap = self.latest_snapshot_id()
        if snap is not None and snap.offset == self._start:
            entries.append((snap.epoch, self._start))
        for b in self.batches:
            if not entries or b.epoch > entries[-1][0]:
                entries.append((b.epoch, b.base_offset))
        return entries

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        return epoch_end_offset(self._epoch_entries(), epoch, self.end_offset(), self._start)

    def read(self, start_offset: int, max_bytes: int) -> bytes:
        i = bisect.bisect_right(self._bases, start_offset) - 1
        if i < 0 or (i < len(self.batches) and self.batches[i].next_offset <= start_offset):
            i += 1
        out = bytearray()
        while i < len(self.batches):
            data = self.batches[i].data
            if out and len(out) + len(data) > max_bytes:
                break
            out += data
            i += 1
        return bytes(out)

    def flushed_end_offset(self) -> int:
        return self._flushed

    def entries(self) -> list[LogBatch]:
        return list(self.batches)

    # --- writes ----------------------------------------------------------------------------------
    def append(self, data: bytes) -> None:
        buf = memoryview(data)
        pos = 0
        while pos < len(buf):
            size = batch_size_at(buf, pos)
            view = RecordBatch(buf[pos:pos + size])
            b = LogBatch(view.base_offset, view.last_offset, view.partition_leader_epoch, bytes(buf[pos:pos + size]))
            pos += size
            if b.base_offset != self.end_offset():
                raise ValueError(f"batch at {b.base_offset} does not start at the log end {self.end_offset()}")
            if self.batches and b.epoch < self.batches[-1].epoch:
                raise ValueError(f"batch epoch {b.epoch} is below the log's last epoch {self.batches[-1].epoch}")
            self.batches.append(b)
            self._bases.append(b.base_offset)

    def truncate_to(self, offset: int) -> None:
        if offset >= self.end_offset():
            return
        i = bisect.bisect_left(self._bases, offset)
        if i > 0 and self.batches[i - 1].next_offset > offset:
            i -= 1  # a batch holding `offset` goes whole, as a segment truncation does
        del self.batches[i:]
        del self._bases[i:]
        self._flushed = min(self._flushed, self.end_offset())

    def flush(self) -> None:
        self._flushed = self.end_offset()

    # --- snapshots -------------------------------------------------------------------------------
    def latest_snapshot_id(self) -> OffsetAndEpoch | None:
        return max(self.snapshots) if self.snapshots else None

    def read_snapshot(self, snapshot_id: OffsetAndEpoch) -> bytes | None:
        return self.snapshots.get(snapshot_id)

    def read_snapshot_slice(self, snapshot_id: OffsetAndEpoch, position: int, max_bytes: int
                            ) -> tuple[int, bytes] | None:
        data = self.snapshots.get(snapshot_id)
        return None if data is None else (len(data), data[position:position + max_bytes])

    def create_snapshot(self, snapshot_id: OffsetAndEpoch, data: bytes) -> None:
        if snapshot_id.offset > self.end_offset() or snapshot_id.offset < self._start:
            raise ValueError(f"snapshot {snapshot_id} is outside the log [{self._start}, {self.end_offset()}]")
        self.snapshots[snapshot_id] = data

    def install_snapshot(self, snapshot_id: OffsetAndEpoch, data: bytes) -> None:
        self.snapshots[snapshot_id] = data
        self.batches.clear()
        self._bases.clear()
        self._start = snapshot_id.offset
        self._flushed = self._start

    def delete_before_snapshot(self, snapshot_id: OffsetAndEpoch) -> bool:
        if snapshot_id not in self.snapshots or snapshot_id.offset <= self._start:
            return False
        i = bisect.bisect_left(self._bases, snapshot_id.offset)
        del self.batches[:i]
        del self._bases[:i]
        self._start = snapshot_id.offset
        self._flushed = max(self._flushed, self._start)
        for old in [s for s in self.snapshots if s.offset < snapshot_id.offset]:
            del self.snapshots[old]
        return True

    # --- the modelled disk -----------------------------------------------------------------------
    def crash(self, rng: random.Random) -> MemoryRaftLog:
        """The log a restart finds: every flushed batch, then a random prefix of the unflushed ones."""
        survivor = MemoryRaftLog()
        survivor._start = self._start
        survivor.snapshots = dict(self.snapshots)
        keep = [b for b in self.batches if b.next_offset <= self._flushed]
        unflushed = [b for b in self.batches if b.next_offset > self._flushed]
        keep += unflushed[: rng.randint(0, len(unflushed))]
        survivor.batches = keep
        survivor._bases = [b.base_offset for b in keep]
        survivor._flushed = survivor.end_offset()
        return survivor
