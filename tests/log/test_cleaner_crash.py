"""Crash safety of log compaction: a process that dies at any point of a clean loses no latest value.

A child process fills a compacted log, then cleans it and dies (``os._exit``) at a named point of
Kafka's swap protocol, or is SIGKILLed at a random moment while cleaning. The parent then opens the
directory as a broker would after a crash (no clean-shutdown marker) and checks every key's latest
record against the model the child wrote before cleaning.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kbroker.log.config import LogConfig
from kbroker.log.manager import LogManager
from kbroker.protocol.records import iter_batches

ROOT = Path(__file__).resolve().parents[2]

CHILD = r"""
import json, os, random, sys, time
from pathlib import Path
from kbroker.log.cleaner_manager import LogCleaner
from kbroker.log.config import LogConfig
from kbroker.log.manager import LogManager
from kbroker.protocol.records import SimpleRecord, build_batch

d, point, nth, slow = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
cfg = LogConfig(cleanup_policy="compact", segment_bytes=2048, index_interval_bytes=256, segment_index_bytes=1024,
                file_delete_delay_ms=0, min_cleanable_dirty_ratio=0.0)
lm = LogManager([d], cfg, node_id=1)
lm.startup()
log = lm.get_or_create_log("t", 0, cfg)
rng = random.Random(7)
model = {}
for i in range(600):
    k = b"k%d" % rng.randrange(20)
    v = None if rng.random() < 0.05 else b"v%d-" % i + bytes(rng.randrange(40))
    info = log.append_as_leader(memoryview(build_batch([SimpleRecord(v, k)])), 0)
    model[k.decode()] = [info.first_offset, None if v is None else v.hex()]
log.roll()
log.update_high_watermark(log.log_end_offset)
(d / "model.json").write_text(json.dumps(model))
seen = {}
def hook(name):
    seen[name] = seen.get(name, 0) + 1
    if slow:
        time.sleep(slow)
    if name == point and seen[name] == nth:
        os._exit(3)
cleaner = LogCleaner(lm, dedupe_buffer_size=1 << 20)
cleaner.hook = hook
print("ready", flush=True)
cleaner.clean_once()
os._exit(0)
"""


def _records(lm: LogManager) -> dict[str, list[object]]:
    log = lm.get_log("t", 0)
    assert log is not None
    out: dict[str, list[object]] = {}
    off = log.log_start_offset
    last = -1
    while off < log.log_end_offset:
        info = log.read(off, 1 << 30, log.log_end_offset)
        if info.region is None:
            break
        for b in iter_batches(bytearray(info.region.read_bytes())):
            b.ensure_valid()
            for r in b:
                assert r.offset > last
                last = r.offset
                assert r.key is not None
                out[r.key.decode()] = [r.offset, None if r.value is None else r.value.hex()]
            off = max(off, b.next_offset)
    return out


def _check_after_crash(d: Path) -> None:
    model = json.loads((d / "model.json").read_text())
    assert not (d / ".kafka_cleanshutdown").exists()
    cfg = LogConfig(cleanup_policy="compact", segment_bytes=2048, index_interval_bytes=256, segment_index_bytes=1024)
    lm = LogManager([d], cfg, node_id=1)
    lm.startup()
    assert _records(lm) == model
    names = os.listdir(d / "t-0")
    assert not [n for n in names if n.endswith((".swap", ".cleaned"))]
    lm.shutdown()


def _run_child(d: Path, point: str, nth: int, slow: float = 0.0) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", CHILD, str(d), point, str(nth), str(slow)], cwd=ROOT,
                            stdout=subprocess.PIPE, text=True)


@pytest.mark.parametrize(("point", "nth"), [("cleaned", 1), ("cleaned", 3), ("swap-renamed", 1),
                                            ("swap-renamed", 2), ("old-deleted", 1), ("old-deleted", 4),
                                            ("swapped", 2), ("none", 1)])
def test_exit_at_each_swap_step(tmp_path: Path, point: str, nth: int) -> None:
    p = _run_child(tmp_path, point, nth)
    p.wait(timeout=120)
    assert p.returncode == (0 if point == "none" else 3)
    _check_after_crash(tmp_path)


def test_sigkill_during_cleaning(tmp_path: Path) -> None:
    """SIGKILL at several moments of a (slowed-down) clean: every latest value survives each time."""
    for i, delay in enumerate((0.05, 0.2, 0.45)):
        d = tmp_path / f"run{i}"
        d.mkdir()
        p = _run_child(d, "never", 1, slow=0.1)
        assert p.stdout is not None
        assert p.stdout.readline().strip() == "ready"
        time.sleep(delay)
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=30)
        _check_after_crash(d)
