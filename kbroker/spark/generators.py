"""Sample data for the worked pipelines, produced to the broker with confluent-kafka.

Owns the clickstream generator: JSON page-view events `{"event_id", "user_id", "page", "action",
"ts"}` keyed by page, with the record timestamp (CreateTime) equal to the event time, in event-time
order, from a seeded random generator (the same arguments give the same events). It returns what
it produced, with each record's partition and offset, so a test can compute expected results.

    kbroker spark generate clickstream --topic clicks --events 5000 --start 2026-11-25T10:00:00Z --minutes 10
    python -m kbroker.spark.generators clickstream --bootstrap 127.0.0.1:9092 --topic clicks

With `--value-format avro` the values are Avro (binary, schemaless: `CLICKSTREAM_AVRO_SCHEMA`, written
with fastavro), and with `--schema-id N` each is framed as a schema registry's serializers frame it:
magic byte 0, the schema id as a 4-byte big-endian int, then the Avro bytes. `--write-schema F` saves
the schema (.avsc) for `--format avro --avro-schema-file F`.

Does not import pyspark.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from kbroker.spark import BOOTSTRAP_ENV, DEFAULT_BOOTSTRAP

ACTIONS = ("view", "view", "view", "click", "click", "purchase")
VALUE_FORMATS = ("json", "avro")
CLICKSTREAM_AVRO_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "PageView",
    "namespace": "dev.kbroker.clickstream",
    "fields": [
        {"name": "event_id", "type": "long"},
        {"name": "user_id", "type": "string"},
        {"name": "page", "type": "string"},
        {"name": "action", "type": "string"},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    ],
}


def avro_value(event: dict[str, Any], schema_id: int | None = None) -> bytes:
    """One event as schemaless Avro, framed with the schema-registry prefix when `schema_id` is set."""
    import io
    import struct

    from fastavro import parse_schema, schemaless_writer

    buf = io.BytesIO()
    if schema_id is not None:
        buf.write(b"\x00" + struct.pack(">i", schema_id))
    record = {k: event[k] for k in ("event_id", "user_id", "page", "action")} | {"ts": event["ts_ms"]}
    schemaless_writer(buf, parse_schema(CLICKSTREAM_AVRO_SCHEMA), record)
    return buf.getvalue()


def iso_ms(epoch_ms: int) -> str:
    """Epoch ms -> `2026-11-25T10:00:00.123Z` (Spark's from_json parses it as a TIMESTAMP)."""
    return datetime.fromtimestamp(epoch_ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def clickstream_events(
    *, events: int, start_ms: int, minutes: float, users: int = 50, pages: int = 8, seed: int = 7,
    first_id: int = 0,
) -> list[dict[str, Any]]:
    """`events` page views spread over `minutes` from `start_ms`, sorted by event time."""
    rng = random.Random(seed)
    span = int(minutes * 60_000)
    times = sorted(start_ms + rng.randrange(max(1, span)) for _ in range(events))
    out = []
    for i, ts in enumerate(times):
        out.append({
            "event_id": first_id + i,
            "user_id": f"user-{rng.randrange(users):03d}",
            "page": f"/page/{rng.randrange(pages)}",
            "action": rng.choice(ACTIONS),
            "ts": iso_ms(ts),
            "ts_ms": ts,
        })
    return out


def ensure_topic(bootstrap: str, topic: str, partitions: int, configs: dict[str, str] | None = None) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    future = admin.create_topics([NewTopic(topic, partitions, 1, config=configs or {})])[topic]
    try:
        future.result(30)
    except KafkaException as e:
        if e.args[0].name() != "TOPIC_ALREADY_EXISTS":
            raise


def produce_clickstream(
    bootstrap: str, topic: str, events: list[dict[str, Any]], *, value_format: str = "json",
    schema_id: int | None = None,
) -> list[dict[str, Any]]:
    """Produce events (value: JSON without ts_ms, or Avro; key: page; timestamp: ts_ms); add partition/offset."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    failures: list[str] = []

    def delivered(event: dict[str, Any]) -> Any:
        def callback(err: Any, msg: Any) -> None:
            if err is not None:
                failures.append(str(err))
            else:
                event["partition"], event["offset"] = msg.partition(), msg.offset()
        return callback

    for event in events:
        if value_format == "avro":
            payload = avro_value(event, schema_id)
        else:
            payload = json.dumps({k: v for k, v in event.items() if k not in ("ts_ms", "partition", "offset")}).encode()
        producer.produce(topic, key=event["page"].encode(), value=payload,
                         timestamp=event["ts_ms"], on_delivery=delivered(event))
        producer.poll(0)
    remaining = producer.flush(60)
    if failures or remaining:
        raise RuntimeError(f"produce to {topic} failed: {failures[:3]} ({remaining} undelivered)")
    return events


def main(argv: Sequence[str] | None = None) -> int:
    from kbroker.spark.source import to_epoch_ms

    p = argparse.ArgumentParser(prog="kbroker spark generate", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dataset", choices=["clickstream"])
    p.add_argument("--bootstrap", default=None)
    p.add_argument("--topic", default="clicks")
    p.add_argument("--partitions", type=int, default=3, help="partitions if the topic is created")
    p.add_argument("--events", type=int, default=5000)
    p.add_argument("--start", default=None, help="first event time, ISO-8601 or epoch ms (default: now - minutes)")
    p.add_argument("--minutes", type=float, default=10.0, help="event times span this many minutes")
    p.add_argument("--users", type=int, default=50)
    p.add_argument("--pages", type=int, default=8)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--first-id", type=int, default=0, help="event_id of the first event")
    p.add_argument("--write-jsonl", help="also write the produced events (with partition/offset) here")
    p.add_argument("--value-format", choices=VALUE_FORMATS, default="json", help="record values: JSON or Avro")
    p.add_argument("--schema-id", type=int, help="avro: frame values with the schema-registry prefix, this id")
    p.add_argument("--write-schema", metavar="FILE", help="avro: write the Avro schema (.avsc) here")
    args = p.parse_args(argv)
    bootstrap = args.bootstrap or os.environ.get(BOOTSTRAP_ENV, DEFAULT_BOOTSTRAP)
    start = to_epoch_ms(args.start) if args.start else int(time.time() * 1000 - args.minutes * 60_000)
    events = clickstream_events(events=args.events, start_ms=start, minutes=args.minutes, users=args.users,
                                pages=args.pages, seed=args.seed, first_id=args.first_id)
    if args.value_format == "avro":
        try:
            import fastavro  # noqa: F401
        except ImportError:
            print("kbroker spark: error: Avro values need fastavro: pip install fastavro==1.13.1", file=sys.stderr)
            return 1
        if args.write_schema:
            with open(args.write_schema, "w") as f:
                json.dump(CLICKSTREAM_AVRO_SCHEMA, f, indent=2)
    ensure_topic(bootstrap, args.topic, args.partitions)
    produce_clickstream(bootstrap, args.topic, events, value_format=args.value_format, schema_id=args.schema_id)
    if args.write_jsonl:
        with open(args.write_jsonl, "w") as f:
            for e in events:
                f.write(json.dumps(e) + "\n")
    print(f"produced {len(events)} clickstream events to {args.topic} on {bootstrap} "
          f"({events[0]['ts']} .. {events[-1]['ts']})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
