"""A broker in a KRaft cluster: time to join, and admin round trips through kbroker vs through a Kafka broker.

    .venv/bin/python benchmarks/bench_kraft_admin.py [--topics 20] [--json out.json]

One Apache Kafka 4.3.1 controller, one Kafka broker (node 2) and one kbroker broker (node 3), as
`tests/support/kafka_cluster.py` starts them. Reported:

  join s        kbroker: from spawning `kbroker serve` until it serves (caught up with the metadata log,
                registered, unfenced); Kafka broker: from spawning the JVM until "Kafka Server started".
  create ms     CreateTopics of one 1-partition topic sent to each broker (a raw request on one
                connection), one at a time, until the answer (median and max over --topics). Kafka's
                broker forwards it in an Envelope and answers when the controller does; kbroker sends it
                to the controller and answers once its own image holds the topic.
  visible ms    the same, plus until the topic is in that broker's next Metadata answer.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.kafka_cluster import KafkaCluster  # noqa: E402


def _create_times(bootstrap: str, prefix: str, n: int) -> tuple[list[float], list[float]]:
    """Raw CreateTopics (v7) and Metadata (v12) on one connection to this broker (a client library would
    send CreateTopics to whichever broker Metadata names as controller)."""
    from kbroker.client import NodeConnection
    from kbroker.protocol.messages.create_topics import CreateTopicsRequest, CreateTopicsResponse
    from kbroker.protocol.messages.metadata import MetadataRequest, MetadataResponse

    host, port = bootstrap.rsplit(":", 1)

    async def run() -> tuple[list[float], list[float]]:
        conn = NodeConnection(host, int(port))
        await conn.connect()
        created, visible = [], []
        try:
            for i in range(n):
                name = f"{prefix}-{i}"
                t0 = time.perf_counter()
                resp = await conn.request(19, CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
                    name=name, num_partitions=1, replication_factor=1)], timeout_ms=30000),
                    CreateTopicsResponse, version=7)
                assert resp.topics[0].error_code == 0, resp
                created.append((time.perf_counter() - t0) * 1000)
                while True:
                    md = await conn.request(3, MetadataRequest(
                        topics=[MetadataRequest.MetadataRequestTopic(name=name)], allow_auto_topic_creation=False),
                        MetadataResponse, version=12)
                    if md.topics[0].error_code == 0:
                        break
                    await asyncio.sleep(0.001)
                visible.append((time.perf_counter() - t0) * 1000)
        finally:
            await conn.close()
        return created, visible

    return asyncio.run(run())


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--topics", type=int, default=20)
    ap.add_argument("--json")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cluster = KafkaCluster(Path(tmp))
        results: dict[str, dict[str, float]] = {}
        try:
            cluster.start_controllers()
            kafka = cluster.add_kafka_broker(2)
            kafka.format()
            t0 = time.perf_counter()
            kafka.start()
            kafka_join = time.perf_counter() - t0
            kb = cluster.kbroker(3)
            t0 = time.perf_counter()
            kb.start(timeout=90)
            kb_join = time.perf_counter() - t0
            for name, bootstrap, join in (("kbroker", kb.bootstrap, kb_join), ("kafka", kafka.bootstrap, kafka_join)):
                created, visible = _create_times(bootstrap, name, args.topics)
                results[name] = {"join_s": round(join, 2),
                                 "create_ms_median": round(statistics.median(created), 1),
                                 "create_ms_max": round(max(created), 1),
                                 "visible_ms_median": round(statistics.median(visible), 1),
                                 "visible_ms_max": round(max(visible), 1)}
        finally:
            cluster.stop_all()
    print(f"{'broker':8} {'join s':>7} {'create ms (median/max)':>24} {'visible ms (median/max)':>25}")
    for name, r in results.items():
        print(f"{name:8} {r['join_s']:7.2f} {r['create_ms_median']:11.1f} / {r['create_ms_max']:<10.1f}"
              f" {r['visible_ms_median']:11.1f} / {r['visible_ms_max']:<10.1f}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
