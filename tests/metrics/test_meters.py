"""Unit tests of the meters and their exposition: buckets, totals, names, units."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from kbroker.metrics.exposition import TOPIC_METERS, MetricsExposition
from kbroker.metrics.meters import (
    LOG_FLUSH_STATS,
    TIME_BUCKETS_MS,
    BrokerMetrics,
    Histogram,
    LockedHistogram,
    TopicMetrics,
)
from tests.metrics.scrape import samples, undocumented, value


def test_histogram_buckets_are_inclusive_upper_bounds_in_seconds() -> None:
    h = Histogram()
    h.observe(0.0)  # le=0.1 ms
    h.observe(0.0001)  # exactly 0.1 ms: still the first bucket (Prometheus' le is inclusive)
    h.observe(0.00011)
    h.observe(100.0)  # above 30 s: the +Inf bucket
    assert h.counts[0] == 2 and h.counts[1] == 1 and h.counts[-1] == 1
    assert h.count == 4 and abs(h.sum - 100.00021) < 1e-9
    locked = LockedHistogram()
    locked.observe(0.003)
    assert locked.snapshot() == ([0] * 5 + [1] + [0] * 12, 0.003)


def test_request_record_splits_the_six_times() -> None:
    m = BrokerMetrics({0: "Produce"})
    r = m.request(0)
    r.requests[9] += 1
    # received 0, dispatched 1 ms later, handler 2 ms, purgatory 40 ms, queued 0.2 ms, sent 0.05 ms.
    r.record(10.0, 10.001, 10.003, 10.043, 10.0432, 10.04325)
    text = MetricsExposition(m).render().decode()
    assert value(text, "kafka_network_requestmetrics_requests_total", request="Produce", version="9") == 1
    cases = {"requestqueuetimems": 1.0, "localtimems": 2.0, "remotetimems": 40.0, "responsequeuetimems": 0.2,
             "responsesendtimems": 0.05, "totaltimems": 43.25}
    for name, ms in cases.items():
        full = f"kafka_network_requestmetrics_{name}"
        assert abs(value(text, f"{full}_sum", request="Produce") - ms) < 1e-6, name
        assert value(text, f"{full}_count", request="Produce") == 1
        # The cumulative bucket of the first bound >= ms holds it, the one below does not.
        first = next(b for b in TIME_BUCKETS_MS if b >= ms - 1e-9)
        assert value(text, f"{full}_bucket", request="Produce", le=str(first)) == 1
        below = [b for b in TIME_BUCKETS_MS if b < first - 1e-9]
        if below:
            assert value(text, f"{full}_bucket", request="Produce", le=str(below[-1])) == 0
        assert value(text, f"{full}_bucket", request="Produce", le="+Inf") == 1


def test_topic_counters_have_kafka_names_and_a_broker_wide_total_that_survives_deletion() -> None:
    m = BrokerMetrics()
    a, b = m.topic("a"), m.topic("b")
    assert m.topic("a") is a  # bound once, reused
    a.bytes_in, a.messages_in, b.bytes_in, b.bytes_out = 1000, 10, 500, 70
    text = MetricsExposition(m).render().decode()
    assert value(text, "kafka_server_brokertopicmetrics_bytesin_total", topic="a") == 1000
    assert value(text, "kafka_server_brokertopicmetrics_bytesin_total") == 1500
    assert value(text, "kafka_server_brokertopicmetrics_messagesin_total", topic="a") == 10
    assert value(text, "kafka_server_brokertopicmetrics_bytesout_total", topic="b") == 70
    m.remove_topic("a")
    text = MetricsExposition(m).render().decode()
    assert ("kafka_server_brokertopicmetrics_bytesin_total", (("topic", "a"),)) not in samples(text)
    assert value(text, "kafka_server_brokertopicmetrics_bytesin_total") == 1500  # a counter never goes down
    assert {f for f, _n, _d in TOPIC_METERS} == set(TopicMetrics.FIELDS)


def test_exposition_types_and_process_collectors() -> None:
    m = BrokerMetrics({0: "Produce"})
    m.request(0).record(1.0, 1.0, 1.001, 1.001, 1.002, 1.002)
    m.listener("PLAINTEXT").connection_creation += 3
    m.isr_shrinks += 2
    LOG_FLUSH_STATS.observe(0.004)
    families = {f.name: f for f in text_string_to_metric_families(MetricsExposition(m).render().decode())}
    assert families["kafka_server_brokertopicmetrics_bytesin"].type == "counter"
    assert families["kafka_network_requestmetrics_totaltimems"].type == "histogram"
    assert families["kafka_log_logflushstats_logflushrateandtimems"].type == "histogram"
    assert families["kbroker_eventloop_lag_ms"].type == "histogram"
    assert families["kafka_server_replicamanager_isrshrinks"].samples[0].value == 2
    creation = families["kafka_server_socket_server_metrics_connection_creation"].samples[0]
    assert creation.labels == {"listener": "PLAINTEXT"} and creation.value == 3
    assert "process_resident_memory_bytes" in families and "python_info" in families


def test_every_exposed_name_is_documented() -> None:
    """docs/operations.md "Metrics" names every metric the broker's own collector exposes (the
    collect-time ones are checked on a real broker's scrape, tests/metrics/test_metrics_interop.py)."""
    m = BrokerMetrics({0: "Produce"})
    m.topic("t")
    m.request(0).record(1.0, 1.0, 1.0, 1.0, 1.0, 1.0)
    m.listener("PLAINTEXT")
    missing = undocumented(MetricsExposition(m).render().decode())
    assert not missing, f"not in docs/operations.md, Metrics: {missing}"
