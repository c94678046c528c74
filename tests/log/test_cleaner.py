"""Log compaction (kbroker.log.cleaner, kbroker.log.cleaner_manager): Kafka's LogCleaner semantics."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kbroker.log.checkpoints import read_offset_checkpoint
from kbroker.log.cleaner import CLEANED_SUFFIX, CleanAborted, Cleaner, OffsetMap
from kbroker.log.cleaner_manager import CLEANER_CHECKPOINT, LogCleaner, cleanable_offsets
from kbroker.log.config import LogConfig
from kbroker.log.manager import LogManager
from kbroker.log.unified_log import UnifiedLog
from kbroker.protocol.compression import CompressionType
from kbroker.protocol.records import RecordBatch, SimpleRecord, build_batch, iter_batches
from tests.log.log_test_helpers import NOW, FakeClock, small_config, wall_ms

DAY = 86400000


def compact_config(**kw: object) -> LogConfig:
    base: dict[str, object] = dict(cleanup_policy="compact", segment_bytes=1024, min_cleanable_dirty_ratio=0.5)
    base.update(kw)
    return small_config(**base)


def kv_batch(pairs: list[tuple[bytes | None, bytes | None]], *, ts: int = NOW, pid: int = -1, epoch: int = -1,
             seq: int = -1, compression: CompressionType = CompressionType.NONE,
             headers: tuple[tuple[str, bytes | None], ...] = ()) -> bytearray:
    recs = [SimpleRecord(v, k, ts + i, headers) for i, (k, v) in enumerate(pairs)]
    return build_batch(recs, compression=compression, producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def records(log: UnifiedLog) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record, reading segment files through the log's read path."""
    out: list[tuple[int, bytes | None, bytes | None]] = []
    for b in batches(log):
        out.extend((r.offset, r.key, r.value) for r in b)
    return out


def batches(log: UnifiedLog) -> list[RecordBatch]:
    out: list[RecordBatch] = []
    off = log.log_start_offset
    while off < log.log_end_offset:
        info = log.read(off, 1 << 30, log.log_end_offset)
        if info.region is None:
            break
        data = bytearray(info.region.read_bytes())
        for b in iter_batches(data):
            b.ensure_valid()
            out.append(b)
            off = max(off, b.next_offset)
    return out


def latest_model(appended: list[tuple[int, bytes | None, bytes | None]]) -> dict[bytes, tuple[int, bytes | None]]:
    model: dict[bytes, tuple[int, bytes | None]] = {}
    for off, k, v in appended:
        if k is not None:
            model[k] = (off, v)
    return model


class Env:
    """A LogManager with one log and a cleaner on a fake clock."""

    def __init__(self, tmp: Path, config: LogConfig, *, dedupe: int = 1 << 20, start_ms: int = NOW) -> None:
        self.tmp = tmp
        self.clock = FakeClock(start_ms)
        self.config = config
        self.dedupe = dedupe
        self.open()

    def open(self) -> None:
        self.lm = LogManager([self.tmp], self.config, node_id=1, time_ms=self.clock)
        self.lm.startup()
        self.log = self.lm.get_or_create_log("t", 0, self.config)
        self.cleaner = LogCleaner(self.lm, dedupe_buffer_size=self.dedupe, time_ms=self.clock)
        self.appended: list[tuple[int, bytes | None, bytes | None]] = []

    def append(self, pairs: list[tuple[bytes | None, bytes | None]], **kw: object) -> None:
        info = self.log.append_as_leader(memoryview(kv_batch(pairs, ts=self.clock.now, **kw)), 0)  # type: ignore[arg-type]
        for i, (k, v) in enumerate(pairs):
            self.appended.append((info.first_offset + i, k, v))
        self.log.update_high_watermark(self.log.log_end_offset)

    def reopen(self) -> None:
        self.lm.shutdown()
        appended = self.appended
        self.open()
        self.appended = appended


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


def _fill(env: Env, n: int, keys: int, rng: random.Random) -> None:
    for _ in range(n):
        k = b"k%d" % rng.randrange(keys)
        v = None if rng.random() < 0.1 else b"v%d" % rng.randrange(1 << 30)
        env.append([(k, v)])


