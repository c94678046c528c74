"""docs/spark.md, executed: every ```sh block runs, in page order, against a fresh kbroker (issue 18).

Same marker convention as tests/unit/test_docs_getting_started.py (tests/support/docs_blocks.py): a block preceded by
`<!-- docs-test: skip (reason) -->` is not run (the reason says why); every other ```sh block runs
with bash in a fresh directory (so `out/...` lands there), with `kbroker` on PATH running this checkout
and `KBROKER_BOOTSTRAP` naming the test broker (the address `kbroker spark submit`/`generate` use when
no --bootstrap is given, as a user's shell would after `export KBROKER_BOOTSTRAP=...`).

The blocks' results are then checked against the sample data computed here (the generator is
deterministic for a seed): the batch example's view counts, the stream's rows, the backfill's rows
and partitions. The default suite checks only the markers; running the page is `spark` + `slow`
(five JVM starts, several minutes on a shared 2-core machine).
"""

from __future__ import annotations

import os
import re
from collections import Counter
from pathlib import Path

import pytest

from kbroker.spark.generators import clickstream_events
from kbroker.spark.source import to_epoch_ms
from tests.support.broker import REPO_ROOT, KBroker
from tests.support.docs_blocks import Block, check_markers, checkout_env, run_block, sh_blocks, write_bin

PAGE = REPO_ROOT / "docs" / "spark.md"


def blocks() -> list[Block]:
    return sh_blocks(PAGE)


def progress_sample() -> list[str]:
    """The ```text block after the `progress-sample` marker."""
    lines = PAGE.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("<!-- docs-test: progress-sample"))
    assert lines[at + 1] == "```text"
    return lines[at + 2:lines.index("```", at + 2)]


def sample_pattern(line: str) -> re.Pattern[str]:
    """A sample line with its numbers (and the broker address) as wildcards."""
    text = re.escape(line.replace("127.0.0.1:9092", "\0ADDR\0"))
    text = text.replace(re.escape("\0ADDR\0"), r"[\w.\-]+:\d+")
    return re.compile("^" + re.sub(r"\d+(?:\\\.\d+)?", r"\\d+(?:\\.\\d+)?", text) + "$")


def test_progress_sample_patterns() -> None:
    sample = progress_sample()
    assert len(sample) >= 8
    assert sample_pattern(sample[2]).match(
        "[kbroker.spark] query clicks-parquet batch 0: 17 rows in, 3 rows/s, 21 records behind")
    assert not sample_pattern(sample[2]).match("[kbroker.spark] query clicks-parquet batch 0: 17 rows, 3 rows/s")


def test_page_markers_are_known_and_explained() -> None:
    found = blocks()
    assert len([b for b in found if b.marker == ""]) >= 6
    check_markers(found, ("skip",))


def _sample_events() -> list[dict[str, object]]:
    """What the page's first `generate` line produces (same arguments, the generator's default seed)."""
    return clickstream_events(events=6000, start_ms=to_epoch_ms("2026-11-25T09:30:00Z"), minutes=120, users=50,
                              pages=8, seed=7)


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.timeout(1800)  # nine blocks, six of them spark-submits
def test_shell_blocks_run_against_a_fresh_broker(spark_ready: None, tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet", reason="pyarrow reads the Parquet output independently of Spark")
    broker = KBroker(tmp_path / "broker", {"num.partitions": "3"})
    broker.start()
    work = tmp_path / "work"
    work.mkdir()
    env = checkout_env(PATH=f"{write_bin(tmp_path / 'bin')}{os.pathsep}{os.environ['PATH']}",
                       KBROKER_BOOTSTRAP=broker.bootstrap)
    outputs: list[str] = []
    try:
        for b in blocks():
            if b.marker:
                continue
            outputs.append(run_block(b.line, b.text, cwd=work, env=env, timeout=900,
                                     log=tmp_path / f"block-{b.line}.log", tail=3000))
    finally:
        broker.stop()
    text = "\n".join(outputs)
    events = _sample_events()
    start, stop = to_epoch_ms("2026-11-25T10:00:00Z"), to_epoch_ms("2026-11-25T11:00:00Z")
    # Batch: views per page in [10:00, 11:00).
    views = {r["page"]: r["views"] for r in pq.read_table(str(work / "out" / "views")).to_pylist()}
    expected_views = Counter(str(e["page"]) for e in events if start <= int(str(e["ts_ms"])) < stop)
    assert views == dict(expected_views) and sum(views.values()) > 1000
    in_range = sum(expected_views.values())
    assert f"[kbroker.spark] kbroker-pipeline: {in_range} records in range [2026-11-25T10:00:00Z, 2026-11-25T11:00:00Z) of clicks:" in text
    # Stream: every sample event once (the topic holds only them when the stream runs).
    streamed = pq.read_table(str(work / "out" / "clicks")).to_pylist()
    assert sorted(r["event_id"] for r in streamed) == sorted(int(str(e["event_id"])) for e in events)
    assert "[kbroker.spark] query clicks-parquet batch 2:" in text  # 6000 records, 2500 per trigger
    # The progress sample on the page is what the stream example really prints (numbers aside).
    printed = [line for out in outputs for line in out.splitlines()]
    for line in progress_sample():
        assert any(sample_pattern(line).match(p) for p in printed), f"sample line not in the output: {line}"
    # Avro: every generated record decoded and counted.
    actions = pq.read_table(str(work / "out" / "actions")).to_pylist()
    assert sum(r["n"] for r in actions) == 2000 and {r["action"] for r in actions} == {"view", "click", "purchase"}
    # Clickstream: windows were written.
    assert pq.read_table(str(work / "out" / "clicks-per-minute")).num_rows > 0
    # Backfill: [09:40, 11:10) of the sample, partitioned by hour.
    lo, hi = to_epoch_ms("2026-11-25T09:40:00Z"), to_epoch_ms("2026-11-25T11:10:00Z")
    history = work / "out" / "clicks-history"
    assert sorted(p.name for p in history.glob("dt=2026-11-25/hour=*")) == ["hour=10", "hour=11", "hour=9"]
    backfilled = [r["event_id"] for part in history.glob("dt=*/hour=*") for r in pq.read_table(str(part)).to_pylist()]
    assert sorted(backfilled) == sorted(int(str(e["event_id"])) for e in events if lo <= int(str(e["ts_ms"])) < hi)
