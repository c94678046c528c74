"""Kafka's socket-server-metrics `connection-creation-rate` per listener: a Meter's rate over
metrics.num.samples=2 windows of metrics.sample.window.ms=30000 (at least one full window of
elapsed time, so a burst right after start is not an inflated rate), next to
`connection-creation-total`; exposed as kafka_server_socket_server_metrics_connection_creation_rate."""

from __future__ import annotations

import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kbroker.metrics.exposition import MetricsExposition
from kbroker.metrics.meters import BrokerMetrics, ListenerMetrics


def test_rate_over_the_live_samples() -> None:
    ls = ListenerMetrics("CLIENTS")
    assert ls.connection_creation_rate(0) == 0.0
    for t in range(0, 15000, 500):  # 30 connections in the first 15 s
        ls.record_connection_creation(t)
    assert ls.connection_creation == 30
    assert ls.connection_creation_rate(15000) == 1.0  # 30 over one full window (30 s)
    for t in range(30000, 60000, 1000):  # a second window: 30 more
        ls.record_connection_creation(t)
    assert ls.connection_creation_rate(59000) == pytest.approx(60 / 59)  # both windows, 59 s
    assert ls.connection_creation_rate(61000) == pytest.approx(30 / 31)  # the first one expired
    assert ls.connection_creation_rate(200000) == 0.0
    assert ls.connection_creation == 60  # the total never goes down


def test_exposed_per_listener() -> None:
    m = BrokerMetrics()
    now = int(time.monotonic() * 1000)
    for _ in range(6):
        m.listener("CLIENTS").record_connection_creation(now)
    families = {f.name: f for f in text_string_to_metric_families(MetricsExposition(m).render().decode())}
    [rate] = families["kafka_server_socket_server_metrics_connection_creation_rate"].samples
    assert rate.labels == {"listener": "CLIENTS"} and rate.value == pytest.approx(6 / 30, rel=0.01)
    [total] = [s for s in families["kafka_server_socket_server_metrics_connection_creation"].samples
               if s.name.endswith("_total")]
    assert total.value == 6
