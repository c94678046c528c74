"""Model-based fuzz test: random appends, rolls, reads, truncations, DeleteRecords, retention,
clean restarts and crashes with torn tails, checked against an in-memory model after every step."""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest
from log_test_helpers import FakeClock, make_batch, read_all, small_config

from kbroker.log import OffsetOutOfRangeError
from kbroker.log.unified_log import UnifiedLog
from kbroker.protocol.records import iter_batches

SEEDS = int(os.environ.get("KBROKER_FUZZ_SEEDS", "4"))
STEPS = int(os.environ.get("KBROKER_FUZZ_STEPS", "160"))


class Model:
    def __init__(self) -> None:
        self.batches: list[tuple[int, int, list[bytes]]] = []  # (base, last, values)
        self.start = 0
        self.end = 0
        self.hw = 0

    def records(self) -> list[tuple[int, bytes]]:
        return [(b + i, v) for b, _l, vals in self.batches for i, v in enumerate(vals) if b + i >= self.start]


def crash(log: UnifiedLog) -> None:
    for seg in log.segments:
        seg.offset_index.close_handler()
        seg.time_index.close_handler()


def check(log: UnifiedLog, model: Model) -> None:
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (model.start, model.end, model.hw)
    got = [(o, v) for o, _t, v in read_all(log)]
    assert got == model.records()


def run(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    clock = FakeClock()
    cfg = small_config(segment_bytes=rng.choice([2500, 4000, 8000]), index_interval_bytes=rng.choice([64, 300, 1000]),
                       segment_index_bytes=rng.choice([64, 240, 4096]))
    d = tmp_path / f"fuzz-{seed}"
    log = UnifiedLog(d, cfg, time_ms=clock)
    model = Model()
    tag = 0
    for _step in range(STEPS):
        op = rng.choices(["append", "read", "roll", "hw", "truncate", "delete", "retention", "restart", "crash"],
                         [40, 25, 3, 8, 5, 5, 4, 3, 4])[0]
        if op == "append":
            n = rng.randint(1, 5)
            raw = make_batch(n, rng.randint(8, 400), ts=clock.now, tag=tag)
            values = [r.value for r in next(iter_batches(raw))]
            info = log.append_as_leader(memoryview(raw), 0)
            assert info.first_offset == model.end
            model.batches.append((model.end, model.end + n - 1, values))  # type: ignore[arg-type]
            model.end += n
            tag += 1
            clock.advance(rng.randint(0, 50))
        elif op == "read":
            off = rng.randint(model.start, model.end)
            max_bytes = rng.choice([1, 100, 1000, 100000])
            # The bound (high watermark / LSO) always sits on a batch boundary in a real broker.
            bound = rng.choice([b[0] for b in model.batches if b[0] >= off] + [model.end])
            fetched = log.read(off, max_bytes, bound)
            if off >= bound:
                assert fetched.region is None
            else:
                assert fetched.region is not None
                data = fetched.region.read_bytes()
                want = next(b for b in model.batches if b[1] >= off)
                first = next(iter_batches(data))
                assert (first.base_offset, first.last_offset) == want[:2]
                assert [r.value for r in first] == want[2]
                assert first.base_offset < bound
            with pytest.raises(OffsetOutOfRangeError):
                log.read(model.end + 1, 100)
            if model.start > 0:
                with pytest.raises(OffsetOutOfRangeError):
                    log.read(model.start - 1, 100)
        elif op == "roll":
            log.roll()
        elif op == "hw":
            model.hw = rng.randint(model.start, model.end)
            log.update_high_watermark(model.hw)
        elif op == "truncate":
            cuts = [b[0] for b in model.batches if b[0] >= max(model.start, model.hw)]
            if cuts:
                x = rng.choice(cuts)
                log.truncate_to(x)
                model.batches = [b for b in model.batches if b[1] < x]
                model.end = x
                model.hw = min(model.hw, x)
        elif op == "delete":
            x = rng.randint(model.start, model.hw)
            assert log.delete_records_before(x) == max(x, model.start)
            model.start = max(x, model.start)
        elif op == "retention":
            log.update_config(cfg.replace(retention_bytes=rng.randint(0, 8000)))
            log.delete_old_segments(clock.now)
            log.update_config(cfg)
            assert log.log_start_offset >= model.start
            model.start = log.log_start_offset
        elif op in ("restart", "crash"):
            if op == "restart":
                log.close()
            else:
                crash(log)
                seg = log.active_segment
                batches = list(seg.iter_headers(0))
                if batches and rng.random() < 0.7:
                    cut = rng.randrange(batches[-1][0], seg.size)  # tear the last batch
                    os.truncate(seg.log_path, cut)
                    lost = batches[-1][1]
                    model.batches = [b for b in model.batches if b[1] < lost.base_offset]
                    model.end = lost.base_offset
                    model.hw = min(model.hw, model.end)
                    if model.end < model.start:  # Kafka's LogLoader restarts empty at the log start offset
                        model.batches, model.end, model.hw = [], model.start, model.start
                    else:
                        model.hw = max(model.hw, model.start)
            log = UnifiedLog(d, cfg, time_ms=clock, log_start_offset=model.start, recovery_point=0,
                             high_watermark=model.hw, had_clean_shutdown=(op == "restart"))
        check(log, model)
    log.close()


@pytest.mark.parametrize("seed", range(SEEDS))
def test_model_based_fuzz(tmp_path: Path, seed: int) -> None:
    t0 = time.monotonic()
    run(tmp_path, seed)
    assert time.monotonic() - t0 < 120
