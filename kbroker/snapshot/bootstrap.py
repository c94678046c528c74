"""``bootstrap.checkpoint``: the metadata a new cluster starts from (Kafka's ``BootstrapDirectory`` and
``BootstrapMetadata``).

``kafka-storage format`` writes it into every log directory it formats: a snapshot-format file
(header, one data batch with the records, footer; epoch 0, ``lastContainedLogTimestamp`` 0) whose
records are ``FeatureLevelRecord``s, ``metadata.version`` first, then every other feature whose level
is not 0 in name order (``kraft.version`` is never among them: it lives in the Raft log's control
records), then the ``--add-scram`` credentials. The controller that finds its metadata log empty
commits these records as the log's first batch.

The file is written to ``bootstrap.checkpoint.tmp`` and renamed over (mode 0644, as Kafka).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kbroker.protocol.metadata_records import FeatureLevelRecord
from kbroker.snapshot.records_snapshot import (
    CorruptSnapshotError,
    build_snapshot,
    read_snapshot_file,
    write_file_atomically,
)
from kbroker.snapshot.snapshots import OffsetAndEpoch

BINARY_BOOTSTRAP_FILENAME = "bootstrap.checkpoint"
METADATA_VERSION = "metadata.version"
KRAFT_VERSION = "kraft.version"


@dataclass(frozen=True, slots=True)
class BootstrapMetadata:
    """The bootstrap records and where they came from (``source``: "format command", "the binary
    bootstrap metadata file: <path>", "the default bootstrap")."""

    records: list[object]
    metadata_version_level: int
    source: str

    @classmethod
    def from_versions(cls, metadata_version_level: int, feature_levels: dict[str, int],
                      source: str) -> BootstrapMetadata:
        """Kafka's ``BootstrapMetadata.fromVersions``: metadata.version, then the non-zero features by name."""
        records: list[object] = [FeatureLevelRecord(name=METADATA_VERSION, feature_level=metadata_version_level)]
        for name in sorted(feature_levels):
            level = feature_levels[name]
            if name in (METADATA_VERSION, KRAFT_VERSION) or level == 0:
                continue
            records.append(FeatureLevelRecord(name=name, feature_level=level))
        return cls(records, metadata_version_level, source)

    @classmethod
    def from_records(cls, records: list[object], source: str) -> BootstrapMetadata:
        level = None
        for r in records:
            if isinstance(r, FeatureLevelRecord) and r.name == METADATA_VERSION:
                level = int(r.feature_level)
        if level is None:
            raise ValueError(f"No FeatureLevelRecord for {METADATA_VERSION} was found in {source}")
        return cls(list(records), level, source)

    def feature_level(self, name: str) -> int:
        for r in self.records:
            if isinstance(r, FeatureLevelRecord) and r.name == name:
                return int(r.feature_level)
        return 0


def bootstrap_snapshot_bytes(bootstrap: BootstrapMetadata, now_ms: int) -> bytes:
    return build_snapshot(bootstrap.records, OffsetAndEpoch(0, 0), last_contained_log_timestamp=0, now_ms=now_ms)


def write_bootstrap_file(directory: Path, bootstrap: BootstrapMetadata, now_ms: int) -> Path:
    """Write ``<directory>/bootstrap.checkpoint`` (Kafka's ``BootstrapDirectory.writeBinaryFile``)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise OSError(f"No such directory as {directory}")
    target = directory / BINARY_BOOTSTRAP_FILENAME
    temp = directory / (BINARY_BOOTSTRAP_FILENAME + ".tmp")
    temp.unlink(missing_ok=True)
    write_file_atomically(target, bootstrap_snapshot_bytes(bootstrap, now_ms), temp, read_only=False)
    return target


def read_bootstrap_file(directory: Path) -> BootstrapMetadata | None:
    """The bootstrap metadata of ``<directory>/bootstrap.checkpoint``, None when there is no such file.

    ``CorruptSnapshotError`` for a file that is not a whole snapshot, ``ValueError`` for one without
    a metadata.version record (Kafka refuses to start on either)."""
    path = Path(directory) / BINARY_BOOTSTRAP_FILENAME
    if not path.exists():
        return None
    contents = read_snapshot_file(path)
    source = f"the binary bootstrap metadata file: {path}"
    return BootstrapMetadata.from_records(contents.records, source)


__all__ = ["BINARY_BOOTSTRAP_FILENAME", "BootstrapMetadata", "CorruptSnapshotError", "read_bootstrap_file",
           "write_bootstrap_file"]
