"""UnifiedLog: appends, offset assignment, reads (KIP-74, max_offset bound, segment boundaries),
timestamps, rolling rules, leader epochs, DeleteRecords, truncation and retention."""

from __future__ import annotations

from pathlib import Path

import pytest
from log_test_helpers import NOW, FakeClock, make_batch, open_log, read_all, small_config

from kbroker.log import (
    InvalidRecordError,
    InvalidTimestampError,
    OffsetOutOfRangeError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
)
from kbroker.log.errors import CorruptRecordError
from kbroker.protocol.compression import CompressionType
from kbroker.protocol.records import RecordBatch, TimestampType, iter_batches


def test_offsets_assigned_in_place_and_bytes_otherwise_untouched(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(memoryview(make_batch(3)), 7)
    raw = make_batch(4, tag=1)
    original = bytes(raw)
    info = log.append_as_leader(memoryview(raw), 7)
    assert (info.first_offset, info.last_offset, info.num_messages) == (3, 6, 4)
    assert info.log_append_time == -1 and not info.duplicate
    assert log.log_end_offset == 7
    # Only baseOffset (0..8) and partitionLeaderEpoch (12..16) changed: both outside the CRC.
    assert raw[8:12] == original[8:12] and raw[16:] == original[16:]
    batch = RecordBatch(memoryview(raw))
    assert batch.base_offset == 3 and batch.partition_leader_epoch == 7 and batch.is_valid()
    data = log.read(3, 10_000).region.read_bytes()  # type: ignore[union-attr]
    assert data == bytes(raw)


def test_read_mid_batch_returns_whole_batch_and_bounds(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    for i in range(5):
        log.append_as_leader(memoryview(make_batch(10, tag=i)), 0)
    first = log.read(0, 1 << 20).region
    assert first is not None
    sizes = [b.size_in_bytes for b in iter_batches(first.read_bytes())]
    info = log.read(15, 1 << 20)  # inside the second batch
    assert info.region is not None and info.region.position == sizes[0]
    # max_offset (exclusive) stops the region before the batch holding it.
    bounded = log.read(0, 1 << 20, max_offset=20)
    assert bounded.region is not None and bounded.region.size == sizes[0] + sizes[1]
    assert log.read(20, 1 << 20, max_offset=20).region is None
    assert log.read(50, 100).region is None  # at the log end offset: empty, not an error
    with pytest.raises(OffsetOutOfRangeError):
        log.read(51, 100)
    # KIP-74: the first batch is returned whole even when larger than max_bytes.
    tiny = log.read(0, 10)
    assert tiny.region is not None and tiny.region.size == sizes[0]
    cut = log.read(0, 10, min_one_message=False)
    assert cut.region is not None and cut.region.size == 10 and cut.first_entry_incomplete
    # max_bytes cuts later batches mid-way (like Kafka: clients drop the partial tail).
    part = log.read(0, sizes[0] + 5)
    assert part.region is not None and part.region.size == sizes[0] + 5


def test_reads_follow_segments_and_never_span_them(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", small_config(segment_bytes=2048))
    for i in range(40):
        log.append_as_leader(memoryview(make_batch(2, 100, tag=i)), 0)
    assert log.num_segments > 3
    bases = [s.base_offset for s in log.segments]
    for s_i, base in enumerate(bases[1:], 1):
        info = log.read(base - 1, 1 << 20)
        assert info.region is not None and info.region.file is log.segments[s_i - 1].file
        batches = list(iter_batches(info.region.read_bytes()))
        assert batches[-1].next_offset == base
    records = read_all(log)
    assert [r[0] for r in records] == list(range(80))


def test_fetch_offset_by_timestamp(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", small_config(segment_bytes=2048))
    for i in range(30):  # record j of batch i has timestamp NOW + 1000*i + j
        log.append_as_leader(memoryview(make_batch(3, 50, ts=NOW + 1000 * i, tag=i)), 4)
    assert log.fetch_offset_by_timestamp(NOW + 5000) == (15, NOW + 5000, 4)
    assert log.fetch_offset_by_timestamp(NOW + 5001) == (16, NOW + 5001, 4)
    assert log.fetch_offset_by_timestamp(NOW + 5003) == (18, NOW + 6000, 4)  # earliest ts >= target
    assert log.fetch_offset_by_timestamp(NOW + 10**9) is None
    assert log.fetch_offset_by_timestamp(0) == (0, NOW, 4)
    assert log.fetch_offset_by_timestamp(-2) == (0, -1, 4)
    assert log.fetch_offset_by_timestamp(-1) == (90, -1, 4)
    assert log.fetch_offset_by_timestamp(-3) == (89, NOW + 29002, 4)


def test_log_append_time_and_recompression(tmp_path: Path) -> None:
    clock = FakeClock()
    cfg = small_config(message_timestamp_type="LogAppendTime", compression_type="gzip")
    log = open_log(tmp_path / "t-0", cfg, clock)
    info = log.append_as_leader(memoryview(make_batch(5, 200, ts=1)), 0)
    assert info.log_append_time == clock.now and info.max_timestamp == clock.now
    batch = next(iter_batches(log.read(0, 1 << 20).region.read_bytes()))  # type: ignore[union-attr]
    assert batch.compression_type == CompressionType.GZIP and batch.is_valid()
    assert batch.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert [r.timestamp for r in batch] == [clock.now] * 5
    assert [r.value[:8] for r in batch] == [make_batch(5, 200)[0:0] + bytes(4) + i.to_bytes(4, "big") for i in range(5)]  # type: ignore[index]


def test_validation_errors(tmp_path: Path) -> None:
    clock = FakeClock()
    log = open_log(tmp_path / "t-0", small_config(max_message_bytes=500, message_timestamp_after_max_ms=3600000), clock)
    with pytest.raises(RecordTooLargeError):
        log.append_as_leader(memoryview(make_batch(1, 600)), 0)
    with pytest.raises(InvalidTimestampError):
        log.append_as_leader(memoryview(make_batch(1, ts=clock.now + 3600001)), 0)
    bad = make_batch(1)
    bad[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        log.append_as_leader(memoryview(bad), 0)
    wrong_count = make_batch(2)
    wrong_count[57:61] = (5).to_bytes(4, "big")
    with pytest.raises((InvalidRecordError, CorruptRecordError)):
        log.append_as_leader(memoryview(wrong_count), 0)
    assert log.log_end_offset == 0 and log.size_in_bytes == 0
    big_log = open_log(tmp_path / "u-0", small_config(segment_bytes=300, max_message_bytes=10_000))
    with pytest.raises(RecordBatchTooLargeError):
        big_log.append_as_leader(memoryview(make_batch(1, 400)), 0)


def test_roll_on_size_time_index_and_relative_offset(tmp_path: Path) -> None:
    clock = FakeClock()
    log = open_log(tmp_path / "t-0", small_config(segment_bytes=1000, segment_ms=60_000), clock)
    sizes = 0
    while log.num_segments == 1:
        sizes += len(make_batch(1, 100))
        log.append_as_leader(memoryview(make_batch(1, 100, ts=clock.now)), 0)
    assert log.segments[0].size <= 1000 and sizes > 1000
    # segment.ms is measured from the first batch's timestamp (Kafka's rollingBasedTimestamp).
    n = log.num_segments
    clock.advance(60_001)
    log.append_as_leader(memoryview(make_batch(1, 10, ts=clock.now)), 0)
    assert log.num_segments == n + 1
    # A full offset index rolls too.
    log2 = open_log(tmp_path / "u-0", small_config(segment_index_bytes=24, index_interval_bytes=1, segment_bytes=10**6))
    for i in range(12):
        log2.append_as_leader(memoryview(make_batch(1, 10, tag=i)), 0)
    assert log2.num_segments > 1
    assert all(s.offset_index.entries <= 3 for s in log2.segments)
    # Offsets that no longer fit a 4-byte relative offset force a roll.
    log3 = open_log(tmp_path / "v-0")
    log3.append_as_leader(memoryview(make_batch(1)), 0)
    log3.append_as_follower(memoryview(_with_offset(make_batch(1), 2**31 + 5)))
    assert [s.base_offset for s in log3.segments] == [0, 2**31 + 5]


def _with_offset(raw: bytearray, base: int) -> bytearray:
    RecordBatch(memoryview(raw)).set_base_offset(base)
    return raw


def test_leader_epoch_cache(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(memoryview(make_batch(2)), 1)
    log.append_as_leader(memoryview(make_batch(2)), 1)
    log.append_as_leader(memoryview(make_batch(3)), 3)
    assert log.leader_epoch_cache.entries() == [(1, 0), (3, 4)]
    assert (tmp_path / "t-0" / "leader-epoch-checkpoint").read_text() == "0\n2\n1 0\n3 4\n"
    assert log.end_offset_for_epoch(3) == (3, 7)
    assert log.end_offset_for_epoch(1) == (1, 4)
    assert log.end_offset_for_epoch(2) == (1, 4)
    assert log.end_offset_for_epoch(0) == (0, 0)
    assert log.end_offset_for_epoch(5) == (-1, -1)
    assert log.end_offset_for_epoch(-1) == (-1, -1)
    log.truncate_to(4)
    assert log.leader_epoch_cache.entries() == [(1, 0)]


def test_delete_records_and_truncate(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", small_config(segment_bytes=1500))
    for i in range(30):
        log.append_as_leader(memoryview(make_batch(2, 60, tag=i)), 0)
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records_before(10)  # above the high watermark
    log.update_high_watermark(60)
    segments_before = log.num_segments
    assert log.delete_records_before(31) == 31
    assert log.log_start_offset == 31 and log.num_segments < segments_before
    with pytest.raises(OffsetOutOfRangeError):
        log.read(30, 100)
    assert read_all(log)[0][0] == 31  # batch 30..31 is returned whole, consumers skip offset 30
    assert log.fetch_offset_by_timestamp(-2)[0] == 31  # type: ignore[index]
    log.truncate_to(45)  # mid-batch (44..45): the whole batch goes, the end offset becomes 45
    assert log.log_end_offset == 45 and log.high_watermark == 45
    assert [r[0] for r in read_all(log)][-1] == 43
    info = log.append_as_leader(memoryview(make_batch(1)), 0)
    assert info.first_offset == 45
    log.truncate_to(10)  # below the log start offset: start over empty at 10
    assert (log.log_start_offset, log.log_end_offset, log.num_segments) == (10, 10, 1)
    assert not list((tmp_path / "t-0").glob("*.deleted"))


def test_retention_by_time_and_size(tmp_path: Path) -> None:
    clock = FakeClock()
    log = open_log(tmp_path / "t-0", small_config(segment_bytes=1200, retention_ms=10_000), clock)
    for i in range(20):
        log.append_as_leader(memoryview(make_batch(1, 200, ts=clock.now, tag=i)), 0)
        clock.advance(1000)
    log.update_high_watermark(log.log_end_offset)
    n = log.num_segments
    deleted = log.delete_old_segments(clock.now)
    assert 0 < deleted < n
    assert all(clock.now - s.largest_timestamp() <= 10_000 for s in log.segments[:-1])
    assert log.log_start_offset == log.segments[0].base_offset
    # Everything expired, including the active segment: Kafka rolls first, leaving an empty segment.
    clock.advance(100_000)
    log.delete_old_segments(clock.now)
    assert log.num_segments == 1 and log.active_segment.size == 0
    assert log.log_start_offset == log.log_end_offset == 20
    # Size retention keeps the newest segments under retention.bytes.
    log2 = open_log(tmp_path / "u-0", small_config(segment_bytes=1200, retention_bytes=2500), clock)
    for i in range(30):
        log2.append_as_leader(memoryview(make_batch(1, 200, ts=clock.now, tag=i)), 0)
    log2.update_high_watermark(log2.log_end_offset)
    log2.delete_old_segments(clock.now)
    assert log2.size_in_bytes - log2.segments[0].size <= 2500 < log2.size_in_bytes + 1
    assert [r[0] for r in read_all(log2)][-1] == 29


def test_retention_respects_high_watermark(tmp_path: Path) -> None:
    clock = FakeClock()
    log = open_log(tmp_path / "t-0", small_config(segment_bytes=1200, retention_ms=1), clock)
    for i in range(20):
        log.append_as_leader(memoryview(make_batch(1, 200, ts=clock.now, tag=i)), 0)
    clock.advance(10_000)
    assert log.delete_old_segments() == 0  # high watermark 0: nothing is deletable yet
    log.update_high_watermark(log.segments[2].base_offset)
    assert log.delete_old_segments() == 2


def test_deleted_segments_wait_for_file_delete_delay(tmp_path: Path) -> None:
    clock = FakeClock()
    log = open_log(tmp_path / "t-0", small_config(segment_bytes=1200, retention_ms=1, file_delete_delay_ms=60_000), clock)
    for i in range(10):
        log.append_as_leader(memoryview(make_batch(1, 200, ts=clock.now, tag=i)), 0)
    region = log.read(0, 1 << 20).region
    log.update_high_watermark(log.log_end_offset)
    clock.advance(100)
    assert log.delete_old_segments() > 0
    assert list((tmp_path / "t-0").glob("*.log.deleted"))
    assert region is not None and len(region.read_bytes()) == region.size  # in-flight region still readable
    log.delete_pending_files(clock.now + 60_000)
    assert not list((tmp_path / "t-0").glob("*.deleted"))
    assert region.read_bytes()  # unlinked, but the open file keeps the bytes (POSIX)
