"""Micro-benchmarks for kbroker.protocol.records and compression.

Measures CRC32C validation of 16 KiB and 1 MiB batches, header parse and in-place patching (what
the produce path does per batch), and decompress/recompress throughput per codec.

Run: ``.venv/bin/python -m benchmarks.bench_records [--quick]``.
"""

from __future__ import annotations

import argparse
import os
import random
import time
from collections.abc import Callable
from functools import partial

from kbroker.protocol.compression import CompressionType, compress, decompress
from kbroker.protocol.records import (
    RecordBatch,
    SimpleRecord,
    TimestampType,
    build_batch,
    recompress_batch,
)


def _timeit(fn: Callable[[], object], min_time: float) -> float:
    """Seconds per call: repeat in growing rounds until a round lasts ``min_time``; best of 3."""
    n = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        dt = time.perf_counter() - t0
        if dt >= min_time:
            break
        n *= 4 if dt < min_time / 10 else 2
    best = dt / n
    for _ in range(2):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t0) / n)
    return best


def _payload_records(total: int, value_size: int = 1000) -> list[SimpleRecord]:
    """Semi-compressible values (JSON-ish text with random digits), like typical event payloads."""
    rng = random.Random(42)
    words = [b"user", b"event", b"click", b"view", b"session", b"page", b"id", b"ts", b"country"]
    out = []
    size = 0
    i = 0
    while size < total:
        parts: list[bytes] = []
        while sum(map(len, parts)) < value_size:
            parts.append(b'"%s":%d,' % (rng.choice(words), rng.randrange(10**9)))
        value = b"{" + b"".join(parts)[: value_size - 2] + b"}"
        out.append(SimpleRecord(value, b"key-%d" % i, 1_700_000_000_000 + i))
        size += len(value) + 30
        i += 1
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="shorter timing rounds")
    args = ap.parse_args()
    min_time = 0.05 if args.quick else 0.3

    print("== CRC32C validation (RecordBatch.ensure_valid)")
    for label, size in (("16 KiB", 16 * 1024), ("1 MiB", 1024 * 1024)):
        buf = build_batch([SimpleRecord(os.urandom(size - 100))])
        b = RecordBatch(memoryview(buf))
        t = _timeit(b.ensure_valid, min_time)
        print(f"  {label:7s} batch: {t * 1e6:9.2f} us   {len(buf) / t / 1e9:6.2f} GB/s")

    print("== header parse + in-place patch (per batch)")
    buf = build_batch(_payload_records(16 * 1024))
    mv = memoryview(buf)

    def parse_header() -> None:
        b = RecordBatch(mv)
        b.header()

    def read_fields() -> None:
        b = RecordBatch(mv)
        _ = (
            b.base_offset,
            b.last_offset_delta,
            b.records_count,
            b.producer_id,
            b.base_sequence,
            b.max_timestamp,
        )

    def patch() -> None:
        b = RecordBatch(mv)
        b.set_base_offset(123456)
        b.set_partition_leader_epoch(7)

    for name, fn in (
        ("RecordBatch(mv).header() (13 fields)", parse_header),
        ("6 property reads", read_fields),
        ("set_base_offset + set_partition_leader_epoch", patch),
    ):
        print(f"  {name:46s} {_timeit(fn, min_time) * 1e9:8.0f} ns")
    b = RecordBatch(mv)
    n = b.records_count
    t = _timeit(b.summarize_records, min_time)
    label = f"summarize_records ({n} records, 16 KiB, none)"
    print(f"  {label:46s} {t * 1e9:8.0f} ns ({t / n * 1e9:.0f} ns/record)")
    t = _timeit(lambda: b.set_max_timestamp(TimestampType.LOG_APPEND_TIME, int(time.time() * 1000)), min_time)
    print(f"  {'set_max_timestamp (LogAppendTime, CRC 16 KiB)':46s} {t * 1e9:8.0f} ns")

    print("== produce-path validation (log.validator: header checks + CRC + the record walk)")
    _bench_validation(min_time)

    print("== codecs on a 1 MiB records section (semi-compressible JSON-ish values)")
    records = _payload_records(1024 * 1024)
    raw = bytes(RecordBatch(memoryview(build_batch(records))).records_bytes())
    print(
        f"  {'codec':7s} {'ratio':>6s} {'compress MB/s':>14s} {'decompress MB/s':>16s} {'recompress->none MB/s':>22s}"
    )
    for codec in CompressionType:
        if codec == CompressionType.NONE:
            continue
        packed = compress(codec, raw)
        tc = _timeit(partial(compress, codec, raw), min_time)
        td = _timeit(partial(decompress, codec, packed), min_time)
        batch = RecordBatch(memoryview(build_batch(records, compression=codec)))
        tr = _timeit(partial(recompress_batch, batch, CompressionType.NONE), min_time)
        mb = len(raw) / 1e6
        print(
            f"  {codec.kafka_name:7s} {len(raw) / len(packed):6.2f} {mb / tc:14.0f} {mb / td:16.0f} {mb / tr:22.0f}"
        )
    batch = RecordBatch(memoryview(build_batch(records, compression=CompressionType.GZIP)))
    for target in (CompressionType.LZ4, CompressionType.ZSTD, CompressionType.SNAPPY):
        t = _timeit(partial(recompress_batch, batch, target), min_time)
        print(
            f"  recompress gzip -> {target.kafka_name:6s}: {len(raw) / 1e6 / t:7.0f} MB/s (uncompressed bytes)"
        )
    b = RecordBatch(memoryview(build_batch(records, compression=CompressionType.LZ4)))
    t = _timeit(lambda: sum(1 for _ in b), min_time)
    print(
        f"  iterate {len(records)} records of an lz4 batch: {t * 1e3:.2f} ms ({t / len(records) * 1e9:.0f} ns/record)"
    )


def _bench_validation(min_time: float) -> None:
    """What check_batches costs per batch and per record, and how much of it is the record walk
    (Kafka's per-record iteration) against the header/CRC checks alone."""
    from kbroker.log.validator import ValidationParams, check_batches
    from kbroker.protocol.record_format import RECORDS_OFFSET, walk_records

    params = ValidationParams(-1, False, False, 1 << 30, 0, 1 << 62, 1_700_000_000_000, True, "t-0")
    shapes = (("16 KiB, 1 KB values", 16 * 1024, 1000), ("16 KiB, 100 B values", 16 * 1024, 100),
              ("1 MiB, 100 B values", 1024 * 1024, 100), ("16 KiB, 10 B values", 16 * 1024, 10))
    for label, total, value_size in shapes:
        records = _payload_records(total, value_size)
        for codec in (CompressionType.NONE, CompressionType.LZ4, CompressionType.ZSTD):
            buf = bytearray(build_batch(records, compression=codec))
            mv = memoryview(buf)
            n = len(records)
            t = _timeit(partial(check_batches, mv, params), min_time)
            line = f"  {label:22s} {codec.kafka_name:5s} {n:6d} records: check_batches {t * 1e6:9.1f} us"
            if codec == CompressionType.NONE:
                tw = _timeit(partial(walk_records, mv, RECORDS_OFFSET, 0, n), min_time)
                line += f"  (walk alone {tw * 1e6:8.1f} us = {tw / n * 1e9:4.0f} ns/record)"
            print(line)


if __name__ == "__main__":
    main()
