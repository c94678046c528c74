"""A really full disk (a small tmpfs): index preallocation and appends fail with KAFKA_STORAGE_ERROR and a
log line, never a SIGBUS; the log serves reads meanwhile and takes appends again once there is room.

The scenarios run in a child process: before the fix a store into an unallocated index page killed the
process with SIGBUS, which must fail this test rather than take pytest down with it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.tmpfs import small_tmpfs, tmpfs_unavailable_reason

pytestmark = pytest.mark.skipif(tmpfs_unavailable_reason() is not None, reason=str(tmpfs_unavailable_reason()))

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent.parent


def run_child(code: str, mnt: Path) -> tuple[dict[str, object], str]:
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": f"{REPO}:{TESTS}", "MNT": str(mnt), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, f"child died with {proc.returncode} (-7 is SIGBUS):\n{proc.stderr[-3000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


INDEX_ON_FULL_DISK = """
    import json, logging, os
    from pathlib import Path
    logging.basicConfig(level=logging.INFO)
    from kbroker.log.indexes import OffsetIndex, TimeIndex
    from tests.support.tmpfs import fill
    mnt = Path(os.environ["MNT"])
    idx = OffsetIndex(mnt / "00000000000000000000.index", 0)
    tidx = TimeIndex(mnt / "00000000000000000000.timeindex", 0)
    idx.make_active(1 << 20)   # sparse: no block is allocated yet
    tidx.make_active(1 << 20)
    filler = fill(mnt)
    stored = [idx.append(i * 10 + 10, i * 4096 + 4096) for i in range(600)]  # crosses pages
    tstored = tidx.maybe_append(5, 3)
    looked_up = idx.lookup(5000)
    entries = idx.entries
    os.unlink(filler)          # room again
    again = idx.append(100000, 9999999)
    print(json.dumps({"stored": sum(stored), "tstored": tstored, "entries": entries, "lookup": looked_up,
                      "again": again, "after": idx.lookup(100000)}))
"""


def test_index_on_a_full_disk_skips_entries_instead_of_sigbus(tmp_path: Path) -> None:
    with small_tmpfs(tmp_path / "mnt", 1 << 20) as mnt:
        out, err = run_child(INDEX_ON_FULL_DISK, mnt)
    assert out["stored"] == 0 and out["tstored"] is False and out["entries"] == 0
    assert out["lookup"] == [0, 0]  # no entry: a lookup starts at the segment's first batch
    assert out["again"] is True and out["after"] == [100000, 9999999]
    assert "Cannot allocate index space" in err and "No space left on device" in err
    assert "has disk space again" in err


LOG_ON_FULL_DISK = """
    import json, logging, os
    from pathlib import Path
    logging.basicConfig(level=logging.INFO)
    from kbroker.log import KafkaStorageError
    from log_test_helpers import make_batch, open_log, read_all, small_config
    from tests.support.tmpfs import fill
    mnt = Path(os.environ["MNT"])
    log = open_log(mnt / "__consumer_offsets-0", small_config(segment_bytes=1 << 20, index_interval_bytes=1,
                                                              segment_index_bytes=1 << 20))
    log.append_as_leader(memoryview(make_batch(2, 100)), 0)
    filler = fill(mnt)
    codes = []
    for i in range(20):
        try:
            log.append_as_leader(memoryview(make_batch(5, 2000, tag=i)), 0)
        except KafkaStorageError as e:
            codes.append(e.error_code)
    readable = len(read_all(log))
    os.unlink(filler)
    log.append_as_leader(memoryview(make_batch(3, 100, tag=99)), 0)
    log.close()
    log2 = open_log(mnt / "__consumer_offsets-0", small_config(segment_bytes=1 << 20, index_interval_bytes=1,
                                                               segment_index_bytes=1 << 20))
    print(json.dumps({"codes": codes, "readable": readable, "end": log.log_end_offset, "offline": log.offline,
                      "reopened": len(read_all(log2))}))
"""


def test_appends_on_a_full_disk_answer_kafka_storage_error_and_log_it_once(tmp_path: Path) -> None:
    with small_tmpfs(tmp_path / "mnt", 1 << 20) as mnt:
        out, err = run_child(LOG_ON_FULL_DISK, mnt)
    assert out["codes"] and set(out["codes"]) == {56}  # KAFKA_STORAGE_ERROR
    assert out["readable"] == 2 and not out["offline"]
    assert out["end"] == 2 + 5 * (20 - len(out["codes"])) + 3  # nothing half-written, nothing lost
    assert out["reopened"] == out["end"]
    assert err.count("Error while appending records to __consumer_offsets-0") == 1
    assert "succeed again" in err
