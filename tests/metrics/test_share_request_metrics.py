"""The KIP-932 metrics added for Kafka 4.3.1 parity, scraped from a real broker process driven by raw
ShareFetch / ShareAcknowledge requests: BrokerTopicMetrics' Total/FailedShareFetchRequestsPerSec and
Total/FailedShareAcknowledgementRequestsPerSec (once per topic of a request), the group coordinator's
share-group-rebalance-count, and the share coordinator's write-latency-avg/max and last-pruned-offset."""

from __future__ import annotations

import math
import time
from pathlib import Path

import pytest

from kbroker.protocol.messages.share_fetch import ShareFetchRequest as F
from tests.interop.test_share_fetch_delayed import _produce_later, _setup
from tests.metrics.scrape import http_get, metrics_broker, samples, undocumented, value

pytestmark = pytest.mark.interop

ACCEPT = 1
BTM = "kafka_server_brokertopicmetrics_"


def test_share_request_rebalance_and_share_coordinator_metrics(tmp_path: Path) -> None:
    broker, http = metrics_broker(tmp_path, **{"share.coordinator.state.topic.prune.interval.ms": "1000",
                                               "share.coordinator.snapshot.update.records.per.snapshot": "2"})
    try:
        topic, (m,) = _setup(broker, 1)
        text = http_get(f"{http}/metrics")[1]
        # One member joined the one share group: one epoch bump by a heartbeat.
        assert value(text, "kafka_server_group_coordinator_metrics_group_rebalance_total", protocol="share") == 1

        def meter(name: str) -> float:
            return value(http_get(f"{http}/metrics")[1], f"{BTM}{name}_total", topic=topic)

        fetches, acks = meter("totalsharefetchrequests"), meter("totalshareacknowledgementrequests")
        assert fetches >= 2 and acks >= 1  # the set-up's fetches and its acknowledgement
        assert meter("failedsharefetchrequests") == 0 and meter("failedshareacknowledgementrequests") == 0
        _produce_later(broker, topic, 0).join()
        got: list[tuple[int, int, int]] = []
        while not got:
            got = m.fetch(1000)[1]
        m.acknowledge(got[0][0], got[-1][1], ACCEPT)           # a ShareAcknowledge
        m.fetch(0, acks=[(10_000, 10_000, ACCEPT)])              # a ShareFetch with a failing acknowledgement
        now_fetches = meter("totalsharefetchrequests")
        assert now_fetches >= fetches + 2  # at least one fetch for the record, and the one acknowledging
        assert meter("totalshareacknowledgementrequests") == acks + 2
        assert meter("failedshareacknowledgementrequests") == 1
        assert meter("failedsharefetchrequests") == 0
        # A partition the topic does not have: the fetch answers it with an error, once for the topic.
        r = m.client.request(78, 2, F(group_id=m.group, member_id=m.member_id, share_session_epoch=m.epoch,
                                      max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, max_records=100,
                                      batch_size=100, topics=[F.FetchTopic(topic_id=m.tid, partitions=[
                                          F.FetchPartition(partition_index=7)])]))
        assert r.error_code == 0 and any(p.error_code != 0 for t in r.responses for p in t.partitions), r
        m.epoch += 1  # the session moved on: the next fetch (the pruning wait below) carries the next epoch
        assert meter("failedsharefetchrequests") == 1
        assert meter("totalsharefetchrequests") == now_fetches + 1
        # Broker-wide totals (no topic label) include the topic's.
        text = http_get(f"{http}/metrics")[1]
        assert value(text, f"{BTM}failedsharefetchrequests_total") == 1

        # The share coordinator: write latencies of the state writes, and the pruned state topic.
        avg = value(text, "kafka_server_share_coordinator_metrics_write_latency_avg")
        top = value(text, "kafka_server_share_coordinator_metrics_write_latency_max")
        assert not math.isnan(avg) and 0 <= avg <= top, (avg, top)
        deadline = time.monotonic() + 30
        while True:
            pruned = {k: v for k, v in samples(http_get(f"{http}/metrics")[1]).items()
                      if k[0] == "kafka_server_share_coordinator_metrics_last_pruned_offset"}
            if pruned and all(v > 0 for v in pruned.values()):
                break
            assert time.monotonic() < deadline, pruned
            m.fetch(0)  # more state writes: snapshots every 2 updates make the older records redundant
            _produce_later(broker, topic, 0).join()
            got = m.fetch(500)[1]
            if got:
                m.acknowledge(got[0][0], got[-1][1], ACCEPT)
        ((_name, labels),) = pruned
        assert dict(labels)["topic"] == "__share_group_state"
        assert undocumented(http_get(f"{http}/metrics")[1]) == []
        m.close()
    finally:
        broker.stop()
