"""Shared helpers for the storage-engine tests: batch builders, small configs, a fake clock."""

from __future__ import annotations

import struct
import time
from pathlib import Path

from kbroker.log.config import LogConfig
from kbroker.log.unified_log import UnifiedLog
from kbroker.protocol.compression import CompressionType
from kbroker.protocol.records import SimpleRecord, build_batch, iter_batches

NOW = 1_700_000_000_000


class FakeClock:
    def __init__(self, start: int = NOW) -> None:
        self.now = start

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


def small_config(**overrides: object) -> LogConfig:
    """Small segments and a dense index so a few KiB of data exercise every code path."""
    base: dict[str, object] = dict(segment_bytes=4096, index_interval_bytes=256, segment_index_bytes=1024,
                                   retention_ms=-1, message_timestamp_after_max_ms=9223372036854775807,
                                   file_delete_delay_ms=0)
    base.update(overrides)
    return LogConfig(**base)  # type: ignore[arg-type]


def make_batch(n: int = 1, size: int = 10, *, ts: int = NOW, tag: int = 0, pid: int = -1, epoch: int = -1,
               seq: int = -1, compression: CompressionType = CompressionType.NONE) -> bytearray:
    """A producer-style batch of ``n`` records whose values encode (tag, index) for later checks."""
    recs = []
    for i in range(n):
        head = struct.pack(">ii", tag, i)
        recs.append(SimpleRecord(head + bytes((tag + i) % 251 for _ in range(max(0, size - 8))), b"k%d" % i, ts + i))
    return build_batch(recs, compression=compression, producer_id=pid, producer_epoch=epoch,
                       base_sequence=seq)


def read_all(log: UnifiedLog, start: int | None = None, max_bytes: int = 1 << 30) -> list[tuple[int, int, bytes]]:
    """Every record (offset, timestamp, value) from ``start`` to the log end, following segments."""
    out: list[tuple[int, int, bytes]] = []
    off = log.log_start_offset if start is None else start
    while off < log.log_end_offset:
        info = log.read(off, max_bytes, log.log_end_offset)
        if info.region is None:
            break
        data = info.region.read_bytes()
        progressed = False
        for batch in iter_batches(data):
            for rec in batch:
                if rec.offset >= off:
                    out.append((rec.offset, rec.timestamp, rec.value or b""))
            off = max(off, batch.next_offset)
            progressed = True
        assert progressed
    return out


def open_log(path: Path, config: LogConfig | None = None, clock: FakeClock | None = None, **kw: object) -> UnifiedLog:
    return UnifiedLog(path, config or small_config(), time_ms=clock or FakeClock(), **kw)  # type: ignore[arg-type]


def wall_ms() -> int:
    return int(time.time() * 1000)
