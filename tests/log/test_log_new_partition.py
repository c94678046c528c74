"""A new partition's log opens without the loader (issue 17: hosting 1,000 partitions spent a seventh
of its time listing, probing and truncating directories it had just created).

`recovery.new_log_segments` must leave the log exactly as `load_segments` leaves an empty directory:
the same files, offsets, recovery point and epochs; and the log must work the same afterwards
(append, roll, reopen through the loader).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kbroker.log import recovery
from kbroker.log.config import LogConfig
from kbroker.log.unified_log import UnifiedLog
from tests.log.log_test_helpers import make_batch


def _state(log: UnifiedLog) -> tuple[object, ...]:
    return (log.log_start_offset, log.log_end_offset, log.recovery_point, log.high_watermark,
            [s.base_offset for s in log.segments], log.leader_epoch_cache.entries(),
            sorted(os.listdir(log.dir)))


@pytest.mark.parametrize("start", [0, 42])
def test_a_new_directory_opens_as_an_empty_one_loads(tmp_path: Path, start: int,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = LogConfig(segment_bytes=2048, index_interval_bytes=256, segment_index_bytes=1024)
    loads: list[Path] = []
    real = recovery.load_segments

    def counted(d: Path, *args: object, **kwargs: object) -> recovery.LoadedLog:
        loads.append(d)
        return real(d, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(recovery, "load_segments", counted)
    new = UnifiedLog(tmp_path / "t-0", cfg, log_start_offset=start, recovery_point=start)
    assert loads == []  # the loader did not run for a directory that did not exist
    (tmp_path / "t-1").mkdir()
    loaded = UnifiedLog(tmp_path / "t-1", cfg, log_start_offset=start, recovery_point=start)
    assert loads == [tmp_path / "t-1"]
    assert _state(new) == _state(loaded)
    for log in (new, loaded):
        for _ in range(8):  # several segments of 2 KiB
            log.append_as_leader(memoryview(make_batch(2, 400)), leader_epoch=3)
    assert _state(new) == _state(loaded) and len(new.segments) > 1
    new.close()
    again = UnifiedLog(tmp_path / "t-0", cfg)
    assert again.log_end_offset == start + 16 and [s.base_offset for s in again.segments] == \
        [s.base_offset for s in loaded.segments]
    again.close()
    loaded.close()
