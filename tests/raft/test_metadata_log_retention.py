"""`metadata.max.retention.bytes` / `metadata.max.retention.ms` on the Raft metadata log (KafkaMetadataLog).

As Kafka's `KafkaMetadataLog.maybeClean`: a new snapshot trims nothing by itself; segments and older
snapshots stay until the log plus the snapshots exceed the size limit, or a snapshot's last contained
timestamp is older than the time limit; then the log start offset moves up to the next snapshot, the
segments wholly below it and the older snapshots are deleted. The latest snapshot is never deleted and
the log start never passes it; a reopened log keeps its retained prefix.
"""

from __future__ import annotations

from pathlib import Path

from kbroker.protocol.records import SimpleRecord, build_batch
from kbroker.raft.metadata_log import CLUSTER_METADATA_DIR, KafkaMetadataLog, MetadataLogRetention
from kbroker.raft.raft_log import OffsetAndEpoch
from kbroker.snapshot import OffsetAndEpoch as SnapshotId
from kbroker.snapshot import build_snapshot


class Clock:
    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


def _fill(log: KafkaMetadataLog, batches: int) -> None:
    for _ in range(batches):
        base = log.end_offset()
        log.append(bytes(build_batch([SimpleRecord(value=b"x" * 40), SimpleRecord(value=b"y" * 40)],
                                     base_offset=base, partition_leader_epoch=1, now_ms=1000)))
    log.flush()


def _snapshot(log: KafkaMetadataLog, offset: int, ts: int) -> None:
    sid = OffsetAndEpoch(offset, 1)
    log.create_snapshot(sid, build_snapshot([], SnapshotId(offset, 1), last_contained_log_timestamp=ts, now_ms=ts))
    log.delete_before_snapshot(sid)  # what KafkaRaftClient.create_snapshot calls


def _segments(tmp_path: Path) -> list[int]:
    return sorted(int(p.name[:-4]) for p in (tmp_path / CLUSTER_METADATA_DIR).glob("*.log"))


def _snapshot_files(tmp_path: Path) -> list[str]:
    return sorted(p.name for p in (tmp_path / CLUSTER_METADATA_DIR).iterdir() if ".checkpoint" in p.name)


def _open(tmp_path: Path, clock: Clock, **kw: int) -> KafkaMetadataLog:
    retention = MetadataLogRetention(**{"segment_bytes": 400, "file_delete_delay_ms": 0, "retention_ms": -1, **kw})
    return KafkaMetadataLog(tmp_path, clock, retention)


def test_size_retention_keeps_everything_under_the_limit_then_trims_to_the_latest_snapshot(tmp_path: Path) -> None:
    clock = Clock()
    log = _open(tmp_path, clock, retention_bytes=1 << 20)
    _fill(log, 30)  # offsets 0-59, a segment every ~3 batches
    for off in (10, 20, 30, 40):
        _snapshot(log, off, 1000)
    assert log.start_offset() == 0 and [s.offset for s in log.snapshot_ids()] == [10, 20, 30, 40]
    segments_before = _segments(tmp_path)
    assert len(segments_before) > 5
    log.close()

    log = _open(tmp_path, clock, retention_bytes=1)  # everything breaches: only the latest snapshot stays
    assert log.start_offset() == 0  # opening trims nothing: the retained prefix is still there
    assert log.maybe_clean(force=True)
    assert log.start_offset() == 40 and [s.offset for s in log.snapshot_ids()] == [40]
    assert _snapshot_files(tmp_path) == ["00000000000000000040-0000000001.checkpoint"]
    left = _segments(tmp_path)
    assert left[0] <= 40 and len(left) < len(segments_before)  # segments wholly below 40 are gone
    assert all(b >= left[0] for b in segments_before if b > 40)
    assert log.end_offset() == 60 and log.read(40, 1 << 20)
    log.close()
    again = _open(tmp_path, clock, retention_bytes=1)
    assert (again.start_offset(), again.end_offset(), again.latest_snapshot_id()) == (40, 60, OffsetAndEpoch(40, 1))
    again.close()


def test_size_retention_between(tmp_path: Path) -> None:
    clock = Clock()
    log = _open(tmp_path, clock, retention_bytes=1 << 20)
    _fill(log, 30)
    for off in (10, 20, 30, 40):
        _snapshot(log, off, 1000)
    total = log.log.size_in_bytes + sum((tmp_path / CLUSTER_METADATA_DIR / n).stat().st_size
                                        for n in _snapshot_files(tmp_path))
    log.close()
    log = _open(tmp_path, clock, retention_bytes=total - 1)  # just over: one step is enough
    assert log.maybe_clean(force=True)
    assert log.start_offset() == 20 and [s.offset for s in log.snapshot_ids()] == [20, 30, 40]
    log.close()


def test_time_retention_by_the_snapshots_last_contained_timestamp(tmp_path: Path) -> None:
    clock = Clock()
    log = _open(tmp_path, clock, retention_bytes=-1, retention_ms=7500)
    _fill(log, 30)
    for off, ts in ((10, 1000), (20, 2000), (30, 3000), (40, 4000)):
        _snapshot(log, off, ts)
    clock.now = 5000
    assert not log.maybe_clean(force=True) and log.start_offset() == 0
    clock.now = 10000  # snapshots older than 2500 breach: those of 1000 and 2000
    assert log.maybe_clean(force=True)
    assert log.start_offset() == 30 and [s.offset for s in log.snapshot_ids()] == [30, 40]
    clock.now = 10**9  # everything is old: still never past the latest snapshot
    assert log.maybe_clean(force=True)
    assert log.start_offset() == 40 and [s.offset for s in log.snapshot_ids()] == [40]
    log.close()


def test_the_check_runs_every_60_s_unless_forced(tmp_path: Path) -> None:
    clock = Clock()
    log = _open(tmp_path, clock, retention_bytes=1)
    _fill(log, 10)
    log.create_snapshot(OffsetAndEpoch(10, 1), build_snapshot([], SnapshotId(10, 1), last_contained_log_timestamp=0,
                                                              now_ms=0))
    log.create_snapshot(OffsetAndEpoch(16, 1), build_snapshot([], SnapshotId(16, 1), last_contained_log_timestamp=0,
                                                              now_ms=0))
    clock.now = 59_999
    assert not log.maybe_clean() and log.start_offset() == 0
    clock.now = 60_000
    assert log.maybe_clean() and log.start_offset() == 16
    log.close()


def test_without_retention_keys_the_log_is_trimmed_at_each_snapshot(tmp_path: Path) -> None:
    log = KafkaMetadataLog(tmp_path, Clock())
    _fill(log, 10)
    _snapshot(log, 10, 0)
    _snapshot(log, 16, 0)
    assert log.start_offset() == 16 and [s.offset for s in log.snapshot_ids()] == [16]
    log.close()
