"""Snapshot ids and file names (Kafka's ``Snapshots`` and ``SnapshotPath``).

A snapshot of the metadata log up to, not including, offset ``end_offset``, taken in epoch ``epoch``,
is the file ``<end_offset:020d>-<epoch:010d>.checkpoint`` in the log's directory
(``__cluster_metadata-0``). While written it is ``<id>-<random>.checkpoint.part``; retired by
retention it is renamed ``<id>.checkpoint.deleted`` and unlinked after ``file.delete.delay.ms``.
``00000000000000000000-0000000000`` (``BOOTSTRAP_SNAPSHOT_ID``) is the snapshot ``kafka-storage
format --standalone / --initial-controllers`` writes with the initial voters (KIP-853).

Names that do not parse (a ``.checkpoint`` without the two numbers) are not snapshots:
``parse_snapshot_path`` returns None, where Kafka would throw on ``Long.parseLong``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

SUFFIX = ".checkpoint"
PARTIAL_SUFFIX = f"{SUFFIX}.part"
DELETE_SUFFIX = f"{SUFFIX}.deleted"
OFFSET_WIDTH = 20
EPOCH_WIDTH = 10


@dataclass(frozen=True, slots=True, order=True)
class OffsetAndEpoch:
    """A snapshot id: the end offset (exclusive) of the log it covers, and the epoch of its last batch."""

    offset: int
    epoch: int

    def __str__(self) -> str:
        return f"OffsetAndEpoch(offset={self.offset}, epoch={self.epoch})"


BOOTSTRAP_SNAPSHOT_ID = OffsetAndEpoch(0, 0)


@dataclass(frozen=True, slots=True)
class SnapshotPath:
    path: Path
    snapshot_id: OffsetAndEpoch
    partial: bool
    deleted: bool


def filename_from_snapshot_id(snapshot_id: OffsetAndEpoch) -> str:
    return f"{snapshot_id.offset:0{OFFSET_WIDTH}d}-{snapshot_id.epoch:0{EPOCH_WIDTH}d}"


def snapshot_path(log_dir: Path, snapshot_id: OffsetAndEpoch) -> Path:
    return Path(log_dir) / (filename_from_snapshot_id(snapshot_id) + SUFFIX)


def deleted_path(log_dir: Path, snapshot_id: OffsetAndEpoch) -> Path:
    return Path(log_dir) / (filename_from_snapshot_id(snapshot_id) + DELETE_SUFFIX)


def partial_path(log_dir: Path, snapshot_id: OffsetAndEpoch) -> Path:
    """A fresh ``<id>-<random>.checkpoint.part`` name, as Java's ``Files.createTempFile(dir, "<id>-", ...)``."""
    return Path(log_dir) / f"{filename_from_snapshot_id(snapshot_id)}-{int.from_bytes(os.urandom(8), 'big')}{PARTIAL_SUFFIX}"


def parse_snapshot_path(path: Path) -> SnapshotPath | None:
    """The snapshot a file name stands for (complete, partial or deleted); None for other files."""
    name = Path(path).name
    partial = deleted = False
    if name.endswith(PARTIAL_SUFFIX):
        partial = True
    elif name.endswith(DELETE_SUFFIX):
        deleted = True
    elif not name.endswith(SUFFIX):
        return None
    offset_part = name[:OFFSET_WIDTH]
    epoch_part = name[OFFSET_WIDTH + 1 : OFFSET_WIDTH + EPOCH_WIDTH + 1]
    if (len(name) < OFFSET_WIDTH + EPOCH_WIDTH + 1 or name[OFFSET_WIDTH] != "-"
            or not offset_part.isdigit() or not epoch_part.isdigit()):
        return None
    return SnapshotPath(Path(path), OffsetAndEpoch(int(offset_part), int(epoch_part)), partial, deleted)


def list_snapshot_paths(log_dir: Path) -> list[SnapshotPath]:
    """Every snapshot file (complete, partial or deleted) in ``log_dir``, by id."""
    try:
        names = os.listdir(log_dir)
    except FileNotFoundError:
        return []
    found = [p for p in (parse_snapshot_path(Path(log_dir) / n) for n in names) if p is not None]
    return sorted(found, key=lambda p: (p.snapshot_id, p.partial, p.deleted))
