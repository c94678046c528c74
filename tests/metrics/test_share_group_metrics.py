"""Share-group metrics (Kafka's ShareGroupMetrics, SharePartitionMetrics, share-coordinator-metrics and
the group coordinator's share group counts) scraped from a real broker process driven by raw
ShareFetch / ShareAcknowledge requests: every figure is what the requests did."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.interop.test_share_fetch_delayed import _produce_later, _setup
from tests.metrics.scrape import http_get, metrics_broker, undocumented, value

pytestmark = pytest.mark.interop

ACCEPT, RELEASE, REJECT = 1, 2, 3
LOCK_MS = 1000


def test_share_group_metrics_count_what_happened(tmp_path: Path) -> None:
    broker, http = metrics_broker(tmp_path, **{"group.share.record.lock.duration.ms": str(LOCK_MS),
                                               "group.share.min.record.lock.duration.ms": str(LOCK_MS)})
    try:
        before = http_get(f"{http}/metrics")[1]
        assert value(before, "kafka_server_sharegroupmetrics_recordacknowledgements_total", ackType="Accept") == 0
        assert value(before, "kafka_server_group_coordinator_metrics_group_count", protocol="share") == 0
        topic, (m,) = _setup(broker, 1)  # accepts one marker record (or more, if the first fetches were empty)
        setup_accepts = value(http_get(f"{http}/metrics")[1],
                              "kafka_server_sharegroupmetrics_recordacknowledgements_total", ackType="Accept")
        assert setup_accepts >= 1
        for _ in range(6):
            _produce_later(broker, topic, 0).join()
        acquired: list[tuple[int, int, int]] = []
        deadline = time.monotonic() + 20
        while sum(last - first + 1 for first, last, _d in acquired) < 6 and time.monotonic() < deadline:
            acquired += m.fetch(1000)[1]
        offsets = sorted(o for first, last, _d in acquired for o in range(first, last + 1))
        assert len(offsets) == 6, acquired
        m.acknowledge(offsets[0], offsets[1], ACCEPT)  # one batch of two records
        m.acknowledge(offsets[2], offsets[2], REJECT)
        m.acknowledge(offsets[3], offsets[3], RELEASE)
        # offsets[4] and [5] stay acquired until their locks time out; a fetch then re-acquires them
        # with the released one.
        time.sleep(LOCK_MS / 1000 + 0.5)
        again = m.fetch(3000)[1]
        assert sorted(o for f, last, _d in again for o in range(f, last + 1)) == offsets[3:], again

        text = http_get(f"{http}/metrics")[1]

        def acks(kind: str) -> float:
            return value(text, "kafka_server_sharegroupmetrics_recordacknowledgements_total", ackType=kind)

        assert (acks("Accept") - setup_accepts, acks("Reject"), acks("Release"), acks("Renew")) == (2, 1, 1, 0)
        assert value(text, "kafka_server_group_coordinator_metrics_group_count", protocol="share") == 1
        assert value(text, "kafka_server_group_coordinator_metrics_share_group_count", state="stable") == 1
        assert value(text, "kafka_server_group_coordinator_metrics_share_group_count", state="empty") == 0
        labels = {"group": m.group, "topic": topic, "partition": "0"}
        assert value(text, "kafka_server_sharepartitionmetrics_acquisitionlocktimeout_total", **labels) == 2
        # In flight: from the start offset (the released record, now re-acquired) to the end.
        assert value(text, "kafka_server_sharepartitionmetrics_inflightmessagecount", **labels) == 3
        assert value(text, "kafka_server_sharegroupmetrics_partitionloadtimems_count") == 1
        # State writes: the initialization, each acknowledgement, the lock expiry (at least).
        assert value(text, "kafka_server_share_coordinator_metrics_write_total") >= 1 + setup_accepts + 3 + 1
        assert undocumented(text) == []
        m.close()
    finally:
        broker.stop()
