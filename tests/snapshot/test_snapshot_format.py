"""kbroker.snapshot without a JVM: file names, the header/records/footer layout, corrupt files, the
registry's recovery and Kafka's metadata retention rules, the SnapshotGenerator's triggers on a fake
clock, and `kbroker storage format`'s rules (features, quorum flags, already formatted dirs).
"""

from __future__ import annotations

import io
import os
import uuid
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kbroker.config import KafkaConfig
from kbroker.log.checkpoints import java_properties_order, read_properties
from kbroker.metadata.image import MetadataImage, MetadataProvenance
from kbroker.metadata.loader import LogDeltaManifest, SnapshotManifest
from kbroker.metadata.snapshot_generator import SnapshotGenerator
from kbroker.protocol.metadata_records import FeatureLevelRecord, TopicRecord
from kbroker.protocol.records import iter_batches
from kbroker.snapshot import (
    CorruptSnapshotError,
    OffsetAndEpoch,
    build_snapshot,
    filename_from_snapshot_id,
    parse_snapshot_path,
    read_snapshot,
    read_snapshot_file,
    write_snapshot_file,
)
from kbroker.snapshot.bootstrap import read_bootstrap_file
from kbroker.snapshot.snapshot_registry import InconsistentSnapshotError, SnapshotRegistry
from kbroker.storage_tool import (
    FormatRequest,
    FormatterError,
    format_storage,
    parse_initial_controllers,
    parse_release_version,
)

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qk"


def _records(n: int) -> list[object]:
    return [TopicRecord(name=f"t{i}", topic_id=uuid.UUID(int=i + 2)) for i in range(n)]


def test_names() -> None:
    sid = OffsetAndEpoch(1234, 7)
    assert filename_from_snapshot_id(sid) == "00000000000000001234-0000000007"
    for suffix, partial, deleted in ((".checkpoint", False, False), (".checkpoint.deleted", False, True),
                                     ("-99.checkpoint.part", True, False)):
        sp = parse_snapshot_path(Path("/x") / (filename_from_snapshot_id(sid) + suffix))
        assert sp is not None and sp.snapshot_id == sid and (sp.partial, sp.deleted) == (partial, deleted)
    for other in ("bootstrap.checkpoint", "00000000000000000000.log", "abc-0000000001.checkpoint", "x"):
        assert parse_snapshot_path(Path(other)) is None


def test_layout_round_trip_and_batching() -> None:
    records = _records(300)
    data = build_snapshot(records, OffsetAndEpoch(301, 3), last_contained_log_timestamp=42, now_ms=1000,
                          max_batch_size=4096)
    batches = list(iter_batches(data))
    assert batches[0].is_control and batches[-1].is_control and len(batches) > 3
    assert all(b.partition_leader_epoch == 3 and b.is_valid() for b in batches)
    assert all(b.size_in_bytes <= 4096 for b in batches[1:-1])
    # Offsets are contiguous from 0: header at 0, records 1..300, footer at 301.
    assert [b.base_offset for b in batches][0] == 0 and batches[-1].base_offset == 301
    assert all(a.next_offset == b.base_offset for a, b in zip(batches, batches[1:], strict=False))
    contents = read_snapshot(data)
    assert contents.records == records and contents.last_contained_log_timestamp == 42
    assert contents.kraft_version is None and contents.voters is None


@pytest.mark.parametrize("damage", ["truncated", "no_footer", "crc", "no_header", "garbage", "empty"])
def test_corrupt_snapshots_are_refused(damage: str) -> None:
    good = build_snapshot(_records(5), OffsetAndEpoch(6, 1), last_contained_log_timestamp=1, now_ms=1)
    batches = [bytes(b.buf) if hasattr(b, "buf") else None for b in iter_batches(good)]
    sizes = [b.size_in_bytes for b in iter_batches(good)]
    if damage == "truncated":
        data = good[:-10]
    elif damage == "no_footer":
        data = good[: len(good) - sizes[-1]]
    elif damage == "crc":
        data = bytearray(good)
        data[sizes[0] + 70] ^= 0xFF
    elif damage == "no_header":
        data = good[sizes[0]:]
    elif damage == "garbage":
        data = os.urandom(200)
    else:
        data = b""
    assert batches  # the good snapshot parses into batches
    with pytest.raises(CorruptSnapshotError):
        read_snapshot(bytes(data))