@pytest.mark.parametrize("crash_point", ["cleaned", "swapped"])
def test_crash_points_lose_nothing(tmp_path: Path, crash_point: str) -> None:
    """A crash after the .cleaned segment is written, or right after the swap, loses no latest value."""
    env = Env(tmp_path, compact_config())
    rng = random.Random(1)
    _fill(env, 300, 10, rng)
    env.log.roll()

    class Crash(Exception):
        pass

    def hook(point: str) -> None:
        if point == crash_point:
            raise Crash

    job = env.cleaner.next_job(lambda fn: fn())
    assert job is not None
    # Re-run the round with a crashing hook (the manager's job is replaced by a direct Cleaner call).
    env.cleaner.in_progress = None
    log = env.log
    cl = Cleaner(1 << 20, hook=hook)
    with pytest.raises(Crash):
        cl.clean(log, log.segments[:-1], 0, log.active_segment.base_offset, env.clock.now, {})
    # Simulate the process dying: no clean shutdown, files left as they are.
    for seg in log.segments:
        seg.file.close()
    lm = LogManager([tmp_path], env.config, node_id=1, time_ms=env.clock)
    lm.had_clean_shutdown = {}
    (tmp_path / ".kafka_cleanshutdown").unlink(missing_ok=True)
    lm.startup()
    log2 = lm.get_log("t", 0)
    assert log2 is not None
    got = records(log2)
    model = latest_model(env.appended)
    by_key: dict[bytes, tuple[int, bytes | None]] = {}
    for o, k, v in got:
        assert k is not None
        by_key[k] = (o, v)
    assert by_key == model
    assert not list((tmp_path / "t-0").glob("*.swap")) and not list((tmp_path / "t-0").glob("*" + CLEANED_SUFFIX))


def test_recovery_completes_swap_files(tmp_path: Path) -> None:
    """A .swap segment left by a crash replaces the segments it covers; .cleaned ones are discarded."""
    env = Env(tmp_path, compact_config())
    for i in range(200):
        env.append([(b"k%d" % (i % 3), b"v%d" % i)])
    env.log.roll()
    log = env.log
    replaced_bases = [s.base_offset for s in log.segments[:-1]]

    def stop_before_swap(fn: object) -> bool:
        return False  # the log thread refuses: we move the files by hand below

    cl = Cleaner(1 << 20, run_on_log_thread=stop_before_swap)  # type: ignore[arg-type]
    # Write the cleaned segment, keep it by renaming it to .swap ourselves (as replace_segments would).
    seg_dir = tmp_path / "t-0"
    kept: list[Path] = []

    def hook(point: str) -> None:
        if point == "cleaned":
            for p in seg_dir.glob("*.cleaned"):
                target = p.with_name(p.name.replace(".cleaned", ".swap"))
                os.link(p, target)
                kept.append(target)

    cl._hook = hook
    with pytest.raises(CleanAborted):  # the log thread refused the swap
        cl.clean(log, log.segments[:-1], 0, log.active_segment.base_offset, env.clock.now, {})
    assert kept
    for seg in log.segments:
        seg.file.close()
    lm = LogManager([tmp_path], env.config, node_id=1, time_ms=env.clock)
    (tmp_path / ".kafka_cleanshutdown").unlink(missing_ok=True)
    lm.startup()
    log2 = lm.get_log("t", 0)
    assert log2 is not None
    got = records(log2)
    assert {k: (o, v) for o, k, v in got} == latest_model(env.appended)
    # Only the first group was swapped before the "crash": its records (all superseded) are gone,
    # the later segments are intact, and the replaced segment's stale indexes went with it.
    assert got[0][0] >= replaced_bases[1]
    assert [o for o, _, _ in got] == list(range(got[0][0], 200))
    assert log2.segments[0].base_offset == replaced_bases[0] and log2.segments[0].size == 0
    assert log2.segments[0].offset_index.entries == 0
    assert not list(seg_dir.glob("*.swap"))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(st.tuples(st.integers(0, 6), st.one_of(st.none(), st.binary(min_size=1, max_size=40)),
                              st.integers(1, 3)), min_size=1, max_size=150),
       cleans=st.lists(st.integers(1, 150), max_size=4),
       codec=st.sampled_from([CompressionType.NONE, CompressionType.LZ4]))
