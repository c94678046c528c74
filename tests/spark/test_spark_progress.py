"""Progress a person can read (issue 18): the per-batch and completion lines' exact format, and Spark's
start-up logging turned down from the JVM's first line (`--log-level`). No JVM here; the spark-marked
pipeline tests check the same lines in real jobs' output."""

from __future__ import annotations

import pytest

from kbroker.spark.progress import QueryTotals, completion_line, progress_lines


def test_batch_lines_name_the_query_and_show_rows_lag_and_offsets() -> None:
    lines = progress_lines("orders-parquet", 1, 25, 25, 30.4,
                           [('{"orders":{"0":5,"1":25,"2":8}}', '{"orders":{"0":5,"1":42,"2":16}}',
                             '{"orders":{"0":5,"1":50,"2":18}}')])
    assert lines == [
        "[kbroker.spark] query orders-parquet batch 1: 25 rows in, 25 out, 30 rows/s, 10 records behind",
        "    orders-1: 25 -> 42 (17 records)",
        "    orders-2: 8 -> 16 (8 records)",
    ]


def test_caught_up_unknown_output_and_watermark() -> None:
    lines = progress_lines("clicks-kafka", 0, 7, -1, 0.0, [(None, '{"c":{"0":7}}', '{"c":{"0":7}}')],
                           "2026-11-25T10:05:00.000Z")
    assert lines == ["[kbroker.spark] query clicks-kafka batch 0: 7 rows in, 0 rows/s, caught up, "
                     "watermark 2026-11-25T10:05:00.000Z", "    c-0: up to 7"]


def test_completion_line() -> None:
    totals = QueryTotals("clicks-parquet", started=100.0, batches=3, rows_in=6000, rows_out=6000)
    assert completion_line(totals, 112.34) == (
        "[kbroker.spark] query clicks-parquet finished: 3 batches, 6000 rows in, 6000 rows out in 12.3s")
    totals.rows_out_known = False
    assert completion_line(totals, 101.0, "boom") == (
        "[kbroker.spark] query clicks-parquet failed: boom: 3 batches, 6000 rows in in 1.0s")


def test_log_level_goes_to_the_driver_jvm_and_the_job(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from kbroker.spark import submit

    monkeypatch.setenv("KBROKER_SPARK_CACHE", str(tmp_path))
    monkeypatch.setattr(submit, "connector_jars", lambda: None)
    cmd, env = submit.build_command("pipeline", [], log_level="error")
    opt = next(c for c in cmd if c.startswith("spark.driver.extraJavaOptions="))
    config = tmp_path / "log4j2-error.properties"
    assert opt == f"spark.driver.extraJavaOptions=-Dlog4j2.configurationFile={config.as_uri()}"
    assert "rootLogger.level = ERROR" in config.read_text() and env["KBROKER_SPARK_LOG_LEVEL"] == "ERROR"
    # INFO is Spark's own full logging; a user's own driver options are left alone.
    cmd, env = submit.build_command("pipeline", [], log_level="INFO")
    assert not any(c.startswith("spark.driver.extraJavaOptions") for c in cmd) and env["KBROKER_SPARK_LOG_LEVEL"] == "INFO"
    cmd, _ = submit.build_command("pipeline", [], conf=["spark.driver.extraJavaOptions=-Dx=1"])
    assert [c for c in cmd if c.startswith("spark.driver.extraJavaOptions")] == ["spark.driver.extraJavaOptions=-Dx=1"]