def test_write_is_atomic_and_read_only(tmp_path: Path) -> None:
    data = build_snapshot(_records(3), OffsetAndEpoch(4, 1), last_contained_log_timestamp=9, now_ms=9)
    path = write_snapshot_file(tmp_path / "meta", OffsetAndEpoch(4, 1), data)
    assert path.name == "00000000000000000004-0000000001.checkpoint"
    assert os.stat(path).st_mode & 0o777 == 0o400
    assert sorted(os.listdir(tmp_path / "meta")) == [path.name]  # no .part left behind
    assert read_snapshot_file(path).records == _records(3)


class FakeLog:
    def __init__(self, hw: int, size: int = 0) -> None:
        self.start_offset = 0
        self.size_in_bytes = size
        self.hw = hw

    def increment_log_start_offset(self, offset: int) -> bool:
        if offset > self.hw or offset <= self.start_offset:
            return False
        self.start_offset = offset
        return True


def _registry_with(tmp_path: Path, ids: list[int], clock: list[int]) -> SnapshotRegistry:
    reg = SnapshotRegistry(tmp_path, lambda: clock[0], file_delete_delay_ms=1000)
    reg.recover(0)
    for i in ids:
        data = build_snapshot(_records(2), OffsetAndEpoch(i, 1), last_contained_log_timestamp=i * 1000, now_ms=0)
        reg.create(OffsetAndEpoch(i, 1), data, i * 1000)
    return reg


def test_recover_deletes_partial_and_old_and_checks_consistency(tmp_path: Path) -> None:
    clock = [0]
    _registry_with(tmp_path, [10, 20], clock)
    (tmp_path / "00000000000000000030-0000000001-5.checkpoint.part").write_bytes(b"half")
    (tmp_path / "00000000000000000005-0000000001.checkpoint.deleted").write_bytes(b"old")
    reg = SnapshotRegistry(tmp_path, lambda: 0)
    reg.recover(15)  # the log starts at 15: snapshot 10 is below it
    assert reg.snapshot_ids == [OffsetAndEpoch(20, 1)]
    assert sorted(os.listdir(tmp_path)) == ["00000000000000000020-0000000001.checkpoint"]
    with pytest.raises(InconsistentSnapshotError):
        SnapshotRegistry(tmp_path, lambda: 0).recover(25)  # trimmed past every snapshot


def test_retention_by_size_and_time_keeps_the_newest(tmp_path: Path) -> None:
    clock = [100_000]
    reg = _registry_with(tmp_path, [10, 20, 30], clock)
    log = FakeLog(hw=40, size=10)
    # Generous limits: nothing to do.
    assert not reg.maybe_clean(log, retention_bytes=10**9, retention_ms=10**9)
    # Time: at t=100 s snapshot 10 (timestamp 10 s) is older than 85 s, snapshot 20 is not: the log
    # start moves to 20 and snapshot 10 is retired.
    assert reg.maybe_clean(log, retention_bytes=-1, retention_ms=85_000)
    assert reg.snapshot_ids == [OffsetAndEpoch(20, 1), OffsetAndEpoch(30, 1)] and log.start_offset == 20
    assert (tmp_path / "00000000000000000010-0000000001.checkpoint.deleted").exists()
    clock[0] += 1000
    reg.delete_pending(clock[0])
    assert not (tmp_path / "00000000000000000010-0000000001.checkpoint.deleted").exists()
    # Size: 1 byte is always breached, but the newest snapshot stays.
    assert reg.maybe_clean(log, retention_bytes=1, retention_ms=-1)
    assert reg.snapshot_ids == [OffsetAndEpoch(30, 1)] and log.start_offset == 30
    assert not reg.maybe_clean(log, retention_bytes=1, retention_ms=0)


