"""Raw snapshot files (Kafka's ``FileRawSnapshotWriter`` / ``FileRawSnapshotReader``): bytes in and out,
no record parsing. What FetchSnapshot serves (``slice``) and what a follower writes from the chunks it
fetches (``append`` then ``freeze``); ``records_snapshot.write_snapshot_file`` writes through it too.

A writer appends to ``<id>-<random>.checkpoint.part``; ``freeze`` fsyncs it, makes it read-only and
renames it to ``<id>.checkpoint``, then fsyncs the directory; ``close`` without ``freeze`` deletes the
part file (an abandoned fetch leaves nothing). A reader's ``slice(position, max_bytes)`` returns up to
``max_bytes`` bytes from ``position`` (fewer at the end; none past it), unaligned to batches, as
Kafka's ``UnalignedRecords``.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import TracebackType
from typing import BinaryIO

from kbroker.snapshot.snapshots import OffsetAndEpoch, partial_path, snapshot_path


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class FileRawSnapshotWriter:
    def __init__(self, log_dir: Path, snapshot_id: OffsetAndEpoch) -> None:
        self.log_dir = Path(log_dir)
        self.snapshot_id = snapshot_id
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.temp_path = partial_path(self.log_dir, snapshot_id)
        self._file: BinaryIO | None = open(self.temp_path, "xb")  # noqa: SIM115 - closed by freeze/close
        self._size = 0
        self.frozen_path: Path | None = None

    @property
    def size_in_bytes(self) -> int:
        return self._size

    @property
    def is_frozen(self) -> bool:
        return self.frozen_path is not None

    def append(self, data: bytes | bytearray | memoryview) -> None:
        if self._file is None:
            raise RuntimeError(f"Append is not supported. Snapshot is already frozen: id = {self.snapshot_id}")
        self._file.write(data)
        self._size += len(data)

    def freeze(self) -> Path:
        """Make the snapshot durable and visible under its final name; the path."""
        if self._file is None:
            raise RuntimeError(f"Freeze is not supported. Snapshot is already frozen: id = {self.snapshot_id}")
        f, self._file = self._file, None
        try:
            f.flush()
            os.fsync(f.fileno())
        finally:
            f.close()
        os.chmod(self.temp_path, 0o400)  # Java's File.setReadOnly on its 0600 temp file
        target = snapshot_path(self.log_dir, self.snapshot_id)
        os.replace(self.temp_path, target)
        fsync_dir(self.log_dir)
        self.frozen_path = target
        return target

    def close(self) -> None:
        """Abandon an unfrozen snapshot (its part file is deleted); a no-op after ``freeze``."""
        if self._file is not None:
            self._file.close()
            self._file = None
        if self.frozen_path is None:
            try:
                os.unlink(self.temp_path)
            except FileNotFoundError:
                pass

    def __enter__(self) -> FileRawSnapshotWriter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


class FileRawSnapshotReader:
    def __init__(self, log_dir: Path, snapshot_id: OffsetAndEpoch) -> None:
        self.snapshot_id = snapshot_id
        self.path = snapshot_path(log_dir, snapshot_id)
        self._file: BinaryIO = open(self.path, "rb")  # noqa: SIM115 - closed by close()
        self.size_in_bytes = os.fstat(self._file.fileno()).st_size

    def slice(self, position: int, max_bytes: int) -> bytes:
        if position < 0 or max_bytes < 0:
            raise ValueError(f"invalid slice position {position} / size {max_bytes}")
        return os.pread(self._file.fileno(), max(0, min(max_bytes, self.size_in_bytes - position)), position)

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> FileRawSnapshotReader:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
