"""The snapshots of one metadata log directory, and the log's retention behind them (the snapshot half
of Kafka's ``KafkaMetadataLog``).

- ``recover(log_start_offset)`` at open: deletes partial (``.checkpoint.part``) and retired
  (``.checkpoint.deleted``) files and snapshots below the log start offset; a log whose start offset
  is above 0 must have a snapshot at or past it (else ``InconsistentSnapshotError``, as Kafka's
  "Inconsistent snapshot state").
- ``create(snapshot_id, data)`` freezes a new snapshot (``records_snapshot.write_snapshot_file``).
- ``maybe_clean(log)`` is Kafka's retention of the metadata log (``KafkaMetadataLog.maybeClean``, run
  every 60 s by KafkaRaftClient): while at least two snapshots exist, and the oldest one breaches
  ``metadata.max.retention.bytes`` (log size + all snapshots' sizes above it) or
  ``metadata.max.retention.ms`` (its ``lastContainedLogTimestamp`` older than that), the log start
  offset moves up to the next snapshot, the segments wholly below it go, and the older snapshots are
  renamed ``.checkpoint.deleted`` and unlinked ``file.delete.delay.ms`` later. The newest snapshot is
  never deleted, and nothing is trimmed without a snapshot covering it.

The log itself is reached through ``MetadataLogView``: this package never imports the log layer.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from kbroker.snapshot.raw import FileRawSnapshotReader, FileRawSnapshotWriter
from kbroker.snapshot.records_snapshot import (
    SnapshotContents,
    read_snapshot_file,
    read_snapshot_header_file,
    write_snapshot_file,
)
from kbroker.snapshot.snapshots import OffsetAndEpoch, deleted_path, list_snapshot_paths, snapshot_path

log = logging.getLogger(__name__)

# KafkaRaftClient's RaftMetadataLogCleanerManager runs maybeClean every 60 s.
SNAPSHOT_CLEAN_INTERVAL_MS = 60000


class InconsistentSnapshotError(ValueError):
    """The log was trimmed but no snapshot covers its start (Kafka's IllegalStateException)."""


class MetadataLogView(Protocol):
    """What retention needs of the metadata log."""

    @property
    def start_offset(self) -> int: ...

    @property
    def size_in_bytes(self) -> int: ...

    def increment_log_start_offset(self, offset: int) -> bool:
        """Move the log start offset up to ``offset`` and delete the segments wholly below it; False
        if the log cannot (``offset`` past its high watermark)."""
        ...


class SnapshotRegistry:
    def __init__(self, directory: Path, time_ms: Callable[[], int], *, file_delete_delay_ms: int = 60000) -> None:
        self.directory = Path(directory)
        self.time_ms = time_ms
        self.file_delete_delay_ms = file_delete_delay_ms
        self._snapshots: dict[OffsetAndEpoch, int | None] = {}  # id -> lastContainedLogTimestamp (lazy)
        self._pending_deletes: list[tuple[int, OffsetAndEpoch]] = []

    # -- the set -----------------------------------------------------------------------------------

    @property
    def snapshot_ids(self) -> list[OffsetAndEpoch]:
        return sorted(self._snapshots)

    def latest_snapshot_id(self) -> OffsetAndEpoch | None:
        return max(self._snapshots) if self._snapshots else None

    def path(self, snapshot_id: OffsetAndEpoch) -> Path:
        return snapshot_path(self.directory, snapshot_id)

    def recover(self, log_start_offset: int) -> None:
        """Scan the directory (Kafka's ``KafkaMetadataLog.recoverSnapshots``)."""
        retain: dict[OffsetAndEpoch, int | None] = {}
        delete: list[Path] = []
        for sp in list_snapshot_paths(self.directory):
            if sp.partial or sp.deleted or sp.snapshot_id.offset < log_start_offset:
                delete.append(sp.path)
            else:
                retain[sp.snapshot_id] = None
        if log_start_offset > 0:
            latest = max(retain) if retain else None
            if latest is None or latest.offset < log_start_offset:
                raise InconsistentSnapshotError(
                    f"Inconsistent snapshot state: there must be a snapshot at an offset larger then the current "
                    f"log start offset {log_start_offset}, but the latest snapshot is {latest}")
        for p in delete:
            try:
                os.unlink(p)
                log.info("Deleted unneeded snapshot file with path %s", p)
            except FileNotFoundError:
                pass
        self._snapshots = retain
        log.info("Initialized snapshots with IDs %s from %s", [str(s) for s in sorted(retain)], self.directory)

    def create(self, snapshot_id: OffsetAndEpoch, data: bytes, last_contained_log_timestamp: int) -> Path | None:
        """Freeze a new snapshot; None if one with this id exists already (Kafka: Optional.empty())."""
        if snapshot_id in self._snapshots:
            return None
        path = write_snapshot_file(self.directory, snapshot_id, data)
        self._snapshots[snapshot_id] = last_contained_log_timestamp
        return path

    def create_writer(self, snapshot_id: OffsetAndEpoch) -> FileRawSnapshotWriter | None:
        """A raw writer for a snapshot fetched from the leader (FetchSnapshot; Kafka's
        ``createNewSnapshotUnchecked``): register it with ``on_frozen`` after ``freeze``. None if the
        snapshot exists."""
        if snapshot_id in self._snapshots:
            return None
        return FileRawSnapshotWriter(self.directory, snapshot_id)

    def on_frozen(self, snapshot_id: OffsetAndEpoch) -> None:
        self._snapshots.setdefault(snapshot_id, None)

    def open_reader(self, snapshot_id: OffsetAndEpoch) -> FileRawSnapshotReader | None:
        """The raw bytes of a known snapshot (what FetchSnapshot serves); None if unknown or gone."""
        if snapshot_id not in self._snapshots:
            return None
        try:
            return FileRawSnapshotReader(self.directory, snapshot_id)
        except FileNotFoundError:
            log.warning("Couldn't read %s; expected to find snapshot file %s", snapshot_id, self.path(snapshot_id))
            self._snapshots.pop(snapshot_id, None)
            return None

    def read(self, snapshot_id: OffsetAndEpoch) -> SnapshotContents:
        contents = read_snapshot_file(self.path(snapshot_id))
        self._snapshots[snapshot_id] = contents.last_contained_log_timestamp
        return contents

    def read_header(self, snapshot_id: OffsetAndEpoch) -> SnapshotContents:
        """The header batch only (no records): timestamp, kraft.version, voters."""
        contents = read_snapshot_header_file(self.path(snapshot_id))
        self._snapshots[snapshot_id] = contents.last_contained_log_timestamp
        return contents

    def size_of(self, snapshot_id: OffsetAndEpoch) -> int:
        try:
            return os.path.getsize(self.path(snapshot_id))
        except OSError:
            return 0

    def _timestamp_of(self, snapshot_id: OffsetAndEpoch) -> int | None:
        ts = self._snapshots.get(snapshot_id)
        if ts is None:
            try:
                ts = self.read_header(snapshot_id).last_contained_log_timestamp
            except Exception as e:  # noqa: BLE001 - an unreadable snapshot is never the reason to trim
                log.warning("Cannot read the timestamp of snapshot %s: %s", snapshot_id, e)
                return None
        return ts

    # -- retention ---------------------------------------------------------------------------------

    def delete_before_snapshot(self, snapshot_id: OffsetAndEpoch, metadata_log: MetadataLogView, reason: str) -> bool:
        """Move the log start offset to ``snapshot_id`` and retire the older snapshots (Kafka's
        ``deleteBeforeSnapshot``): only for a known snapshot past the log start, not past the latest."""
        latest = self.latest_snapshot_id()
        if (latest is None or snapshot_id not in self._snapshots
                or not metadata_log.start_offset < snapshot_id.offset <= latest.offset
                or not metadata_log.increment_log_start_offset(snapshot_id.offset)):
            return False
        forgotten = [s for s in sorted(self._snapshots) if s < snapshot_id]
        now = self.time_ms()
        for s in forgotten:
            del self._snapshots[s]
            log.info(reason.replace("{snapshot}", str(s)))
            try:
                os.replace(self.path(s), deleted_path(self.directory, s))
            except FileNotFoundError:
                pass
            self._pending_deletes.append((now + self.file_delete_delay_ms, s))
        self.delete_pending(now)
        return True

    def forget_before(self, snapshot_id: OffsetAndEpoch) -> None:
        """Delete the snapshots older than ``snapshot_id`` now: a follower installed ``snapshot_id`` from the
        leader and its log starts there (Kafka's ``truncateToLatestSnapshot`` + ``removeSnapshots``)."""
        for s in [s for s in self._snapshots if s < snapshot_id]:
            del self._snapshots[s]
            for p in (self.path(s), deleted_path(self.directory, s)):
                try:
                    os.unlink(p)
                except FileNotFoundError:
                    pass

    def maybe_clean(self, metadata_log: MetadataLogView, *, retention_bytes: int, retention_ms: int) -> bool:
        """Kafka's ``maybeClean``: size-based, then time-based snapshot retention."""
        did_clean = False
        if retention_bytes >= 0:
            sizes = {s: self.size_of(s) for s in self._snapshots}
            total = sum(sizes.values())

            def over_size(s: OffsetAndEpoch) -> str | None:
                nonlocal total
                if metadata_log.size_in_bytes + total > retention_bytes:
                    reason = (f"Marking snapshot {{snapshot}} for deletion because the size of the log "
                              f"({metadata_log.size_in_bytes}) and snapshots ({total}) is greater than "
                              f"{retention_bytes}")
                    total -= sizes.get(s, 0)
                    return reason
                return None

            did_clean |= self._clean(over_size, metadata_log)
        if retention_ms >= 0:
            now = self.time_ms()

            def over_time(s: OffsetAndEpoch) -> str | None:
                ts = self._timestamp_of(s)
                if ts is not None and now - ts > retention_ms:
                    return (f"Marking snapshot {{snapshot}} for deletion because its timestamp ({ts}) is now ({now}) "
                            f"older than the retention ({retention_ms})")
                return None

            did_clean |= self._clean(over_time, metadata_log)
        return did_clean

    def _clean(self, should_clean: Callable[[OffsetAndEpoch], str | None], metadata_log: MetadataLogView) -> bool:
        ids = sorted(self._snapshots)
        did_clean = False
        for snapshot, next_snapshot in zip(ids, ids[1:], strict=False):
            reason = should_clean(snapshot)
            if reason is None or not self.delete_before_snapshot(next_snapshot, metadata_log, reason):
                return did_clean
            did_clean = True
        return did_clean

    def delete_pending(self, now_ms: int, force: bool = False) -> None:
        """Unlink retired snapshots whose ``file.delete.delay.ms`` has passed (all with ``force``)."""
        keep = []
        for due, s in self._pending_deletes:
            if force or due <= now_ms:
                for p in (deleted_path(self.directory, s), self.path(s)):
                    try:
                        os.unlink(p)
                    except FileNotFoundError:
                        pass
                log.info("Deleted snapshot files for snapshot %s.", s)
            else:
                keep.append((due, s))
        self._pending_deletes = keep