def test_retention_never_trims_past_the_high_watermark(tmp_path: Path) -> None:
    reg = _registry_with(tmp_path, [10, 20], [10**9])
    log = FakeLog(hw=15)
    assert not reg.maybe_clean(log, retention_bytes=1, retention_ms=0)
    assert reg.snapshot_ids == [OffsetAndEpoch(10, 1), OffsetAndEpoch(20, 1)] and log.start_offset == 0


def _image(offset: int, aligned: bool = True) -> MetadataImage:
    return MetadataImage(provenance=MetadataProvenance(offset, 1, 0, aligned))


def test_generator_bytes_and_time_triggers() -> None:
    now = [0]
    emitted: list[tuple[int, str]] = []
    gen = SnapshotGenerator(lambda img, why: emitted.append((img.provenance.last_contained_offset, why)),
                            max_bytes_since_last_snapshot=1000, max_time_since_last_snapshot_ms=60_000,
                            time_ms=lambda: now[0])

    def delta(offset: int, size: int, aligned: bool = True) -> None:
        img = _image(offset, aligned)
        gen.on_metadata_update(None, img, LogDeltaManifest(img.provenance, 1, 0, size))  # type: ignore[arg-type]

    delta(1, 600)
    assert emitted == []
    delta(2, 400)  # 1000 bytes: emit, counters reset
    assert emitted == [(2, "we have replayed at least 1000 bytes")]
    delta(3, 999, aligned=False)
    delta(4, 10, aligned=False)  # over the limit but not batch aligned: not emitted, not reset
    assert len(emitted) == 1
    delta(5, 1)
    assert emitted[-1][0] == 5
    now[0] = 59_999
    delta(6, 1)
    assert len(emitted) == 2
    now[0] = 60_000
    delta(7, 1)
    assert emitted[-1] == (7, "we have waited at least 1 minute(s)")
    # An image loaded from a snapshot restarts the counters.
    delta(8, 900)
    img = _image(9)
    gen.on_metadata_update(None, img, SnapshotManifest(img.provenance, 0))  # type: ignore[arg-type]
    delta(10, 200)
    assert emitted[-1][0] == 7


def test_java_properties_order() -> None:
    assert java_properties_order(["version", "cluster.id", "node.id", "directory.id"]) == [
        "node.id", "directory.id", "version", "cluster.id"]


# -- kbroker storage format ----------------------------------------------------------------------------

def _config(tmp_path: Path, **extra: str) -> KafkaConfig:
    props = {"node.id": "1", "log.dirs": f"{tmp_path / 'a'},{tmp_path / 'b'}",
             "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
             "controller.listener.names": "CONTROLLER",
             "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT"}
    props.update(extra)
    return KafkaConfig(props)


def _format(config: KafkaConfig, **kw: object) -> str:
    out = io.StringIO()
    req = FormatRequest(cluster_id=str(kw.pop("cluster_id", CLUSTER_ID)), **kw)  # type: ignore[arg-type]
    assert format_storage(config, req, out) == 0
    return out.getvalue()


def test_format_writes_every_dir(tmp_path: Path) -> None:
    out = _format(_config(tmp_path))
    # Kafka formats in a HashMap's order of the paths (storage_tool.py), so which line comes first
    # depends on tmp_path's hash: compare with that order, not a fixed one.
    line = {str(tmp_path / "a"): f"Formatting metadata directory {tmp_path / 'a'} with metadata.version 4.3-IV0.",
            str(tmp_path / "b"): f"Formatting data directory {tmp_path / 'b'} with metadata.version 4.3-IV0."}
    assert out.splitlines()[1:] == [line[d] for d in java_properties_order(line)]
    a, b = read_properties(tmp_path / "a" / "meta.properties"), read_properties(tmp_path / "b" / "meta.properties")
    assert a is not None and b is not None
    assert a["cluster.id"] == b["cluster.id"] == CLUSTER_ID and a["directory.id"] != b["directory.id"]
    boot = read_bootstrap_file(tmp_path / "b")
    assert boot is not None and boot.records == [FeatureLevelRecord(name="metadata.version", feature_level=30),
                                                 FeatureLevelRecord(name="eligible.leader.replicas.version",
                                                                    feature_level=1),
                                                 FeatureLevelRecord(name="group.version", feature_level=1),
                                                 FeatureLevelRecord(name="transaction.version", feature_level=2)]
    assert not (tmp_path / "a" / "__cluster_metadata-0").exists()
    # Formatted already: refused, or skipped with --ignore-formatted.
    with pytest.raises(FormatterError, match="is already formatted. Use --ignore-formatted"):
        _format(_config(tmp_path))
    assert _format(_config(tmp_path), ignore_formatted=True) == "All of the log directories are already formatted.\n"
    with pytest.raises(FormatterError, match="Invalid cluster.id"):
        _format(_config(tmp_path), cluster_id="AAAAAAAAAAAAAAAAAAAAAQ", ignore_formatted=True)


