"""Reading kbroker topics with Spark's own Kafka source, and decoding record values.

Owns `KafkaSource` (which topics, where to start and stop, and every other option of Spark's
`format("kafka")` source, validated before Spark sees them), `read()` (a batch or streaming
DataFrame with Spark's Kafka columns) and `decode()` (JSON with a declared schema, CSV, or raw
bytes, keeping the record's Kafka coordinates in `kafka_*` columns).

Option names and meanings are Spark's (Structured Streaming + Kafka Integration Guide); this
module only spells them in Python and rejects combinations Spark would reject late or ignore.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

# Kafka coordinates kept next to the decoded fields (the JSON may well have its own "timestamp").
KAFKA_COLUMNS = {
    "key": "kafka_key",
    "topic": "kafka_topic",
    "partition": "kafka_partition",
    "offset": "kafka_offset",
    "timestamp": "kafka_timestamp",
    "timestampType": "kafka_timestamp_type",
    "headers": "kafka_headers",
}
FORMATS = ("json", "csv", "avro", "raw")
# Confluent schema-registry framing: magic byte 0, then the 4-byte big-endian schema id, then Avro.
SCHEMA_ID_PREFIX_BYTES = 5
TIMESTAMP_STRATEGIES = ("error", "latest")


def to_epoch_ms(value: str | int) -> int:
    """Epoch milliseconds, or ISO-8601 (`2026-11-25T10:00:00Z`; no zone means UTC) -> epoch ms."""
    if isinstance(value, int):
        return value
    text = value.strip()
    if text.lstrip("-").isdigit():
        return int(text)
    parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return int(parsed.timestamp() * 1000)


def parse_assign(text: str) -> dict[str, list[int]]:
    """`topic:0,1;other:2` or Spark's JSON `{"topic":[0,1]}` -> {topic: [partitions]}."""
    text = text.strip()
    if text.startswith("{"):
        raw = json.loads(text)
        return {str(t): [int(p) for p in ps] for t, ps in raw.items()}
    out: dict[str, list[int]] = {}
    for item in filter(None, (s.strip() for s in text.split(";"))):
        topic, _, parts = item.rpartition(":")
        if not topic:
            raise ValueError(f"assign expects TOPIC:P[,P...] (or JSON), got {item!r}")
        out.setdefault(topic, []).extend(int(p) for p in parts.split(","))
    return out


@dataclass
class KafkaSource:
    """What to read and how: one of subscribe / subscribe_pattern / assign, plus Spark's options."""

    bootstrap: str
    subscribe: list[str] = field(default_factory=list)
    subscribe_pattern: str | None = None
    assign: dict[str, list[int]] | None = None
    # "earliest" | "latest" | Spark's JSON {"topic":{"0":23,"1":-2}} (-2 earliest, -1 latest).
    starting_offsets: str | None = None
    ending_offsets: str | None = None  # batch only
    # By timestamp (epoch ms): one for every partition, or Spark's JSON per partition.
    starting_timestamp: int | None = None
    ending_timestamp: int | None = None  # batch only
    starting_offsets_by_timestamp: str | None = None
    ending_offsets_by_timestamp: str | None = None  # batch only
    # What to do when no record has a timestamp >= the start: "error" (Spark's default) or "latest".
    starting_timestamp_strategy: str | None = None
    fail_on_data_loss: bool | None = None
    max_offsets_per_trigger: int | None = None  # streaming only
    min_partitions: int | None = None
    include_headers: bool = False
    # Anything else, passed through: `kafka.isolation.level`, `groupIdPrefix`, `kafkaConsumer.pollTimeoutMs`...
    options: dict[str, str] = field(default_factory=dict)

    def validate(self, streaming: bool) -> None:
        chosen = [bool(self.subscribe), self.subscribe_pattern is not None, self.assign is not None]
        if sum(chosen) != 1:
            raise ValueError("give exactly one of subscribe, subscribe_pattern, assign")
        if streaming:
            for name in ("ending_offsets", "ending_timestamp", "ending_offsets_by_timestamp"):
                if getattr(self, name) is not None:
                    raise ValueError(f"{name} only applies to batch reads (a stream has no end)")
        elif self.max_offsets_per_trigger is not None:
            raise ValueError("max_offsets_per_trigger only applies to streaming reads")
        starts = [self.starting_offsets, self.starting_timestamp, self.starting_offsets_by_timestamp]
        if sum(s is not None for s in starts) > 1:
            raise ValueError("give at most one of starting_offsets, starting_timestamp, starting_offsets_by_timestamp")
        ends = [self.ending_offsets, self.ending_timestamp, self.ending_offsets_by_timestamp]
        if sum(e is not None for e in ends) > 1:
            raise ValueError("give at most one of ending_offsets, ending_timestamp, ending_offsets_by_timestamp")
        if self.starting_timestamp_strategy not in (None, *TIMESTAMP_STRATEGIES):
            raise ValueError(f"starting_timestamp_strategy must be one of {TIMESTAMP_STRATEGIES}")

    def spark_options(self, streaming: bool) -> dict[str, str]:
        """The exact option map handed to `spark.read[Stream].format("kafka")`."""
        self.validate(streaming)
        opts: dict[str, str] = {"kafka.bootstrap.servers": self.bootstrap}
        if self.subscribe:
            opts["subscribe"] = ",".join(self.subscribe)
        elif self.subscribe_pattern is not None:
            opts["subscribePattern"] = self.subscribe_pattern
        else:
            opts["assign"] = json.dumps(self.assign, sort_keys=True)
        pairs: list[tuple[str, object]] = [
            ("startingOffsets", self.starting_offsets),
            ("endingOffsets", self.ending_offsets),
            ("startingTimestamp", self.starting_timestamp),
            ("endingTimestamp", self.ending_timestamp),
            ("startingOffsetsByTimestamp", self.starting_offsets_by_timestamp),
            ("endingOffsetsByTimestamp", self.ending_offsets_by_timestamp),
            ("startingOffsetsByTimestampStrategy", self.starting_timestamp_strategy),
            ("maxOffsetsPerTrigger", self.max_offsets_per_trigger),
            ("minPartitions", self.min_partitions),
        ]
        for name, value in pairs:
            if value is not None:
                opts[name] = str(value)
        if self.fail_on_data_loss is not None:
            opts["failOnDataLoss"] = str(self.fail_on_data_loss).lower()
        if self.include_headers:
            opts["includeHeaders"] = "true"
        opts.update(self.options)
        return opts

    def describe(self, streaming: bool) -> str:
        """One line for a person: what will be read, from where to where."""
        opts = self.spark_options(streaming)
        what = {k: v for k, v in opts.items() if k in ("subscribe", "subscribePattern", "assign")}
        span = {k: v for k, v in opts.items() if k.startswith(("starting", "ending"))}
        kind = "stream" if streaming else "batch"
        # Spark's defaults, said out loud: a new stream starts at the *latest* offsets.
        default = "(starting at latest: Spark's default for a new stream)" if streaming else "(earliest to latest)"
        return f"{kind} read from {self.bootstrap}: {what} {span or default}"


