"""Log compaction (kbroker.log.cleaner, kbroker.log.cleaner_manager): Kafka's LogCleaner semantics."""

from __future__ import annotations

from pathlib import Path

import pytest

from kbroker.log.checkpoints import read_offset_checkpoint
from kbroker.log.cleaner import OffsetMap
from kbroker.log.cleaner_manager import CLEANER_CHECKPOINT, cleanable_offsets
from kbroker.protocol.compression import CompressionType
from tests.log.cleaner_helpers import DAY, Env, batches, compact_config, kv_batch, latest_model, records
from tests.log.log_test_helpers import NOW


def test_offset_map_budget() -> None:
    m = OffsetMap(24 * 10)
    assert m.max_entries == 9
    for i in range(9):
        assert m.put(b"k%d" % i, i)
    assert not m.put(b"new", 100)
    assert m.put(b"k0", 50)  # an existing key never needs a new slot
    assert m.get(b"k0") == 50 and m.get(b"nope") == -1 and m.latest_offset == 50


def test_latest_per_key_kept_offsets_preserved_active_untouched(tmp_path: Path) -> None:
    env = Env(tmp_path, compact_config())
    for i in range(200):
        env.append([(b"key%d" % (i % 5), b"value-%d" % i)])
    log = env.log
    active_before = (log.active_segment.base_offset, log.active_segment.size)
    size_before = log.size_in_bytes
    assert log.num_segments > 3
    result = env.cleaner.clean_once()
    assert result is not None and result.end_offset == log.active_segment.base_offset
    assert (log.active_segment.base_offset, log.active_segment.size) == active_before
    got = records(log)
    offsets = [o for o, _, _ in got]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    active_base = log.active_segment.base_offset
    cleaned_part = [(o, k, v) for o, k, v in got if o < active_base]
    # Below the active segment: exactly one record per key, the latest one written below it.
    model = latest_model([a for a in env.appended if a[0] < active_base])
    assert {k: (o, v) for o, k, v in cleaned_part} == model
    assert len(cleaned_part) == len(model)
    # The active segment is byte-for-byte what was appended.
    assert [(o, k, v) for o, k, v in got if o >= active_base] == [a for a in env.appended if a[0] >= active_base]
    assert log.size_in_bytes < size_before
    assert read_offset_checkpoint(tmp_path / CLEANER_CHECKPOINT) == {("t", 0): result.end_offset}
    # Reads by offset inside removed ranges land on the next retained batch.
    info = log.read(1, 100000, log.log_end_offset)
    assert info.region is not None
    assert not list(tmp_path.glob("t-0/*.cleaned")) and not list(tmp_path.glob("t-0/*.swap"))


def test_dirty_ratio_threshold(tmp_path: Path) -> None:
    env = Env(tmp_path, compact_config(min_cleanable_dirty_ratio=0.5))
    for i in range(120):
        env.append([(b"k%d" % (i % 3), b"v%d" % i)])
    assert env.cleaner.clean_once() is not None
    # Everything below the first dirty offset is now clean; a few more appends stay under the ratio.
    first_dirty = env.cleaner.checkpoints(tmp_path)[("t", 0)]
    for i in range(3):
        env.append([(b"k%d" % i, b"again%d" % i)])
    ltc = env.cleaner.grab_filthiest()
    assert ltc is None or ltc.cleanable_ratio > 0.5
    d, u, _ = cleanable_offsets(env.log, first_dirty, env.clock.now)
    assert d == first_dirty and u == env.log.active_segment.base_offset


def test_no_cleaning_for_delete_policy(tmp_path: Path) -> None:
    env = Env(tmp_path, compact_config(cleanup_policy="delete"))
    for i in range(100):
        env.append([(b"k", b"v%d" % i)])
    assert env.cleaner.clean_once() is None
    assert len(records(env.log)) == 100


def test_tombstones_kept_until_delete_horizon(tmp_path: Path) -> None:
    env = Env(tmp_path, compact_config(delete_retention_ms=DAY, min_cleanable_dirty_ratio=0.01))
    for i in range(60):
        env.append([(b"k%d" % (i % 4), b"v%d" % i)])
    env.append([(b"k0", None)])  # delete k0
    for i in range(60):
        env.append([(b"other%d" % (i % 2), b"x%d" % i)])
    env.log.roll()
    assert env.cleaner.clean_once() is not None
    got = records(env.log)
    tomb = [(o, k, v) for o, k, v in got if k == b"k0"]
    assert len(tomb) == 1 and tomb[0][2] is None  # the tombstone is the latest: kept, horizon set
    tb = [b for b in batches(env.log) if any(r.key == b"k0" for r in b)][0]
    assert tb.has_delete_horizon and tb.delete_horizon_ms == env.clock.now + DAY
    # Its record timestamps are unchanged although the base timestamp now holds the horizon.
    orig_ts = NOW + 0  # appended at the fake clock's time
    assert [r.timestamp for r in tb] == [orig_ts]
    # Before the horizon a later clean keeps it; after it, the tombstone goes.
    env.append([(b"k1", b"late")])
    env.log.roll()
    env.clock.advance(DAY - 1)
    env.cleaner.clean_once()
    assert any(k == b"k0" for _, k, _ in records(env.log))
    env.clock.advance(2)
    env.append([(b"k2", b"later")])
    env.log.roll()
    env.cleaner.clean_once()
    assert not any(k == b"k0" for _, k, _ in records(env.log))