@pytest.mark.parametrize(("kwargs", "extra", "message"), [
    ({"features": ["foo.version=1"]}, {}, "Unsupported feature: foo.version"),
    ({"features": ["transaction.version=3"]}, {}, "No feature:transaction.version with feature level 3"),
    ({"features": ["eligible.leader.replicas.version=1"], "release_version": "4.0-IV0"}, {},
     "eligible.leader.replicas.version could not be set to 1 because it depends on metadata.version level 23"),
    ({"features": ["metadata.version=30"], "release_version": "4.3"}, {}, "Use --release-version instead"),
    ({"release_version": "2.8"}, {}, "Unknown metadata.version '2.8'"),
    ({"features": ["kraft.version=1"]}, {}, "Cannot set kraft.version to 1 unless KIP-853"),
    ({"standalone": True}, {"controller.quorum.voters": "1@127.0.0.1:9093"}, "You cannot specify controller.quorum.voters"),
    ({}, {"controller.quorum.bootstrap.servers": "127.0.0.1:9093"}, "you must specify one of the following"),
    ({"cluster_id": "not-a-uuid"}, {}, "does not appear to be a valid UUID"),
    ({"standalone": True}, {"process.roles": "broker", "controller.quorum.bootstrap.servers": "h:1"},
     "You can only use --standalone on a controller."),
    ({"add_scram": ["SCRAM-SHA-256=[name=alice,password=x]"]}, {}, "--add-scram is not supported"),
    ({"initial_controllers": "1@host:9093"}, {"controller.quorum.bootstrap.servers": "h:1"}, "No colon following port"),
])
def test_format_errors(tmp_path: Path, kwargs: dict[str, object], extra: dict[str, str], message: str) -> None:
    with pytest.raises(FormatterError, match=message):
        _format(_config(tmp_path, **extra), **kwargs)
    assert not (tmp_path / "a" / "meta.properties").exists()


def test_format_standalone_and_release_versions(tmp_path: Path) -> None:
    config = _config(tmp_path, **{"controller.quorum.bootstrap.servers": "127.0.0.1:9093"})
    out = _format(config, standalone=True, release_version="3.9")
    assert "Formatting dynamic metadata voter directory" in out and "metadata.version 3.9-IV0" in out
    snap = read_snapshot_file(tmp_path / "a" / "__cluster_metadata-0" / "00000000000000000000-0000000000.checkpoint")
    assert snap.kraft_version == 1 and snap.voters is not None
    voter = snap.voters.voters[0]
    assert (voter.voter_id, voter.endpoints[0].host, voter.endpoints[0].port) == (1, "127.0.0.1", 9093)
    meta = read_properties(tmp_path / "a" / "meta.properties")
    assert meta is not None
    from kbroker.log.checkpoints import uuid_to_base64
    assert meta["directory.id"] == uuid_to_base64(voter.voter_directory_id)
    boot = read_bootstrap_file(tmp_path / "a")
    assert boot is not None and boot.records == [FeatureLevelRecord(name="metadata.version", feature_level=21)]
    assert parse_release_version("4.0") == 25 and parse_release_version("3.3-IV3") == 7


