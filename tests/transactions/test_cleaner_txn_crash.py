"""Crash safety of compacting a transactional log: a read_committed reader's view survives a crash at
every step of the cleaner's swap, including the window where the old segments' ``.txnindex`` files are
already renamed ``.deleted`` and the new segment's is not yet written.

A child process fills a compacted log with interleaved transactions of several producers (some
committed, some aborted, their data and markers spread over many small segments) and plain records,
writes the read_committed view (latest committed value per key) it expects, then cleans and dies
(``os._exit``) at the n-th call of a named step of Kafka's swap protocol. The parent reopens the
directory as a broker does after a crash and reads the log the way Kafka's consumer does under
``isolation.level=read_committed`` (the fetch's aborted-transactions list from the ``.txnindex``,
Kafka's ``Fetcher``/``CompletedFetch`` filtering): the view must be the same, and no aborted record
may be visible.
"""

from __future__ import annotations

import heapq
import json
import subprocess
import sys
from pathlib import Path

import pytest

from kbroker.log.config import LogConfig
from kbroker.log.manager import LogManager
from kbroker.protocol.record_format import ControlRecordType
from kbroker.protocol.records import iter_batches

ROOT = Path(__file__).resolve().parents[2]

CHILD = r"""
import json, os, random, sys
from pathlib import Path
from kbroker.log.cleaner_manager import LogCleaner
from kbroker.log.config import LogConfig
from kbroker.log.manager import LogManager
from kbroker.protocol.records import SimpleRecord, build_batch

d, point, nth = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
cfg = LogConfig(cleanup_policy="compact", segment_bytes=1024, index_interval_bytes=256, segment_index_bytes=1024,
                file_delete_delay_ms=0, min_cleanable_dirty_ratio=0.0, delete_retention_ms=0)
lm = LogManager([d], cfg, node_id=1)
lm.startup()
log = lm.get_or_create_log("t", 0, cfg)
rng = random.Random(11)
committed = {}            # the read_committed view: key -> (offset, value), the latest offset wins
open_txns = {}            # producer id -> [(key, value)] written in its open transaction
seqs = {pid: 0 for pid in (101, 102, 103)}
aborted_values = []
for step in range(500):
    r = rng.random()
    k = "k%d" % rng.randrange(15)
    if r < 0.2:
        v = "plain-%d" % step
        info = log.append_as_leader(memoryview(build_batch([SimpleRecord(v.encode(), k.encode(), 1000)],
                                                            now_ms=1000)), 0)
        committed[k] = (info.first_offset, v)
        continue
    pid = rng.choice(sorted(seqs))
    if pid in open_txns and r > 0.8:
        commit = rng.random() < 0.5
        log.append_txn_marker(pid, 0, 1, commit=commit, leader_epoch=0)
        for kk, vv, oo in open_txns.pop(pid):
            if not commit:
                aborted_values.append(vv)
            elif oo > committed.get(kk, (-1, ""))[0]:
                committed[kk] = (oo, vv)
        continue
    v = "txn-%d-%d" % (pid, step)
    batch = build_batch([SimpleRecord(v.encode(), k.encode(), 1000)], producer_id=pid, producer_epoch=0,
                        base_sequence=seqs[pid], is_transactional=True, now_ms=1000)
    seqs[pid] += 1
    info = log.append_as_leader(memoryview(batch), 0)
    open_txns.setdefault(pid, []).append((k, v, info.first_offset))
for pid in sorted(open_txns):  # close what is open, so the whole log lies below the LSO
    log.append_txn_marker(pid, 0, 1, commit=False, leader_epoch=0)
    aborted_values.extend(v for _k, v, _o in open_txns[pid])
log.append_as_leader(memoryview(build_batch([SimpleRecord(b"end", b"end", 1000)], now_ms=1000)), 0)
committed["end"] = (0, "end")
log.roll()
log.update_high_watermark(log.log_end_offset)
(d / "model.json").write_text(json.dumps({"committed": {k: v for k, (_o, v) in committed.items()},
                                          "aborted": aborted_values}))
seen = {}
def hook(name):
    seen[name] = seen.get(name, 0) + 1
    if name == point and seen[name] == nth:
        os._exit(3)
cleaner = LogCleaner(lm, dedupe_buffer_size=1 << 20)
cleaner.hook = hook
cleaner.clean_once()
(d / "seen.json").write_text(json.dumps(seen))
os._exit(0)
"""


