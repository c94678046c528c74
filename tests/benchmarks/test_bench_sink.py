"""`kbench sink`, the trivial endpoint the generators' ceilings are measured against (issue 17).

The same kbench loads the benchmark rows use must run against it to the end: produce (acks=1 and
acks=all, so the sink answers franz-go's idempotent producer) and the 4-client consume of P3 (both of
its generators: kbench fetch, the default, and kbench consume)."""

from __future__ import annotations

from benchmarks import cluster_rows


def test_kbench_produces_to_the_sink_with_the_rows_load_shapes() -> None:
    for load in (cluster_rows.P2_LOAD, cluster_rows.P6_LOAD):
        r = cluster_rows.sink_ceiling(load, 20_000)
        assert r["records"] == 20_000
        assert r["records_per_s"] > 0 and r["p99_latency_ms"] >= r["p50_latency_ms"] > 0


def test_kbench_consumes_from_the_sink() -> None:
    """The franz-go consumers (`--p3-generator consume`) decode the sink's Fetch v12 answer: whole
    batches, their base offsets patched, CRCs intact. kbench fetch's: tests/benchmarks/test_bench_fetch.py."""
    r = cluster_rows.sink_consume_ceiling(8_192, mode="consume")
    assert r["records"] >= 8_192
    assert r["bytes"] >= 8_192 * 1024  # the sink's batches hold 1 KiB values
    assert r["fetch_responses"] >= 4
