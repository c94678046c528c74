"""Broker metrics: the meters the data path records into, and their Prometheus exposition.

Owns the recording side (`kbroker.metrics.meters`: `BrokerMetrics` with Kafka's BrokerTopicMetrics,
RequestMetrics, socket-server and ReplicaManager counters, the process-wide `LOG_FLUSH_STATS` and
`GROUP_COORDINATOR_METRICS`), the collect-time gauges over the broker's state
(`kbroker.metrics.collectors`, typed by Protocols so this package needs none of the domain types) and
the Prometheus text exposition (`kbroker.metrics.exposition`, the only module that imports
`prometheus_client`). Every metric name is the one Prometheus' JMX exporter makes of Kafka's MBean
with its usual Kafka rules (`kafka.server:type=BrokerTopicMetrics,name=BytesInPerSec,topic=t` ->
`kafka_server_brokertopicmetrics_bytesin_total{topic="t"}`); docs/operations.md, "Metrics", lists
them all.

Why the meters are plain Python and not `prometheus_client` objects: recording sits on the hot
paths (one Produce or Fetch request, one append), where a `prometheus_client` counter costs a lock
and a few calls per increment. Here a count is an attribute increment on a pre-bound object (the
partition holds its topic's meters, a request its API's) and a histogram observation is one
`bisect`; `prometheus_client` only sees them at scrape time, through a custom collector.

Sits at the bottom of the layers, beside kbroker.clock: net/, api/, replica/, log/ and coord/ all
record into it, so it must import nothing of kbroker (and nothing of asyncio: log/ imports it).
The package itself imports nothing, so importing a meter does not pull `prometheus_client` in.
The HTTP listener that serves the exposition and the event-loop monitor live in kbroker.net.
"""
