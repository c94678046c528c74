"""acks=all produce with replication, in process: latency and throughput at RF 1 and RF 3.

    .venv/bin/python benchmarks/bench_replication.py [--sequential 1000] [--records 20000] [--size 100]

Three kbroker brokers in ONE Python process and ONE event loop (`tests/support/replica_cluster.py`,
the stand-in controller of the replication tests), a kafka-python producer in the main thread. The
brokers share one core with each other and the client, so the figures are a floor for the replication
path's overhead (RF 3 vs RF 1 on the same harness), not a cluster figure and not comparable with
Kafka processes: issue 12's P6 row (3 `kbroker serve` nodes vs 3 Kafka nodes) needs the KRaft broker
lifecycle.

- sequential: one acks=all send at a time (`send().get()`, linger 0), p50 / p99 in ms;
- throughput: `--records` records of `--size` bytes sent asynchronously (linger 5 ms), records/s.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kafka import KafkaProducer  # noqa: E402

from tests.support.replica_cluster import ReplicaCluster  # noqa: E402


def measure(cluster: ReplicaCluster, topic: str, sequential: int, records: int, size: int) -> dict[str, float]:
    p = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all", linger_ms=0, request_timeout_ms=30000)
    value = b"x" * size
    for _ in range(20):  # warm-up
        p.send(topic, value).get(15)
    lat = []
    for _ in range(sequential):
        t0 = time.perf_counter()
        p.send(topic, value).get(15)
        lat.append((time.perf_counter() - t0) * 1000)
    p.close()
    p = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all", linger_ms=5, request_timeout_ms=30000)
    p.send(topic, value).get(15)
    t0 = time.perf_counter()
    for _ in range(records):
        p.send(topic, value)
    p.flush(120)
    elapsed = time.perf_counter() - t0
    p.close()
    lat.sort()
    return {"p50_ms": statistics.median(lat), "p99_ms": lat[int(len(lat) * 0.99) - 1], "records_per_s": records / elapsed}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sequential", type=int, default=1000)
    ap.add_argument("--records", type=int, default=20000)
    ap.add_argument("--size", type=int, default=100)
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("kafka").setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory() as d, ReplicaCluster(Path(d), 3) as cluster:
        cluster.create_topic("rf1", [1])
        cluster.create_topic("rf3", [1, 2, 3], {"min.insync.replicas": "2"})
        for topic in ("rf1", "rf3"):
            r = measure(cluster, topic, args.sequential, args.records, args.size)
            print(f"{topic}: acks=all p50 {r['p50_ms']:.2f} ms, p99 {r['p99_ms']:.2f} ms, "
                  f"{r['records_per_s']:.0f} records/s ({args.size} B)")


if __name__ == "__main__":
    main()
