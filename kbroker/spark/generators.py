"""Sample data for the worked pipelines, produced to the broker with confluent-kafka.

Owns the clickstream generator: JSON page-view events `{"event_id", "user_id", "page", "action",
"ts"}` keyed by page, with the record timestamp (CreateTime) equal to the event time, in event-time
order, from a seeded random generator (the same arguments give the same events). It returns what
it produced, with each record's partition and offset, so a test can compute expected results.

    kbroker spark generate clickstream --topic clicks --events 5000 --start 2026-11-25T10:00:00Z --minutes 10
    python -m kbroker.spark.generators clickstream --bootstrap 127.0.0.1:9092 --topic clicks

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


def produce_clickstream(bootstrap: str, topic: str, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Produce events (value: JSON without ts_ms; key: page; timestamp: ts_ms); add partition/offset."""
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
        value = {k: v for k, v in event.items() if k != "ts_ms"}
        producer.produce(topic, key=event["page"].encode(), value=json.dumps(value).encode(),
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
    args = p.parse_args(argv)
    bootstrap = args.bootstrap or os.environ.get(BOOTSTRAP_ENV, DEFAULT_BOOTSTRAP)
    start = to_epoch_ms(args.start) if args.start else int(time.time() * 1000 - args.minutes * 60_000)
    events = clickstream_events(events=args.events, start_ms=start, minutes=args.minutes, users=args.users,
                                pages=args.pages, seed=args.seed, first_id=args.first_id)
    ensure_topic(bootstrap, args.topic, args.partitions)
    produce_clickstream(bootstrap, args.topic, events)
    if args.write_jsonl:
        with open(args.write_jsonl, "w") as f:
            for e in events:
                f.write(json.dumps(e) + "\n")
    print(f"produced {len(events)} clickstream events to {args.topic} on {bootstrap} "
          f"({events[0]['ts']} .. {events[-1]['ts']})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