def test_min_compaction_lag(tmp_path: Path) -> None:
    env = Env(tmp_path, compact_config(min_compaction_lag_ms=60000))
    for i in range(100):
        env.append([(b"k%d" % (i % 2), b"v%d" % i)])
    env.log.roll()
    assert env.cleaner.clean_once() is None  # every segment is younger than the lag
    env.clock.advance(60001)
    assert env.cleaner.clean_once() is not None
    assert len(records(env.log)) == 2


def test_max_compaction_lag_forces_cleaning_below_ratio(tmp_path: Path) -> None:
    env = Env(tmp_path, compact_config(min_cleanable_dirty_ratio=0.99, max_compaction_lag_ms=1000))
    for i in range(100):
        env.append([(b"k%d" % (i % 2), b"v%d" % i)])
    assert env.cleaner.clean_once() is not None  # first round: all dirty, ratio 1.0
    for i in range(30):
        env.append([(b"k%d" % (i % 2), b"w%d" % i)])
    env.log.roll()
    assert env.cleaner.clean_once() is None  # ratio below 0.99
    env.clock.advance(1001)
    assert env.cleaner.clean_once() is not None  # KIP-354: overdue


@pytest.mark.parametrize("codec", [CompressionType.GZIP, CompressionType.SNAPPY, CompressionType.LZ4,
                                   CompressionType.ZSTD])
def test_compressed_batches_and_headers(tmp_path: Path, codec: CompressionType) -> None:
    env = Env(tmp_path, compact_config())
    hdrs = (("h1", b"x"), ("h2", None))
    for i in range(40):
        env.append([(b"a", b"a%d" % i), (b"b", b"b%d" % i), (b"c%d" % i, b"c")], compression=codec, headers=hdrs)
    env.log.roll()
    env.cleaner.clean_once()
    bs = batches(env.log)
    assert all(b.compression_type == codec for b in bs if b.records_count)
    got = {r.key: (r.offset, r.value, r.headers) for b in bs for r in b}
    model = latest_model(env.appended)
    assert {k: (o, v) for k, (o, v, _h) in got.items()} == model
    assert all(h == hdrs for _o, _v, h in got.values())
    # Rebuilt batches keep their base offset and last offset delta (Kafka's overrideLastOffset).
    for b in bs:
        assert (b.last_offset - b.base_offset) == 2


def test_idempotent_producer_state_survives(tmp_path: Path) -> None:
    env = Env(tmp_path, compact_config())
    seq = 0
    for i in range(60):
        env.append([(b"k", b"v%d" % i)], pid=7, epoch=0, seq=seq)
        seq += 1
    env.append([(b"other", b"x")])
    env.log.roll()
    env.cleaner.clean_once()
    # The producer's last batch (offset 59) keeps its records; its sequence state survives a restart.
    env.reopen()
    entry = env.log.producer_state.producers[7]
    assert entry.last_seq == 59
    # A retry of the last batch is still a duplicate.
    dup = env.log.append_as_leader(memoryview(kv_batch([(b"k", b"v59")], pid=7, epoch=0, seq=59)), 0)
    assert dup.duplicate
    nxt = env.log.append_as_leader(memoryview(kv_batch([(b"k", b"v60")], pid=7, epoch=0, seq=60)), 0)
    assert not nxt.duplicate


def test_empty_batch_kept_for_active_producer(tmp_path: Path) -> None:
    env = Env(tmp_path, compact_config())
    env.append([(b"p", b"from-producer")], pid=9, epoch=0, seq=0)
    for i in range(80):
        env.append([(b"p", b"v%d" % i)])  # later values of the same key, no producer id
    env.log.roll()
    env.cleaner.clean_once()
    bs = batches(env.log)
    empty = [b for b in bs if b.producer_id == 9]
    assert len(empty) == 1 and empty[0].records_count == 0 and empty[0].base_offset == 0
    assert empty[0].last_sequence == 0
    env.reopen()
    assert env.log.producer_state.producers[9].last_seq == 0


def test_keyless_records_dropped(tmp_path: Path) -> None:
    """Keyless records written before the topic became compacted are dropped by the cleaner."""
    env = Env(tmp_path, compact_config(cleanup_policy="delete"))
    for i in range(50):
        env.append([(None, b"nokey%d" % i), (b"k", b"v%d" % i)])
    env.log.update_config(compact_config())
    env.log.roll()
    env.cleaner.clean_once()
    assert [(k, v) for _o, k, v in records(env.log)] == [(b"k", b"v49")]


def test_small_dedupe_buffer_cleans_in_several_rounds(tmp_path: Path) -> None:
    # Room for 10 keys per round; ratio 0 so every dirty byte justifies another round.
    env = Env(tmp_path, compact_config(min_cleanable_dirty_ratio=0.0), dedupe=24 * 12)
    for rnd in range(3):
        for i in range(40):
            env.append([(b"k%02d" % i, b"r%d" % rnd)])
    env.log.roll()
    rounds = 0
    while env.cleaner.clean_once() is not None:
        rounds += 1
        assert rounds < 40
    assert rounds >= 12  # 120 dirty records, at most 10 keys mapped per round
    got = records(env.log)
    assert {k: (o, v) for o, k, v in got} == latest_model(env.appended)
    assert len(got) == 40


def test_restart_after_clean_reads_same(tmp_path: Path) -> None:
    env = Env(tmp_path, compact_config())
    for i in range(150):
        env.append([(b"k%d" % (i % 7), b"v%d" % i)])
    env.log.roll()
    env.cleaner.clean_once()
    before = records(env.log)
    env.reopen()
    assert records(env.log) == before
    assert env.cleaner.checkpoints(tmp_path)[("t", 0)] == env.log.active_segment.base_offset