def read(spark: SparkSession, source: KafkaSource, *, streaming: bool) -> DataFrame:
    """Spark's Kafka DataFrame: key, value, topic, partition, offset, timestamp, timestampType[, headers]."""
    reader = spark.readStream if streaming else spark.read
    return reader.format("kafka").options(**source.spark_options(streaming)).load()


def decode(
    df: DataFrame,
    fmt: str = "raw",
    schema: str | None = None,
    options: dict[str, str] | None = None,
    *,
    strip_schema_id: bool = False,
) -> DataFrame:
    """Decode `value` into columns; the Kafka coordinates stay as `kafka_*` columns.

    - raw: value and key stay bytes (`value`, `kafka_key`); cast them in SQL as needed.
    - json: `from_json(value, schema)` with a DDL schema ("user STRING, ts TIMESTAMP"); a record
      that does not parse gives nulls (Spark's PERMISSIVE mode) unless options say `mode=FAILFAST`.
    - csv: `from_csv(value, schema)`, options as Spark's CSV options (`sep`, ...).
    - avro: `from_avro(value, schema)` (spark-avro) with `schema` the Avro schema's JSON text; the
      record's fields become columns. With `strip_schema_id` the 5-byte schema-registry prefix
      (magic byte 0 + 4-byte schema id) is removed first; a value without the magic byte decodes to
      nulls. The schema id is not looked up: the schema given is the one used (a reader schema that
      must match how the records were written; options as spark-avro's, e.g. `mode=FAILFAST`).
    Keys are decoded as UTF-8 strings for json, csv and avro.
    """
    from pyspark.sql import functions as F

    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}, got {fmt!r}")

    def meta(key_as_string: bool) -> list:
        cols = []
        for src, dst in KAFKA_COLUMNS.items():
            if src in df.columns:
                col = F.col(src).cast("string") if (src == "key" and key_as_string) else F.col(src)
                cols.append(col.alias(dst))
        return cols

    if fmt == "raw":
        return df.select(F.col("value"), *meta(False))
    if not schema:
        raise ValueError(f"format {fmt} needs a schema (json/csv: DDL, e.g. 'user STRING, ts TIMESTAMP'; "
                         "avro: the schema's JSON, --avro-schema-file)")
    if fmt == "avro":
        from pyspark.sql.avro.functions import from_avro

        payload = F.col("value")
        if strip_schema_id:
            framed = F.substring(payload, 1, 1) == F.lit(b"\x00")
            payload = F.when(framed, F.expr(f"substring(value, {SCHEMA_ID_PREFIX_BYTES + 1})"))
        decoded = df.select(from_avro(payload, schema, options or {}).alias("_decoded"), *meta(True))
    else:
        text = F.col("value").cast("string")
        parse = F.from_json if fmt == "json" else F.from_csv
        decoded = df.select(parse(text, schema, options or {}).alias("_decoded"), *meta(True))
    kept = [c for c in decoded.columns if c != "_decoded"]
    return decoded.select("_decoded.*", *kept)
