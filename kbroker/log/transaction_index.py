"""The aborted-transaction index: one ``%020d.txnindex`` file per segment (Kafka's TransactionIndex).

An entry is written when an ABORT marker is appended to the segment: Kafka's ``AbortedTxn`` layout,
34 bytes big-endian: version int16 (0), producer id int64, first offset int64 (the transaction's first
data batch in this partition), last offset int64 (the marker's offset) and last stable offset int64
(the partition's LSO right after the transaction completed). A read_committed Fetch returns the
entries that overlap what it reads (``collect``), so the consumer drops the aborted batches.

The log keeps every entry in memory (``AbortedTransactions``) and appends to the file of the segment
the marker went into; on open every ``.txnindex`` file of the log is read back, and recovery's replay
of markers after the producer snapshot skips entries already present (same last offset). Truncation
rewrites the files without the entries at or above the truncation offset. A segment's file goes with
the segment (`LogSegment.rename_to_deleted`: retention, DeleteRecords, truncation, the cleaner's swap);
`drop_segments` forgets its entries, and the cleaner's swap writes the new segment's file with the
entries whose ABORT marker it kept (`replace_segments`).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["AbortedTxn", "AbortedTransactions", "TXN_INDEX_SUFFIX"]

TXN_INDEX_SUFFIX = ".txnindex"
_ENTRY = struct.Struct(">hqqqq")  # version, producer id, first offset, last offset, last stable offset
_VERSION = 0


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


def _file(directory: Path, segment_base: int) -> Path:
    return directory / f"{segment_base:020d}{TXN_INDEX_SUFFIX}"


class AbortedTransactions:
    """Every aborted transaction of one partition log, in marker order, and their index files."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self._entries: dict[int, tuple[int, AbortedTxn]] = {}  # last offset -> (segment base, entry)
        self._load()

    def _load(self) -> None:
        try:
            names = sorted(n for n in os.listdir(self.dir) if n.endswith(TXN_INDEX_SUFFIX))
        except FileNotFoundError:
            return
        for name in names:
            try:
                base = int(name[: -len(TXN_INDEX_SUFFIX)])
                data = (self.dir / name).read_bytes()
            except (ValueError, OSError):
                continue
            for pos in range(0, len(data) - len(data) % _ENTRY.size, _ENTRY.size):
                version, pid, first, last, lso = _ENTRY.unpack_from(data, pos)
                if version == _VERSION:
                    self._entries[last] = (base, AbortedTxn(pid, first, last, lso))

    def __len__(self) -> int:
        return len(self._entries)

    def entries(self) -> list[AbortedTxn]:
        return [e for _b, e in sorted(self._entries.values(), key=lambda be: be[1].last_offset)]

    def append(self, segment_base: int, txn: AbortedTxn) -> None:
        if txn.last_offset in self._entries:
            return  # replayed by recovery: already indexed
        self._entries[txn.last_offset] = (segment_base, txn)
        with open(_file(self.dir, segment_base), "ab") as f:
            f.write(_ENTRY.pack(_VERSION, txn.producer_id, txn.first_offset, txn.last_offset,
                                txn.last_stable_offset))

    def collect(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """Kafka's collectAbortedTxns: entries whose range overlaps [fetch_offset, upper_bound)."""
        return [e for e in self.entries() if e.last_offset >= fetch_offset and e.first_offset < upper_bound]

    def truncate_to(self, offset: int) -> None:
        """Drop the entries of markers at or after ``offset`` and rewrite the affected files."""
        doomed = [last for last in self._entries if last >= offset]
        if not doomed:
            return
        bases = {self._entries[last][0] for last in doomed}
        for last in doomed:
            del self._entries[last]
        for base in bases:
            kept = [e for b, e in self._entries.values() if b == base]
            path = _file(self.dir, base)
            if not kept:
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    pass
                continue
            with open(path, "wb") as f:
                for e in sorted(kept, key=lambda x: x.last_offset):
                    f.write(_ENTRY.pack(_VERSION, e.producer_id, e.first_offset, e.last_offset,
                                        e.last_stable_offset))

    def drop_segments(self, segment_bases: list[int]) -> None:
        """The segments were deleted (their files renamed with them): forget their entries."""
        bases = set(segment_bases)
        for last in [k for k, (b, _e) in self._entries.items() if b in bases]:
            del self._entries[last]

    def clear(self) -> None:
        self._entries.clear()

    def replace_segments(self, old_bases: list[int], new_base: int, keep: Callable[[int], bool]) -> None:
        """The cleaner swapped `old_bases` for one segment at `new_base`: the entries of the old ones
        that `keep(marker offset)` move to the new segment's file, the others are forgotten."""
        bases = set(old_bases)
        moved = [e for b, e in self._entries.values() if b in bases]
        for e in moved:
            del self._entries[e.last_offset]
        kept = sorted((e for e in moved if keep(e.last_offset)), key=lambda x: x.last_offset)
        path = _file(self.dir, new_base)
        if not kept:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            return
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "wb") as f:
            for e in kept:
                f.write(_ENTRY.pack(_VERSION, e.producer_id, e.first_offset, e.last_offset, e.last_stable_offset))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        for e in kept:
            self._entries[e.last_offset] = (new_base, e)

    def rename_dir(self, directory: Path) -> None:
        self.dir = directory
