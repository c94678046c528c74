"""Avro payloads (issue 18): the generator writes schema-registry-framed Avro with fastavro, the pipeline
decodes it with Spark's spark-avro (`from_avro`, from a schema file, stripping the 5-byte prefix), and
the Parquet it writes (read with pyarrow) equals an independent decoding of the same records: read
back with confluent-kafka, framing checked byte by byte, Avro decoded with fastavro."""

from __future__ import annotations

import io
import json
import struct
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from kbroker.spark import AVRO_PACKAGE
from kbroker.spark.generators import CLICKSTREAM_AVRO_SCHEMA, clickstream_events, produce_clickstream
from kbroker.spark.source import to_epoch_ms

SCHEMA_ID = 42


def test_avro_goes_on_the_classpath_when_the_job_decodes_avro(monkeypatch: pytest.MonkeyPatch) -> None:
    from kbroker.spark import submit

    assert submit.wants_avro(["--subscribe", "t", "--format", "avro"]) and submit.wants_avro(["--format=avro"])
    assert not submit.wants_avro(["--format", "json", "--sql", "SELECT 'avro'"])
    monkeypatch.setattr(submit, "connector_jars", lambda: None)  # Maven missing: --packages with both
    cmd, _ = submit.build_command("pipeline", [], avro=True)
    assert cmd[cmd.index("--packages") + 1].split(",")[1] == AVRO_PACKAGE


def _ms(value: Any) -> int:
    if isinstance(value, datetime):
        aware = value if value.tzinfo else value.replace(tzinfo=UTC)
        return int(aware.timestamp() * 1000)
    return int(value)


@pytest.mark.spark
def test_framed_avro_decoded_by_spark_equals_fastavro(spark_bootstrap: str, tmp_path: Path) -> None:
    fastavro = pytest.importorskip("fastavro", reason="the generator and the independent decoding use fastavro")
    pq = pytest.importorskip("pyarrow.parquet", reason="pyarrow reads the Parquet output independently of Spark")
    from tests.spark.spark_helpers import consume_all, create_topic, spark_submit

    bs = spark_bootstrap
    create_topic(bs, "clicks-avro", 3)
    events = clickstream_events(events=200, start_ms=to_epoch_ms("2026-11-25T10:00:00Z"), minutes=5, seed=21)
    produce_clickstream(bs, "clicks-avro", events, value_format="avro", schema_id=SCHEMA_ID)
    schema_file = tmp_path / "page-view.avsc"
    schema_file.write_text(json.dumps(CLICKSTREAM_AVRO_SCHEMA))
    out = tmp_path / "avro-out"
    spark_submit(bs, "pipeline", [
        "--subscribe", "clicks-avro", "--format", "avro", "--avro-schema-file", str(schema_file), "--strip-schema-id",
        "--sql", "SELECT event_id, user_id, page, action, ts, kafka_partition, kafka_offset FROM events",
        "--sink", f"parquet:{out}"], tmp_path / "avro.log")

    # Independently: the records as stored, framing checked, Avro decoded with fastavro.
    schema = fastavro.parse_schema(CLICKSTREAM_AVRO_SCHEMA)
    expected = {}
    for m in consume_all(bs, "clicks-avro", 3, len(events)):
        raw = m.value()
        assert raw[0] == 0 and struct.unpack(">i", raw[1:5])[0] == SCHEMA_ID
        rec = fastavro.schemaless_reader(io.BytesIO(raw[5:]), schema)
        expected[(m.partition(), m.offset())] = (rec["event_id"], rec["user_id"], rec["page"], rec["action"],
                                                 _ms(rec["ts"]))
    assert len(expected) == len(events)
    got = {(r["kafka_partition"], r["kafka_offset"]): (r["event_id"], r["user_id"], r["page"], r["action"], _ms(r["ts"]))
           for r in pq.read_table(str(out)).to_pylist()}
    assert got == expected
    assert sorted(v[0] for v in got.values()) == [e["event_id"] for e in events]
