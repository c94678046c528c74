"""Transactional produce throughput: a librdkafka (confluent-kafka) transactional producer writes
1 KiB records in transactions of 100 and 1,000 records (begin, produce, commit) to a one-partition
topic; records/s and transactions/s over the whole run, commits included.

    .venv/bin/python benchmarks/bench_transactions.py --bootstrap 127.0.0.1:9092 [--records 20000] \
        [--replication-factor 3]

Point `--bootstrap` at kbroker or at Kafka (benchmarks/reference/kafka.sh) to compare them.
"""

from __future__ import annotations

import argparse
import time
import uuid

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic


def run(bootstrap: str, per_txn: int, records: int, replication_factor: int = 1) -> tuple[float, float]:
    topic = f"bench-txn-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, replication_factor)])[topic].result(30)
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"bench-{uuid.uuid4().hex[:8]}",
                  "linger.ms": 5, "batch.size": 1_000_000})
    p.init_transactions(60)
    value = b"x" * 1024
    txns = records // per_txn
    started = time.perf_counter()
    for _ in range(txns):
        p.begin_transaction()
        for _ in range(per_txn):
            while True:
                try:
                    p.produce(topic, value)
                    break
                except BufferError:
                    p.poll(0.01)
        p.commit_transaction(60)
    elapsed = time.perf_counter() - started
    return txns * per_txn / elapsed, txns / elapsed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--records", type=int, default=20_000)
    ap.add_argument("--replication-factor", type=int, default=1)
    args = ap.parse_args()
    print("| records per transaction | records/s | transactions/s |")
    print("|---:|---:|---:|")
    for per_txn in (100, 1000):
        rps, tps = run(args.bootstrap, per_txn, args.records, args.replication_factor)
        print(f"| {per_txn} | {rps:,.0f} | {tps:,.1f} |")


if __name__ == "__main__":
    main()