def test_model_based_random(tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[int, bytes | None, int]],
                            cleans: list[int], codec: CompressionType) -> None:
    """Random appends and cleans against a dict model: the latest value of every key is always
    readable, offsets only ever increase, and only superseded records disappear."""
    env = Env(tmp_path_factory.mktemp("m"), compact_config(delete_retention_ms=DAY, min_cleanable_dirty_ratio=0.0))
    clean_at = set(cleans)
    for i, (k, v, n) in enumerate(ops):
        env.append([(b"k%d" % k, v)] * n, compression=codec)
        if i in clean_at:
            env.log.roll()
            env.cleaner.clean_once()
    env.log.roll()
    env.cleaner.clean_once()
    got = records(env.log)
    offsets = [o for o, _, _ in got]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    appended = {o: (k, v) for o, k, v in env.appended}
    assert all(appended[o] == (k, v) for o, k, v in got)  # nothing invented or altered
    model = latest_model(env.appended)
    latest = {k: (o, v) for o, k, v in got}
    for k, (o, v) in model.items():
        # Tombstones are younger than delete.retention.ms here, so every latest record survives.
        assert latest.get(k) == (o, v)
    assert len(got) == len(model)


def test_compacted_topic_refuses_keyless_records(tmp_path: Path) -> None:
    from kbroker.log.errors import InvalidRecordError

    env = Env(tmp_path, compact_config())
    with pytest.raises(InvalidRecordError) as ei:
        env.log.append_as_leader(memoryview(kv_batch([(b"k", b"v"), (None, b"no key")])), 0)
    assert ei.value.record_errors == [(1, "Compacted topic cannot accept message without key in topic partition t-0.")]  # type: ignore[attr-defined]
    assert env.log.log_end_offset == 0
    # A delete-policy topic takes them, as in Kafka.
    env2 = Env(tmp_path / "d", compact_config(cleanup_policy="delete"))
    env2.log.append_as_leader(memoryview(kv_batch([(None, b"no key")])), 0)
    assert env2.log.log_end_offset == 1


