"""The log cleaner's safety: crash points and swap recovery, a model-based random test, Kafka's own
DumpLogSegments on cleaned segments, cleaning on a worker thread while appending and reading, failures."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kbroker.log.checkpoints import read_offset_checkpoint
from kbroker.log.cleaner import CLEANED_SUFFIX, CleanAborted, Cleaner
from kbroker.log.cleaner_manager import CLEANER_CHECKPOINT, cleanable_offsets
from kbroker.log.config import LogConfig
from kbroker.log.manager import LogManager
from kbroker.protocol.compression import CompressionType
from kbroker.protocol.records import RecordBatch
from tests.log.cleaner_helpers import DAY, Env, compact_config, kv_batch, latest_model, records
from tests.log.log_test_helpers import NOW, wall_ms


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
