"""FetcherStats (`kafka.server:type=FetcherStats,name=BytesPerSec|RequestsPerSec,clientId=..,brokerHost=..,
brokerPort=..`) fed by the replica fetchers, in-process.

Three in-process brokers (`tests.support.replica_cluster.ReplicaCluster`), one partition led by
broker 1 with RF 3. After records are replicated, each follower's exposition has, for its fetcher
`ReplicaFetcherThread-0-1` tagged with the leader's host and port, a request count that grows with every
Fetch round trip and a byte count equal to what that follower appended (its ReplicationBytesIn).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaProducer

from tests.replica.test_replication_metrics import scrape, value
from tests.support.replica_cluster import ReplicaCluster

logging.getLogger("kafka").setLevel(logging.ERROR)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ReplicaCluster]:
    with ReplicaCluster(tmp_path, 3) as c:
        c.create_topic("t", [1, 2, 3], {"min.insync.replicas": "2"})
        yield c


def test_fetcher_stats_count_requests_and_bytes(cluster: ReplicaCluster) -> None:
    p = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all", linger_ms=0, request_timeout_ms=15000)
    for i in range(20):
        p.send("t", f"r{i}".encode() * 50)
    p.flush(30)
    p.close()
    leader_port = str(cluster.nodes[1].port)
    for follower in (2, 3):
        labels = {"clientId": "ReplicaFetcherThread-0-1", "brokerHost": "127.0.0.1", "brokerPort": leader_port}
        deadline = time.monotonic() + 20
        while True:
            s = scrape(cluster, follower)
            got = value(s, "kafka_server_fetcherstats_bytes_total", **labels)
            replicated = value(s, "kafka_server_brokertopicmetrics_replicationbytesin_total")
            if got == replicated and got > 20 * 100:
                break
            assert time.monotonic() < deadline, (got, replicated)
            time.sleep(0.1)
        requests = value(s, "kafka_server_fetcherstats_requests_total", **labels)
        assert requests >= 1
        time.sleep(1.0)  # an idle follower keeps fetching (long polls of replica.fetch.wait.max.ms)
        assert value(scrape(cluster, follower), "kafka_server_fetcherstats_requests_total", **labels) > requests