def test_kafka_dump_log_reads_cleaned_segments(tmp_path: Path) -> None:
    """Kafka's own DumpLogSegments deep-iterates the cleaned segments (CRCs, delete horizon, empty
    producer batch) and finds their indexes sane."""
    import re

    from tests.support.java import java_unavailable_reason, run_java_main

    why = java_unavailable_reason()
    if why is not None:
        pytest.skip(why)
    env = Env(tmp_path, compact_config(segment_bytes=2048))
    env.append([(b"p", b"from-producer")], pid=4, epoch=0, seq=0)
    for i in range(60):
        env.append([(b"k%d" % (i % 3), b"v%d" % i), (b"p", b"x%d" % i)], compression=CompressionType.LZ4)
    env.append([(b"k0", None)])
    env.log.roll()
    env.cleaner.clean_once()
    env.lm.shutdown()
    d = tmp_path / "t-0"
    logs = sorted(str(p) for p in d.glob("*.log"))
    proc = run_java_main("kafka-dump-log", ["--files", ",".join(logs), "--deep-iteration"], timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout
    found = re.findall(r"baseOffset: (\d+) lastOffset: (\d+) count: (\d+).*?isvalid: (\w+)", out)
    assert found and all(v == "true" for *_x, v in found)
    assert ("0", "0", "0") in [(b, lo, n) for b, lo, n, _v in found]  # the producer's emptied batch
    # The tombstone's batch carries the KIP-534 delete horizon; its record keeps its own timestamp.
    assert f"deleteHorizonMs: OptionalLong[{NOW + DAY}]" in out
    assert re.search(rf"\| offset: \d+ CreateTime: {NOW} keySize: 2 valueSize: -1", out)
    keys = re.findall(r"\| offset: (\d+) .*?keySize: \d+", out)
    assert len(keys) == len(records_after_restart(tmp_path, env.config))
    idx = sorted(str(p) for p in d.glob("*.index")) + sorted(str(p) for p in d.glob("*.timeindex"))
    proc = run_java_main("kafka-dump-log", ["--files", ",".join(idx), "--index-sanity-check"], timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "failed sanity check" not in proc.stdout.lower()


def records_after_restart(tmp: Path, config: LogConfig) -> list[tuple[int, bytes | None, bytes | None]]:
    lm = LogManager([tmp], config, node_id=1)
    lm.startup()
    log = lm.get_log("t", 0)
    assert log is not None
    out = records(log)
    lm.shutdown()
    return out


def test_clean_on_worker_thread_while_appending_and_reading(tmp_path: Path) -> None:
    """The broker's threading: the clean runs on a worker thread, the swap is handed back to the
    thread that owns the log (here the test thread, standing in for the event loop), which keeps
    appending and reading the whole time. Readers holding a region of a replaced segment still
    read the old bytes; every read sees ascending offsets and every key's latest value."""
    import queue
    import threading

    env = Env(tmp_path, compact_config(min_cleanable_dirty_ratio=0.0))
    rng = random.Random(3)
    _fill(env, 400, 8, rng)
    env.log.roll()
    handoff: queue.Queue[tuple[object, queue.Queue[object]]] = queue.Queue()

    def run_on_log_thread(fn: object) -> object:
        reply: queue.Queue[object] = queue.Queue()
        handoff.put((fn, reply))
        return reply.get(timeout=30)

    old_region = env.log.read(0, 1 << 20, env.log.log_end_offset).region
    assert old_region is not None
    old_bytes = old_region.read_bytes()
    job = env.cleaner.next_job(run_on_log_thread)
    assert job is not None
    results: list[object] = []
    worker = threading.Thread(target=lambda: results.append(job()))
    worker.start()
    swaps = 0
    while worker.is_alive() or not handoff.empty():
        try:
            fn, reply = handoff.get(timeout=0.01)
        except queue.Empty:
            pass
        else:
            reply.put(fn())  # type: ignore[operator]
            swaps += 1
        _fill(env, 2, 8, rng)  # appends keep going on the log thread
        got = records(env.log)
        offsets = [o for o, _, _ in got]
        assert offsets == sorted(offsets)
        assert {k: (o, v) for o, k, v in got} == latest_model(env.appended)
    worker.join()
    assert swaps >= 2 and results and results[0] is not None
    assert old_region.read_bytes() == old_bytes  # the replaced file is still readable through its region
    assert env.cleaner.in_progress is None


def test_compact_delete_applies_both(tmp_path: Path) -> None:
    # Wall-clock time: emptied cleaned segments have no timestamp, and retention then uses their mtime.
    env = Env(tmp_path, compact_config(cleanup_policy="compact,delete", retention_ms=60000), start_ms=wall_ms() - 120000)
    for i in range(100):
        env.append([(b"k%d" % (i % 4), b"v%d" % i)])
    env.log.roll()
    assert env.cleaner.clean_once() is not None
    assert len(records(env.log)) == 4
    env.clock.advance(120000 + 600000)  # past retention.ms for the timestamps and the files' mtimes
    env.append([(b"new", b"x")])
    env.log.update_high_watermark(env.log.log_end_offset)
    assert env.log.delete_old_segments(env.clock.now) > 0  # retention.ms removes the old segments too
    assert [k for _o, k, _v in records(env.log)] == [b"new"]
    # The checkpoint below the new log start offset is reset, as in Kafka.
    d, _u, force = cleanable_offsets(env.log, 0, env.clock.now)
    assert d == env.log.log_start_offset and force


def test_failed_clean_marks_partition_uncleanable_and_deletion_forgets_checkpoint(tmp_path: Path) -> None:
    env = Env(tmp_path, compact_config())
    for i in range(100):
        env.append([(b"k%d" % (i % 4), b"v%d" % i)])
    env.log.roll()

    def boom(point: str) -> None:
        if point == "cleaned":
            raise OSError("disk trouble")

    env.cleaner.hook = boom
    with pytest.raises(OSError):
        env.cleaner.clean_once()
    assert ("t", 0) in env.cleaner.uncleanable and env.cleaner.in_progress is None
    assert env.cleaner.clean_once() is None  # skipped from now on
    assert len(records(env.log)) == 100  # nothing was swapped in
    assert not list((tmp_path / "t-0").glob("*" + CLEANED_SUFFIX))
    env.cleaner.uncleanable.clear()
    env.cleaner.hook = None
    env.lm.cleaner = env.cleaner
    assert env.cleaner.clean_once() is not None
    assert read_offset_checkpoint(tmp_path / CLEANER_CHECKPOINT)
    env.lm.delete_log("t", 0)
    assert read_offset_checkpoint(tmp_path / CLEANER_CHECKPOINT) == {}


@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.ZSTD])
def test_record_keys_matches_full_decode(codec: CompressionType) -> None:
    from kbroker.log.cleaner import record_keys

    rng = random.Random(5)
    pairs: list[tuple[bytes | None, bytes | None]] = []
    for i in range(300):  # long keys and values exercise multi-byte varints
        key = None if i % 7 == 0 else bytes(rng.randrange(256) for _ in range(rng.choice((1, 70, 300))))
        value = None if i % 5 == 0 else b"x" * rng.choice((0, 10, 200))
        pairs.append((key, value))
    raw = kv_batch(pairs, compression=codec, headers=(("h", b"v" * 100),))
    b = RecordBatch(memoryview(raw))
    b.set_base_offset(1000)
    assert record_keys(b) == [(r.offset, r.key, r.value is not None) for r in b]