def read_committed(lm: LogManager) -> tuple[dict[str, str], list[str]]:
    """The log as a read_committed consumer sees it: the latest value per key, and every value seen."""
    log = lm.get_log("t", 0)
    assert log is not None
    # One fetch over the whole log: the broker's aborted-transactions list for the fetched range.
    pending = [(first, pid) for pid, first in log.collect_aborted_transactions(log.log_start_offset,
                                                                               log.log_end_offset)]
    heapq.heapify(pending)
    aborted_pids: set[int] = set()
    view: dict[str, str] = {}
    visible: list[str] = []
    off = log.log_start_offset
    while off < log.log_end_offset:
        info = log.read(off, 1 << 30, log.log_end_offset)
        if info.region is None:
            break
        for b in iter_batches(bytearray(info.region.read_bytes())):
            b.ensure_valid()
            off = max(off, b.next_offset)
            # Kafka's consumer: every aborted transaction starting at or before this batch's last
            # offset marks its producer aborted until that producer's ABORT marker.
            while pending and pending[0][0] <= b.last_offset:
                aborted_pids.add(heapq.heappop(pending)[1])
            if b.is_control:
                record = next(iter(b))
                assert record.key is not None
                if int.from_bytes(record.key[2:4], "big") == ControlRecordType.ABORT:
                    aborted_pids.discard(b.producer_id)
                continue
            if b.is_transactional and b.producer_id in aborted_pids:
                continue
            for r in b:
                assert r.key is not None and r.value is not None
                view[r.key.decode()] = r.value.decode()
                visible.append(r.value.decode())
    return view, visible


def _check_after_crash(d: Path) -> None:
    model = json.loads((d / "model.json").read_text())
    cfg = LogConfig(cleanup_policy="compact", segment_bytes=1024, index_interval_bytes=256, segment_index_bytes=1024)
    lm = LogManager([d], cfg, node_id=1)
    lm.startup()
    try:
        view, visible = read_committed(lm)
        assert view == model["committed"]
        leaked = set(visible) & set(model["aborted"])
        assert not leaked, f"aborted records visible to read_committed: {sorted(leaked)[:5]}"
    finally:
        lm.shutdown()


def _run_child(d: Path, point: str, nth: int) -> int:
    p = subprocess.run([sys.executable, "-c", CHILD, str(d), point, str(nth)], cwd=ROOT, timeout=120)
    return p.returncode


def test_model_holds_aborted_data_spread_over_segments(tmp_path: Path) -> None:
    """The workload is what the crash points need: several cleaned groups, aborted transactions whose
    data and markers are in different segments, and the read_committed view is right before any clean."""
    assert _run_child(tmp_path, "none", 1) == 0
    seen = json.loads((tmp_path / "seen.json").read_text())
    assert seen.get("swapped", 0) >= 3, seen  # several groups swapped one after another
    model = json.loads((tmp_path / "model.json").read_text())
    assert len(model["aborted"]) > 20
    _check_after_crash(tmp_path)


@pytest.mark.parametrize(("point", "nth"), [("cleaned", 1), ("swap-renamed", 1), ("swap-renamed", 2),
                                            ("old-renamed", 1), ("old-renamed", 2), ("old-renamed", 3),
                                            ("old-deleted", 1), ("old-deleted", 3), ("swapped", 2)])
def test_crash_at_each_swap_step_keeps_the_read_committed_view(tmp_path: Path, point: str, nth: int) -> None:
    assert _run_child(tmp_path, point, nth) == 3
    _check_after_crash(tmp_path)
