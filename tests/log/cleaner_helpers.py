"""Shared helpers of the log cleaner tests: compacted configs, key/value batches, a log + cleaner env."""

from __future__ import annotations

from pathlib import Path

from kbroker.log.cleaner_manager import LogCleaner
from kbroker.log.config import LogConfig
from kbroker.log.manager import LogManager
from kbroker.log.unified_log import UnifiedLog
from kbroker.protocol.compression import CompressionType
from kbroker.protocol.records import RecordBatch, SimpleRecord, build_batch, iter_batches
from tests.log.log_test_helpers import NOW, FakeClock, small_config

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
