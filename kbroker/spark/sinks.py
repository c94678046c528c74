"""Where pipeline results go: a kbroker topic (Spark's Kafka sink), Parquet files, or the console.

Owns `Sink` (parsed from `kafka:TOPIC`, `parquet:PATH` or `console`), shaping a result for the
Kafka sink (`kafka_frame`), and writing a batch DataFrame or starting a streaming query per sink.

The Kafka sink is Spark's own: a KafkaProducer with ByteArraySerializer, idempotent by default
(kafka-clients 3.x: enable.idempotence=true, acks=all), so it calls InitProducerId and Produce
acks=-1 on kbroker. It is at-least-once across query restarts (Spark's documented guarantee); the
Parquet file sink is exactly-once (its `_spark_metadata` log is committed with the checkpoint).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.streaming import StreamingQuery

SINK_KINDS = ("kafka", "parquet", "console")
# Columns Spark's Kafka sink understands; anything else must be folded into `value`.
KAFKA_SINK_COLUMNS = ("key", "value", "headers", "topic", "partition")


@dataclass
class Sink:
    kind: str
    target: str | None = None  # topic for kafka, directory for parquet
    bootstrap: str | None = None
    partition_by: list[str] = field(default_factory=list)
    key_column: str | None = None
    options: dict[str, str] = field(default_factory=dict)
    num_rows: int = 20

    @classmethod
    def parse(cls, text: str, **kwargs: object) -> Sink:
        kind, _, target = text.partition(":")
        if kind not in SINK_KINDS:
            raise ValueError(f"sink must be kafka:TOPIC, parquet:PATH or console, got {text!r}")
        if kind != "console" and not target:
            raise ValueError(f"sink {kind} needs a target: {kind}:{'TOPIC' if kind == 'kafka' else 'PATH'}")
        return cls(kind, target or None, **kwargs)  # type: ignore[arg-type]

    @property
    def name(self) -> str:
        return self.kind


def kafka_frame(df: DataFrame, key_column: str | None = None) -> DataFrame:
    """Shape `df` for Spark's Kafka sink.

    A result that already has a `value` column is written as is (with key/headers/topic/partition
    if present). Otherwise every column becomes one JSON object in `value`, and `key_column` (if
    given) becomes the record key, as a string.
    """
    from pyspark.sql import functions as F

    if "value" in df.columns:
        return df.select(*[c for c in df.columns if c in KAFKA_SINK_COLUMNS])
    cols = [F.to_json(F.struct(*[F.col(f"`{c}`") for c in df.columns])).alias("value")]
    if key_column:
        cols.insert(0, F.col(f"`{key_column}`").cast("string").alias("key"))
    return df.select(*cols)


def write_batch(df: DataFrame, sink: Sink, save_mode: str = "append") -> None:
    if sink.kind == "kafka":
        (kafka_frame(df, sink.key_column).write.format("kafka")
         .option("kafka.bootstrap.servers", sink.bootstrap).option("topic", sink.target)
         .options(**sink.options).save())
    elif sink.kind == "parquet":
        writer = df.write.mode(save_mode).options(**sink.options)
        if sink.partition_by:
            writer = writer.partitionBy(*sink.partition_by)
        writer.parquet(str(sink.target))
    else:
        df.show(sink.num_rows, truncate=False)


def start_stream(
    df: DataFrame,
    sink: Sink,
    *,
    checkpoint: str | None,
    trigger: dict[str, object],
    output_mode: str,
    query_name: str,
) -> StreamingQuery:
    if sink.kind != "console" and not checkpoint:
        raise ValueError(f"a streaming {sink.kind} sink needs a checkpoint directory (--checkpoint)")
    frame = kafka_frame(df, sink.key_column) if sink.kind == "kafka" else df
    writer = frame.writeStream.queryName(query_name).outputMode(output_mode)
    writer = writer.trigger(**trigger)  # type: ignore[call-overload]
    if checkpoint:
        writer = writer.option("checkpointLocation", checkpoint)
    if sink.kind == "kafka":
        writer = (writer.format("kafka").option("kafka.bootstrap.servers", sink.bootstrap)
                  .option("topic", sink.target))
    elif sink.kind == "parquet":
        writer = writer.format("parquet").option("path", sink.target)
        if sink.partition_by:
            writer = writer.partitionBy(*sink.partition_by)
    else:
        writer = writer.format("console").option("truncate", "false").option("numRows", sink.num_rows)
    return writer.options(**sink.options).start()
