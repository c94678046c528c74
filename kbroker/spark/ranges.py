"""What a batch read will cover, said before Spark reads: offsets per partition and the record count.

A batch range that matches nothing (a backfill with dates before the data, a typo in the year) used
to write nothing and report success. `resolve_range()` asks the brokers, with the Kafka AdminClient
that Spark's connector ships (through the driver's JVM, so spark/ still talks to brokers only
through Kafka clients), the same ListOffsets questions Spark's Kafka source asks when it plans a
batch: per partition, the first offset at or after the starting timestamp (`OffsetSpec.forTimestamp`;
none -> the latest offset, as `startingOffsetsByTimestampStrategy=latest` and `endingTimestamp` do),
and the same for the end. `EmptyRangeError` carries the one line the user sees:

    0 records in range [2026-11-25T09:40:00Z, 2026-11-25T11:10:00Z) of clicks: clicks-0 at 120..120, ...

The count is `end - start` summed over partitions: exact for plain topics, an upper bound where
compaction or transaction markers leave gaps (it is 0 exactly when every partition's range is
empty). Ranges given as per-partition JSON are Spark's to interpret and are not resolved here.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from kbroker.spark.source import KafkaSource


class EmptyRangeError(RuntimeError):
    """The batch range holds no records; the message is the line shown to the user."""


@dataclass(frozen=True)
class PartitionRange:
    topic: str
    partition: int
    start: int
    end: int

    @property
    def records(self) -> int:
        return max(0, self.end - self.start)


def iso(ms: int) -> str:
    """Epoch ms -> `2026-11-25T09:40:00Z` (milliseconds shown only when there are some)."""
    moment = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S") + (f".{ms % 1000:03d}" if ms % 1000 else "") + "Z"


def _bound(timestamp: int | None, offsets: str | None, default: str) -> str | int | None:
    """A timestamp (epoch ms), "earliest"/"latest", or None when the bound is per-partition JSON."""
    if timestamp is not None:
        return timestamp
    spec = (offsets or default).strip()
    return spec if spec in ("earliest", "latest") else None


def describe_bound(bound: str | int) -> str:
    return iso(bound) if isinstance(bound, int) else bound


def resolvable(source: KafkaSource) -> tuple[str | int, str | int] | None:
    """(start, end) bounds this module can resolve for `source` read as a batch, else None."""
    if source.subscribe_pattern is not None or source.starting_offsets_by_timestamp or source.ending_offsets_by_timestamp:
        return None
    start = _bound(source.starting_timestamp, source.starting_offsets, "earliest")
    end = _bound(source.ending_timestamp, source.ending_offsets, "latest")
    if start is None or end is None:
        return None
    return start, end


def resolve_range(spark: SparkSession, source: KafkaSource, timeout_s: int = 30) -> list[PartitionRange] | None:
    """Per partition, the offsets a batch read of `source` covers (None if not resolvable here)."""
    bounds = resolvable(source)
    jvm = spark.sparkContext._jvm
    if bounds is None or jvm is None:
        return None
    kafka = jvm.org.apache.kafka
    seconds = jvm.java.util.concurrent.TimeUnit.SECONDS
    props = jvm.java.util.Properties()
    props.setProperty("bootstrap.servers", source.bootstrap)
    props.setProperty("client.id", "kbroker-spark-range")
    for key, value in source.options.items():
        if key.startswith("kafka.") and key != "kafka.bootstrap.servers":
            props.setProperty(key[len("kafka."):], value)
    admin = kafka.clients.admin.Admin.create(props)
    try:
        if source.assign is not None:
            wanted = [(t, p) for t, ps in source.assign.items() for p in ps]
        else:
            names = jvm.java.util.ArrayList()
            for topic in source.subscribe:
                names.add(topic)
            described = admin.describeTopics(names).allTopicNames().get(timeout_s, seconds)
            wanted = [(t, int(info.partition())) for t in source.subscribe for info in described.get(t).partitions()]
        tps = [kafka.common.TopicPartition(t, p) for t, p in wanted]
        spec_class = kafka.clients.admin.OffsetSpec

        def list_offsets(bound: str | int) -> list[int]:
            request = jvm.java.util.HashMap()
            for tp in tps:
                spec = (spec_class.forTimestamp(bound) if isinstance(bound, int)
                        else spec_class.earliest() if bound == "earliest" else spec_class.latest())
                request.put(tp, spec)
            answer = admin.listOffsets(request).all().get(timeout_s, seconds)
            return [int(answer.get(tp).offset()) for tp in tps]

        latest = list_offsets("latest")
        # No record at or after a timestamp: ListOffsets says -1, Spark reads up to / from the latest.
        starts = [latest[i] if o < 0 else o for i, o in enumerate(list_offsets(bounds[0]))]
        ends = [latest[i] if o < 0 else o for i, o in enumerate(list_offsets(bounds[1]))]
    finally:
        admin.close()
    return [PartitionRange(t, p, s, e) for (t, p), s, e in zip(wanted, starts, ends, strict=True)]


def range_line(source: KafkaSource, ranges: list[PartitionRange]) -> str:
    """`N records in range [from, to) of TOPICS: t-0 at a..b, ...`"""
    bounds = resolvable(source)
    assert bounds is not None
    total = sum(r.records for r in ranges)
    topics = ",".join(sorted({r.topic for r in ranges}))
    parts = ", ".join(f"{r.topic}-{r.partition} at {r.start}..{r.end}" for r in ranges)
    return (f"{total} records in range [{describe_bound(bounds[0])}, {describe_bound(bounds[1])}) "
            f"of {topics}: {parts}")
