"""Prometheus exposition: the broker's meters and collect-time gauges as Prometheus text.

`MetricsExposition` is a `prometheus_client` registry holding one custom collector over
`BrokerMetrics` (counters and histograms recorded on the hot paths) plus the collect-time sources
the wiring adds (`add_source`): callables that read the broker's state at scrape time (log sizes,
partition counts, groups) and yield metric families built with the helpers below. Nothing here runs
between scrapes. `prometheus_client`'s own process and platform collectors are included
(`process_cpu_seconds_total`, `process_resident_memory_bytes`, `python_info`...).

Names: Prometheus' JMX exporter with its usual Kafka rules (lowercased output names) turns
`kafka.<domain>:type=<T>,name=<N>PerSec,<k>=<v>` (a Count) into `kafka_<domain>_<t>_<n>_total{k="v"}`
and `kafka.<domain>:type=<T>,name=<N>,...` (a Value) into `kafka_<domain>_<t>_<n>`; a Kafka histogram
keeps its MBean name and becomes a Prometheus histogram (`_bucket`, `_sum`, `_count`) in the MBean's
unit (milliseconds). kbroker-only metrics start with `kbroker_`. docs/operations.md lists every name.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Iterator, Sequence

from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from kbroker.metrics.meters import (
    GROUP_COORDINATOR_METRICS,
    LOG_FLUSH_STATS,
    SHARE_GROUP_METRICS,
    TIME_BUCKETS_MS,
    BrokerMetrics,
    Histogram,
    TopicMetrics,
)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# BrokerTopicMetrics: TopicMetrics field -> Kafka's meter name (without PerSec).
TOPIC_METERS: tuple[tuple[str, str, str], ...] = (
    ("bytes_in", "BytesIn", "Bytes of record batches appended from produce requests"),
    ("messages_in", "MessagesIn", "Records appended from produce requests"),
    ("bytes_out", "BytesOut", "Bytes of records sent to consumers in fetch responses"),
    ("bytes_rejected", "BytesRejected", "Bytes of produced batches the log refused"),
    ("total_produce_requests", "TotalProduceRequests", "Produce requests, counted per partition"),
    ("failed_produce_requests", "FailedProduceRequests", "Produce requests that failed, per partition"),
    ("total_fetch_requests", "TotalFetchRequests", "Fetch requests, counted per partition"),
    ("failed_fetch_requests", "FailedFetchRequests", "Fetch requests that failed, per partition"),
    ("total_share_fetch_requests", "TotalShareFetchRequests", "ShareFetch requests, counted per topic fetched"),
    ("failed_share_fetch_requests", "FailedShareFetchRequests",
     "ShareFetch requests with a partition error, counted per topic"),
    ("total_share_acknowledgement_requests", "TotalShareAcknowledgementRequests",
     "Share acknowledgements (ShareAcknowledge, or piggybacked on ShareFetch), counted per topic"),
    ("failed_share_acknowledgement_requests", "FailedShareAcknowledgementRequests",
     "Share acknowledgements that failed on a partition, counted per topic"),
)
assert tuple(f for f, _n, _d in TOPIC_METERS) == TopicMetrics.FIELDS

Source = Callable[[], Iterable[Metric]]


def gauge(name: str, documentation: str, labels: Sequence[str] = (),
          samples: Iterable[tuple[Sequence[str], float]] = ()) -> GaugeMetricFamily:
    """A gauge family with one sample per (label values, value)."""
    family = GaugeMetricFamily(name, documentation, labels=list(labels))
    for values, value in samples:
        family.add_metric(list(values), value)
    return family


def counter(name: str, documentation: str, labels: Sequence[str] = (),
            samples: Iterable[tuple[Sequence[str], float]] = ()) -> CounterMetricFamily:
    """A counter family; `name` without `_total` (the exposition appends it)."""
    family = CounterMetricFamily(name, documentation, labels=list(labels))
    for values, value in samples:
        family.add_metric(list(values), value)
    return family


def histogram_ms(name: str, documentation: str, labels: Sequence[str],
                 samples: Iterable[tuple[Sequence[str], Histogram]]) -> HistogramMetricFamily:
    """A histogram family in milliseconds from `Histogram`s recorded in seconds."""
    family = HistogramMetricFamily(name, documentation, labels=list(labels))
    for values, hist in samples:
        counts, total = hist.snapshot()
        buckets: list[tuple[str, float]] = []
        running = 0
        for bound, n in zip(TIME_BUCKETS_MS, counts, strict=False):
            running += n
            buckets.append((_le(bound), running))
        running += counts[-1]
        buckets.append(("+Inf", running))
        family.add_metric(list(values), buckets, total * 1000)
    return family


def _le(bound: float) -> str:
    return repr(float(bound)) if not math.isinf(bound) else "+Inf"


class _BrokerCollector(Collector):
    """The families of `BrokerMetrics` and of the process-wide meters."""

    def __init__(self, metrics: BrokerMetrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        m = self.metrics
        topics = sorted(m.topics.values(), key=lambda t: t.topic)
        totals = m.totals()
        for i, (fld, meter, doc) in enumerate(TOPIC_METERS):
            family = CounterMetricFamily(f"kafka_server_brokertopicmetrics_{meter.lower()}", doc,
                                         labels=["topic"])
            # Kafka's MBean without a topic tag is the broker-wide total; JMX exporter gives it no label.
            total = CounterMetricFamily(f"kafka_server_brokertopicmetrics_{meter.lower()}", doc)
            for stats in topics:
                family.add_metric([stats.topic], getattr(stats, fld))
            total.add_metric([], totals[i])
            family.samples.extend(total.samples)
            yield family
        yield counter("kafka_server_brokertopicmetrics_replicationbytesin",
                      "Record bytes this broker appended as a follower, from its leaders' fetch responses",
                      samples=[((), m.replication_bytes_in)])
        yield counter("kafka_server_brokertopicmetrics_replicationbytesout",
                      "Record bytes followers fetched from this broker", samples=[((), m.replication_bytes_out)])
        yield from self._requests()
        yield counter("kafka_server_socket_server_metrics_connection_creation",
                      "Connections accepted, per listener", ["listener"],
                      [((ls.listener,), ls.connection_creation) for ls in m.listeners.values()])
        now_ms = int(time.monotonic() * 1000)
        yield gauge("kafka_server_socket_server_metrics_connection_creation_rate",
                    "Connections accepted per second, per listener (Kafka's connection-creation-rate: "
                    "metrics.num.samples=2 windows of metrics.sample.window.ms=30000)", ["listener"],
                    [((ls.listener,), ls.connection_creation_rate(now_ms)) for ls in m.listeners.values()])
        yield counter("kafka_server_socket_server_metrics_connection_close",
                      "Connections closed, per listener", ["listener"],
                      [((ls.listener,), ls.connection_close) for ls in m.listeners.values()])
        loop = m.event_loop
        yield histogram_ms("kbroker_eventloop_lag_ms",
                           "How late the event loop ran a periodic timer (a busy or blocked loop runs it late)",
                           [], [((), loop.lag)])
        yield gauge("kbroker_eventloop_lag_max_ms", "Largest event-loop lag since the previous scrape",
                    samples=[((), loop.max_lag * 1000)])
        loop.max_lag = loop.last_lag
        yield gauge("kafka_network_socketserver_networkprocessoravgidlepercent",
                    "Share (0..1) of the last window the event loop's thread was off the CPU",
                    samples=[((), loop.idle_ratio)])
        yield counter("kafka_server_replicamanager_isrshrinks",
                      "ISR shrinks committed by the controller for partitions led here",
                      samples=[((), m.isr_shrinks)])
        yield counter("kafka_server_replicamanager_isrexpands",
                      "ISR expansions committed by the controller for partitions led here",
                      samples=[((), m.isr_expands)])
        yield counter("kafka_server_replicamanager_failedisrupdates",
                      "ISR changes (AlterPartition) that failed: an error answer or no delivery",
                      samples=[((), m.failed_isr_updates)])
        yield histogram_ms("kafka_log_logflushstats_logflushrateandtimems", "Time of one log flush (fsync)",
                           [], [((), LOG_FLUSH_STATS)])
        g = GROUP_COORDINATOR_METRICS
        yield counter("kafka_server_group_coordinator_metrics_group_rebalance",
                      "Group rebalances started, per group protocol", ["protocol"],
                      [(("classic",), g.classic_rebalances), (("consumer",), g.consumer_rebalances),
                       (("share",), g.share_rebalances)])
        share = SHARE_GROUP_METRICS
        yield counter("kafka_server_sharegroupmetrics_recordacknowledgements",
                      "Records acknowledged by share consumers, per acknowledgement type (Kafka's "
                      "RecordAcknowledgementsPerSec)", ["ackType"],
                      [((name,), n) for name, n in share.record_acknowledgements.items()])
        yield histogram_ms("kafka_server_sharegroupmetrics_partitionloadtimems",
                           "Time to load a share-partition's state at its first use (Kafka's PartitionLoadTimeMs)",
                           [], [((), share.partition_load_time)])
        yield counter("kafka_server_share_coordinator_metrics_write",
                      "Share-group state writes to the share coordinator (Kafka's write-total)",
                      samples=[((), share.share_coordinator_writes)])
        yield gauge("kafka_server_share_coordinator_metrics_write_latency_avg",
                    "Average time (ms) of a share-group state write, to its records committed (Kafka's "
                    "write-latency-avg)", samples=[((), share.share_coordinator_write_latency.avg(now_ms))])
        yield gauge("kafka_server_share_coordinator_metrics_write_latency_max",
                    "Largest time (ms) of a share-group state write, to its records committed (Kafka's "
                    "write-latency-max)", samples=[((), share.share_coordinator_write_latency.max(now_ms))])
        yield gauge("kafka_server_share_coordinator_metrics_last_pruned_offset",
                    "Offset before which a __share_group_state partition was last pruned (Kafka's "
                    "last-pruned-offset)", ["topic", "partition"],
                    [((t, str(p)), float(o)) for (t, p), o in sorted(share.last_pruned_offsets.items())])

    def _requests(self) -> Iterator[Metric]:
        m = self.metrics
        names = m.api_names
        stats = [(names.get(r.api_key, str(r.api_key)), r) for r in m.requests if r is not None]
        stats.sort(key=lambda x: x[0])
        requests = CounterMetricFamily("kafka_network_requestmetrics_requests",
                                       "Requests received, per API and version", labels=["request", "version"])
        for name, r in stats:
            for version, n in enumerate(r.requests):
                if n:
                    requests.add_metric([name, str(version)], n)
        yield requests
        if not stats:
            return
        for i, (mbean, _h) in enumerate(stats[0][1].histograms()):
            yield histogram_ms(f"kafka_network_requestmetrics_{mbean.lower()}",
                               f"Request {mbean[:-2]} in ms, per API (Kafka's RequestMetrics)", ["request"],
                               [((name, ), list(r.histograms())[i][1]) for name, r in stats])


class MetricsExposition:
    """The registry `/metrics` renders: the broker's meters and the sources the wiring added."""

    def __init__(self, metrics: BrokerMetrics) -> None:
        self.metrics = metrics
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_BrokerCollector(metrics))
        self._sources = _Sources()
        self.registry.register(self._sources)
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)

    def add_source(self, source: Source) -> None:
        """A callable yielding metric families at scrape time (read the state, never record)."""
        self._sources.sources.append(source)

    def render(self) -> bytes:
        """The Prometheus text exposition (format 0.0.4) of every metric."""
        return generate_latest(self.registry)


class _Sources(Collector):
    def __init__(self) -> None:
        self.sources: list[Source] = []

    def collect(self) -> Iterator[Metric]:
        for source in self.sources:
            yield from source()