def test_parse_initial_controllers() -> None:
    voters = parse_initial_controllers("0@a:1:JEXY6aqzQY-32P5TStzaFg,1@[::1]:2:MvDxzVmcRsaTz33bUuRU6A")
    assert [(v.node_id, v.host, v.port) for v in voters.values()] == [(0, "a", 1), (1, "::1", 2)]
    with pytest.raises(FormatterError, match="more than once"):
        parse_initial_controllers("0@a:1:JEXY6aqzQY-32P5TStzaFg,0@b:2:MvDxzVmcRsaTz33bUuRU6A")
    with pytest.raises(FormatterError, match="No @"):
        parse_initial_controllers("a:1:JEXY6aqzQY-32P5TStzaFg")


def test_header_only_read(tmp_path: Path) -> None:
    from kbroker.protocol.messages.voters_record import VotersRecord
    from kbroker.snapshot.records_snapshot import read_snapshot_header_file

    voters = VotersRecord(version=0, voters=[VotersRecord.Voter(
        voter_id=3, voter_directory_id=uuid.UUID(int=7),
        endpoints=[VotersRecord.Endpoint(name="CONTROLLER", host="h", port=1)],
        kraft_version_feature=VotersRecord.KRaftVersionFeature(min_supported_version=0, max_supported_version=1))])
    data = build_snapshot(_records(50), OffsetAndEpoch(51, 2), last_contained_log_timestamp=77, now_ms=5,
                          kraft_version=1, voters=voters)
    path = write_snapshot_file(tmp_path, OffsetAndEpoch(51, 2), data)
    head = read_snapshot_header_file(path)
    assert head.records == [] and head.last_contained_log_timestamp == 77
    assert head.kraft_version == 1 and head.voters == voters
    full = read_snapshot_file(path)
    assert full.voters == voters and len(full.records) == 50
    bad = tmp_path / "00000000000000000001-0000000001.checkpoint"
    bad.write_bytes(data[10:])
    with pytest.raises(CorruptSnapshotError, match=bad.name):
        read_snapshot_header_file(bad)


_GOOD = build_snapshot(_records(20), OffsetAndEpoch(21, 1), last_contained_log_timestamp=3, now_ms=3)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, len(_GOOD) - 1), st.integers(0, 255)), min_size=1, max_size=4),
       st.integers(0, len(_GOOD)))
def test_damaged_snapshots_only_raise_corrupt_snapshot(flips: list[tuple[int, int]], cut: int) -> None:
    """Bad bytes never crash the reader with another exception type (a start stops with one line)."""
    data = bytearray(_GOOD[:cut] if cut else _GOOD)
    for pos, value in flips:
        if pos < len(data):
            data[pos] = value
    try:
        contents = read_snapshot(bytes(data))
    except CorruptSnapshotError:
        return
    assert contents.header is not None


def test_raw_slices_copy_a_snapshot_chunk_by_chunk(tmp_path: Path) -> None:
    """What FetchSnapshot does: the leader serves slices, the follower appends them and freezes."""
    sid = OffsetAndEpoch(201, 4)
    leader = SnapshotRegistry(tmp_path / "leader", lambda: 0)
    leader.recover(0)
    data = build_snapshot(_records(200), sid, last_contained_log_timestamp=1, now_ms=1)
    leader.create(sid, data, 1)
    follower = SnapshotRegistry(tmp_path / "follower", lambda: 0)
    follower.recover(0)
    reader = leader.open_reader(sid)
    writer = follower.create_writer(sid)
    assert reader is not None and writer is not None
    with reader, writer:
        position = 0
        while chunk := reader.slice(position, 1000):  # unaligned to batches
            writer.append(chunk)
            position += len(chunk)
        assert reader.slice(reader.size_in_bytes + 5, 10) == b""
        assert list((tmp_path / "follower").glob("*.checkpoint")) == []  # invisible until frozen
        writer.freeze()
    follower.on_frozen(sid)
    assert follower.snapshot_ids == [sid] and follower.read(sid).records == _records(200)
    assert leader.open_reader(OffsetAndEpoch(5, 1)) is None and follower.create_writer(sid) is None
    # An abandoned fetch leaves nothing behind.
    other = follower.create_writer(OffsetAndEpoch(300, 4))
    assert other is not None
    other.append(b"partial")
    other.close()
    assert sorted(p.name for p in (tmp_path / "follower").iterdir()) == [f"{filename_from_snapshot_id(sid)}.checkpoint"]
