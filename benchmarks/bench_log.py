"""Storage-engine micro-benchmark: append throughput and read-path lookup latency.

Usage: .venv/bin/python benchmarks/bench_log.py [--seconds 3] [--dir /tmp] [--idempotent]

(--idempotent also recomputes each batch's CRC in the benchmark loop, as a producer would, so its
figures include that client-side cost.)

Appends go through UnifiedLog.append_as_leader exactly as the Produce handler calls it (validation
with CRC-32C check, in-place offset assignment, sparse index maintenance, page-cache write; no
fsync, Kafka's default). Reads time UnifiedLog.read at random offsets (segment bisect, mmapped
index binary search, header scan with os.pread) - they return file regions, so no record bytes move.
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from kbroker.log import LogConfig, UnifiedLog
from kbroker.protocol.records import RecordBatch, SimpleRecord, build_batch


def make_batch(batch_bytes: int, record_bytes: int, *, pid: int = -1, seq: int = -1) -> bytearray:
    n = max(1, batch_bytes // (record_bytes + 20))
    now = int(time.time() * 1000)
    recs = [SimpleRecord(random.randbytes(record_bytes), None, now) for _ in range(n)]
    return build_batch(recs, producer_id=pid, producer_epoch=0 if pid >= 0 else -1, base_sequence=seq)


def bench_append(root: Path, batch_bytes: int, seconds: float, idempotent: bool) -> tuple[float, float, UnifiedLog]:
    log = UnifiedLog(root / f"bench-{batch_bytes}-0", LogConfig(segment_bytes=256 * 1024 * 1024))
    record_bytes = min(1000, batch_bytes // 2)
    template = make_batch(batch_bytes, record_bytes)
    n_in_batch = int.from_bytes(template[57:61], "big")
    size = len(template)
    batches = 0
    seq = 0
    buf = bytearray(template)
    start = time.perf_counter()
    deadline = start + seconds
    while True:
        if idempotent:
            buf[43:51] = (77).to_bytes(8, "big")
            buf[51:53] = (0).to_bytes(2, "big")
            buf[53:57] = seq.to_bytes(4, "big")
            seq += n_in_batch
            b = RecordBatch(memoryview(buf))
            buf[17:21] = b.compute_crc().to_bytes(4, "big")
        log.append_as_leader(memoryview(buf), 0)
        batches += 1
        if batches % 16 == 0 and time.perf_counter() >= deadline:
            break
    elapsed = time.perf_counter() - start
    return batches * size / elapsed / 1e6, batches / elapsed, log


def bench_read(log: UnifiedLog, samples: int = 20000) -> tuple[float, float, float]:
    rng = random.Random(1)
    leo = log.log_end_offset
    lat = []
    for _ in range(samples):
        off = rng.randrange(log.log_start_offset, leo)
        t0 = time.perf_counter_ns()
        info = log.read(off, 1024 * 1024, leo)
        lat.append(time.perf_counter_ns() - t0)
        assert info.region is not None
    lat.sort()
    return statistics.median(lat) / 1000, lat[int(len(lat) * 0.99)] / 1000, statistics.mean(lat) / 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=3.0, help="append time per batch size")
    ap.add_argument("--dir", default=None, help="directory for the temporary logs (default: system temp)")
    ap.add_argument("--idempotent", action="store_true", help="also exercise idempotent producer state")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="kbroker-bench-", dir=args.dir))
    try:
        print(f"{'batch':>8} {'MB/s':>9} {'batches/s':>10} {'segments':>8} | read µs p50 / p99 / mean")
        for batch_bytes in (1024, 16 * 1024, 1024 * 1024):
            mbs, bps, log = bench_append(root, batch_bytes, args.seconds, args.idempotent)
            p50, p99, mean = bench_read(log, 5000 if batch_bytes >= 1 << 20 else 20000)
            print(f"{batch_bytes:>8} {mbs:>9.1f} {bps:>10.0f} {log.num_segments:>8} | {p50:.1f} / {p99:.1f} / {mean:.1f}")
            log.close()
            shutil.rmtree(log.dir, ignore_errors=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
