"""Kafka's own DumpLogSegments (kafka-dump-log.sh) reads our segments, indexes and snapshots.

Needs java and the Kafka 4.3.1 jars resolved by scripts/java-deps.sh into .cache/java/lib; the test
skips (saying so) when they are absent.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from log_test_helpers import NOW, make_batch, open_log, small_config

from kbroker.protocol.compression import CompressionType

LIB = Path(__file__).resolve().parents[2] / ".cache" / "java" / "lib"

pytestmark = [
    pytest.mark.java,
    pytest.mark.skipif(shutil.which("java") is None, reason="java is not installed"),
    pytest.mark.skipif(not list(LIB.glob("kafka-tools-*.jar")),
                       reason="Kafka jars not resolved: run scripts/java-deps.sh"),
]


def dump(d: Path, files: list[str], *extra: str) -> str:
    proc = subprocess.run(["java", "-cp", f"{LIB}/*", "org.apache.kafka.tools.DumpLogSegments",
                           "--files", ",".join(str(d / f) for f in files), *extra],
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Exception" not in proc.stderr, proc.stderr[-3000:]
    return proc.stdout


def test_dump_log_segments_reads_our_files(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log = open_log(d, small_config(segment_bytes=3000, index_interval_bytes=300))
    seq, records = 0, 0
    for i in range(40):
        n = 1 + i % 3
        codec = [CompressionType.NONE, CompressionType.GZIP, CompressionType.SNAPPY, CompressionType.LZ4,
                 CompressionType.ZSTD][i % 5]
        if i % 2:
            raw = make_batch(n, 100, tag=i, pid=9, epoch=0, seq=seq, ts=NOW + i, compression=codec)
            seq += n
        else:
            raw = make_batch(n, 100, tag=i, ts=NOW + i, compression=codec)
        log.append_as_leader(memoryview(raw), 3)
        records += n
    log.close()
    files = sorted(p.name for p in d.iterdir() if p.suffix in (".log", ".index", ".timeindex", ".snapshot"))
    assert len([f for f in files if f.endswith(".log")]) > 2
    out = dump(d, files, "--index-sanity-check")
    for f in files:
        if f.endswith((".index", ".timeindex")):
            assert f"{f} passed sanity check." in out or f"{f} is empty." in out
    out = dump(d, [f for f in files if f.endswith(".log")], "--deep-iteration")
    batches = re.findall(r"baseOffset: (\d+) lastOffset: (\d+) count: (\d+).*?isvalid: (\w+)", out)
    assert batches and all(v == "true" for *_x, v in batches)
    assert [int(b[0]) for b in batches] == sorted(int(b[0]) for b in batches)
    assert sum(int(b[2]) for b in batches) == records == log.log_end_offset
    assert len(re.findall(r"\| offset: \d+", out)) == records
    verify = dump(d, [f for f in files if f.endswith((".index", ".timeindex"))], "--verify-index-only")
    assert "mismatch" not in verify.lower() and "does not match" not in verify.lower()
    snap = dump(d, [max(f for f in files if f.endswith(".snapshot"))])
    assert "producerId: 9 producerEpoch: 0" in snap and f"lastSequence: {seq - 1} " in snap
