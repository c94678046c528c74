"""The broker's observability wiring: collect-time gauges over the services, health probes, the HTTP listener.

Owns `BrokerObservability`: it adds to the exposition (`kbroker.metrics.exposition`) the sources
that read the broker's state at scrape time (log size and segment counts per partition, the
ReplicaManager and controller gauges, the request channel, connections per listener, groups by state
and consumer lag, the broker state), answers `/health/live` and `/health/ready`, and starts the
event-loop monitor and the HTTP listener (`kbroker.metrics.listener`) on the broker's loop.

It sits in the wiring layer, beside broker.py and services.py, because it reads every service;
nothing below it may import it. Collect-time gauges cost nothing between scrapes: nothing here
runs on a request path.

`prometheus_client` (with the email, http and urllib modules it imports, about 50 ms) is imported only
when `kbroker.metrics.listener` is set: a default node, which serves no metrics, starts without it
(issue 17, P5). The families below are built through `gauge`/`counter`, which import the exposition
on their first call, at the first scrape.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

from kbroker.api.context import BrokerServices
from kbroker.cluster.replication_quotas import ReplicationQuotaManager
from kbroker.config import KafkaConfig
from kbroker.metrics.meters import BrokerMetrics
from kbroker.net import KafkaServer
from kbroker.net.http_listener import HttpEndpoint, MetricsHttpServer, parse_http_listener
from kbroker.net.loop_monitor import EventLoopMonitor
from kbroker.replica.partition import Partition
from kbroker.server.broker_lifecycle import BrokerState

if TYPE_CHECKING:
    from prometheus_client.core import Metric

    from kbroker.metrics.exposition import MetricsExposition

log = logging.getLogger(__name__)

# Consumer lag is exposed per (group, partition) while there are at most this many committed offsets:
# beyond it the series would cost more than they tell (kafka_consumergroup_lag_sum stays).
MAX_LAG_SERIES = 10_000


def gauge(name: str, documentation: str, labels: Sequence[str] = (),
          samples: Iterable[tuple[Sequence[str], float]] = ()) -> Metric:
    """`kbroker.metrics.exposition.gauge`, imported at the first scrape (the module docstring says why)."""
    from kbroker.metrics.exposition import gauge as family

    return family(name, documentation, labels, samples)


def counter(name: str, documentation: str, labels: Sequence[str] = (),
            samples: Iterable[tuple[Sequence[str], float]] = ()) -> Metric:
    """`kbroker.metrics.exposition.counter`, imported at the first scrape."""
    from kbroker.metrics.exposition import counter as family

    return family(name, documentation, labels, samples)


class BrokerObservability:
    """Metrics sources, probes and the HTTP listener of one broker: `bind()` first thing at start-up,
    `attach()` once the services exist and the Kafka listeners are bound, `set_running()` once the
    broker is registered, `set_shutting_down()` and `stop()` on the way out."""

    def __init__(self, config: KafkaConfig) -> None:
        self.config = config
        # Checked at construction, so a bad value refuses the start before anything is written.
        self.endpoint: HttpEndpoint | None = parse_http_listener(str(config["kbroker.metrics.listener"]))
        self.state = BrokerState.STARTING
        self.services: BrokerServices | None = None
        self.server: KafkaServer | None = None
        self.metrics: BrokerMetrics | None = None
        self.exposition: MetricsExposition | None = None
        self.http: MetricsHttpServer | None = None
        self.monitor: EventLoopMonitor | None = None
        self.registered = False

    # -- lifecycle --

    async def bind(self) -> HttpEndpoint | None:
        """Open the HTTP listener, if configured, before anything is written (a port in use refuses
        the start with nothing created). Until `attach`, /metrics holds the broker state only and
        /health/ready answers 503. Raises OSError when it cannot bind."""
        if self.endpoint is None:
            return None
        from kbroker.metrics.exposition import CONTENT_TYPE

        self.exposition = self._exposition()
        self.http = MetricsHttpServer(self.endpoint, self.render, CONTENT_TYPE, self.live, self.ready)
        bound = await self.http.start()
        log.info("Metrics on %s/metrics, health on %s/health/live and %s/health/ready", bound, bound, bound)
        return bound

    def attach(self, services: BrokerServices, server: KafkaServer) -> None:
        """The services are built and the Kafka listeners bound: expose them, start the loop monitor."""
        self.services, self.server = services, server
        self.metrics = services.metrics
        if self.metrics is not None:
            self.monitor = EventLoopMonitor(asyncio.get_running_loop(), self.metrics.event_loop)
            self.monitor.start()
        if self.http is not None:
            self.exposition = self._exposition()

    def render(self) -> bytes:
        assert self.exposition is not None
        return self.exposition.render()

    def set_running(self) -> None:
        """The broker is registered (and, with a quorum, unfenced): it serves."""
        self.registered = True
        self.state = BrokerState.RUNNING

    def set_shutting_down(self) -> None:
        self.state = BrokerState.SHUTTING_DOWN

    async def stop(self) -> None:
        if self.monitor is not None:
            self.monitor.stop()
        if self.http is not None:
            await self.http.stop()

    # -- health --

    def live(self) -> tuple[bool, dict[str, object]]:
        """The process is up and its loop answers (this runs on it); the last measured loop lag."""
        lag = self.metrics.event_loop.last_lag if self.metrics is not None else 0.0
        return True, {"broker_state": self.state.name, "event_loop_lag_ms": round(lag * 1000, 3)}

    def ready(self) -> tuple[bool, dict[str, object]]:
        """Logs loaded, listeners bound, the broker registered (and, with a quorum, unfenced)."""
        server = self.server
        listening = server is not None and bool(server.bound_endpoints)
        ok = self.state == BrokerState.RUNNING and self.services is not None and listening and self.registered
        detail: dict[str, object] = {"broker_state": self.state.name}
        if server is not None:
            detail["listeners"] = [str(e) for e in server.bound_endpoints]
        if self.services is not None:
            detail["pending_partitions"] = self.services.replica_manager.pending_hosting
        return ok, detail

    # -- collect-time sources --

    def _exposition(self) -> MetricsExposition:
        from kbroker.metrics.exposition import MetricsExposition

        exposition = MetricsExposition(self.metrics or BrokerMetrics())
        for source in (self._broker_state, self._logs, self._replica_manager, self._network, self._groups,
                       self._share_partitions, self._quotas, self._replication_quotas):
            exposition.add_source(source)
        return exposition

    def _broker_state(self) -> Iterator[Metric]:
        yield gauge("kafka_server_kafkaserver_brokerstate",
                    "Kafka's BrokerState: 1 starting, 3 running, 7 shutting down", samples=[((), self.state.value)])

    def _logs(self) -> Iterator[Metric]:
        if self.services is None:
            return
        logs = sorted(((lg.topic, lg.partition, lg) for lg in self.services.log_manager.all_logs()),
                      key=lambda x: (x[0], x[1]))
        labels = ("topic", "partition")
        yield gauge("kafka_log_log_size", "Bytes of the partition's log (every segment)", labels,
                    (((t, str(p)), lg.size_in_bytes) for t, p, lg in logs))
        yield gauge("kafka_log_log_numlogsegments", "Segments of the partition's log", labels,
                    (((t, str(p)), lg.num_segments) for t, p, lg in logs))
        yield gauge("kafka_log_log_logstartoffset", "The partition's log start offset", labels,
                    (((t, str(p)), lg.log_start_offset) for t, p, lg in logs))
        yield gauge("kafka_log_log_logendoffset", "The partition's log end offset", labels,
                    (((t, str(p)), lg.log_end_offset) for t, p, lg in logs))

    def _replica_manager(self) -> Iterator[Metric]:
        if self.services is None:
            return
        rm = self.services.replica_manager
        partitions = rm.partitions()
        # Kafka's ReplicaManager gauges over the leaders (Partition.isUnderReplicated & co.).
        under = sum(1 for p in partitions if p.is_under_replicated)
        under_min = sum(1 for p in partitions if p.is_under_min_isr)
        at_min = sum(1 for p in partitions if p.is_at_min_isr)
        leaders = sum(1 for p in partitions if not p.is_offline)
        # allPartitions: online (led or followed) and offline ones.
        hosted = len({p.key for p in partitions} | set(rm.followers) | rm.offline)
        topics = self.services.metadata.topics()
        for name, doc, value in (
            ("kafka_server_replicamanager_partitioncount", "Partitions hosted on this broker", hosted),
            ("kafka_server_replicamanager_leadercount", "Partitions this broker leads", leaders),
            ("kafka_server_replicamanager_underreplicatedpartitions",
             "Led partitions whose ISR is smaller than their replica set", under),
            ("kafka_server_replicamanager_underminisrpartitioncount",
             "Led partitions whose ISR is below min.insync.replicas", under_min),
            ("kafka_server_replicamanager_atminisrpartitioncount",
             "Led partitions whose ISR is exactly min.insync.replicas", at_min),
            ("kafka_server_replicamanager_offlinereplicacount",
             "Replicas on this broker whose log directory failed", len(rm.offline)),
            ("kafka_controller_kafkacontroller_offlinepartitionscount",
             "Partitions without a leader (on one node: this broker's offline ones)", len(rm.offline)),
            ("kafka_controller_kafkacontroller_activecontrollercount",
             "1 on the active controller (a single node is its own controller)", 1),
            ("kafka_controller_kafkacontroller_globaltopiccount", "Topics in the metadata image", len(topics)),
            ("kafka_controller_kafkacontroller_globalpartitioncount", "Partitions in the metadata image",
             sum(t.num_partitions for t in topics)),
        ):
            yield gauge(name, doc, samples=[((), value)])
        yield from self._partition_gauges()
        yield from self._fetcher_lag()

    def _partition_gauges(self) -> Iterator[Metric]:
        """Kafka's per-partition gauges (`kafka.cluster:type=Partition,name=...,topic=..,partition=..`),
        for every partition hosted here: 0 on a follower except LastStableOffsetLag."""
        assert self.services is not None
        rm = self.services.replica_manager
        hosted = sorted([*rm.partitions(), *(p for k in rm.followers
                                             if (p := rm.follower_partition(*k)) is not None)],
                        key=lambda p: p.key)
        labels = ("topic", "partition")

        def family(name: str, doc: str, value: Callable[[Partition], int]) -> Metric:
            return gauge(f"kafka_cluster_partition_{name}", doc, labels,
                         (((p.topic, str(p.partition)), value(p)) for p in hosted))

        yield family("underreplicated", "1 if led here and the ISR is smaller than the replica set",
                     lambda p: int(p.is_under_replicated))
        yield family("underminisr", "1 if led here and the ISR is below min.insync.replicas",
                     lambda p: int(p.is_under_min_isr))
        yield family("atminisr", "1 if led here and the ISR is exactly min.insync.replicas",
                     lambda p: int(p.is_at_min_isr))
        yield family("replicascount", "Replicas of the partition (0 unless led here)",
                     lambda p: len(p.replicas) if p.is_leader else 0)
        yield family("insyncreplicascount", "In-sync replicas of the partition (0 unless led here)",
                     lambda p: p.isr_size if p.is_leader else 0)
        yield family("laststableoffsetlag", "High watermark minus last stable offset (open transactions)",
                     lambda p: 0 if p.is_offline else max(0, p.high_watermark - p.last_stable_offset))

    def _fetcher_lag(self) -> Iterator[Metric]:
        """Kafka's `ReplicaFetcherManager` MaxLag (clientId=Replica) and `FetcherLagMetrics` ConsumerLag
        per followed partition (clientId = the fetcher's thread name, ReplicaFetcherThread-<n>-<leader>)."""
        assert self.services is not None
        manager = self.services.replica_manager.replica_fetcher_manager
        yield gauge("kafka_server_replicafetchermanager_maxlag",
                    "Largest lag (leader HW - fetch offset, in records) of any partition this broker follows",
                    ["clientId"], [(("Replica",), manager.max_lag)])
        samples = sorted(((f.name, t, str(p)), lag) for f in list(manager.fetchers.values())
                         for (t, p), lag in f.lag.items())
        yield gauge("kafka_server_fetcherlagmetrics_consumerlag",
                    "Lag of a followed partition: the leader's HW minus the next fetch offset",
                    ["clientId", "topic", "partition"], samples)
        fetchers = sorted(manager.fetchers.values(), key=lambda f: f.name)
        tags = [(f.name, f.broker_host, str(f.broker_port)) for f in fetchers]
        yield counter("kafka_server_fetcherstats_requests",
                      "Fetch requests a replica fetcher had answered (Kafka's FetcherStats RequestsPerSec)",
                      ["clientId", "brokerHost", "brokerPort"],
                      [(t, f.fetch_requests) for t, f in zip(tags, fetchers, strict=True)])
        yield counter("kafka_server_fetcherstats_bytes",
                      "Bytes of a leader's records a replica fetcher appended (Kafka's FetcherStats BytesPerSec)",
                      ["clientId", "brokerHost", "brokerPort"],
                      [(t, f.bytes_fetched) for t, f in zip(tags, fetchers, strict=True)])
        yield gauge("kbroker_replica_fetcher_count", "Replica fetchers (connections to leaders) running",
                    samples=[((), len(manager.fetchers))])

    def _quotas(self) -> Iterator[Metric]:
        """Kafka's client quota sensors (`kafka.server:type=Produce|Fetch|Request,user=..,client-id=..`):
        the measured rate and the average throttle time of each client that recorded under a quota."""
        quotas = self.services.quotas if self.services is not None else None
        if quotas is None:
            return
        for manager, rate_name, rate_doc in (
                (quotas.produce, "byte_rate", "Produced bytes per second, per quota user/client-id"),
                (quotas.fetch, "byte_rate", "Fetched bytes per second, per quota user/client-id"),
                (quotas.request, "request_time", "Request handling time, percent of the event loop")):
            prefix = f"kafka_server_{manager.quota_type.lower()}_"
            now = manager.clock()
            sensors = list(manager.sensors.values())
            yield gauge(prefix + rate_name, rate_doc, ["user", "client_id"],
                        [(s.tags, s.rate.measure(now)) for s in sensors if s.rate is not None])
            yield gauge(prefix + "throttle_time", "Average throttle time (ms) given to the client",
                        ["user", "client_id"], [(s.tags, s.throttle_time_avg) for s in sensors])

    def _replication_quotas(self) -> Iterator[Metric]:
        """KIP-73's sensors (`kafka.server:type=LeaderReplication|FollowerReplication`, attribute
        `byte-rate`): bytes per second of throttled partitions replicated, measured over the quota window."""
        if self.services is None:
            return
        rm = self.services.replica_manager
        for quota, doc in ((rm.leader_quota, "Bytes/s of throttled partitions sent to followers (leader quota)"),
                           (rm.replica_fetcher_manager.quota,
                            "Bytes/s of throttled partitions fetched from leaders (follower quota)")):
            if isinstance(quota, ReplicationQuotaManager):
                yield gauge(f"kafka_server_{quota.replication_type.lower()}_byte_rate", doc,
                            samples=[((), quota.byte_rate())])

    def _network(self) -> Iterator[Metric]:
        server = self.server
        if server is None:
            return
        per_listener = Counter(c.listener_name for c in server.connections)
        for endpoint in server.bound_endpoints:
            per_listener.setdefault(endpoint.name, 0)
        yield gauge("kafka_server_socket_server_metrics_connection_count", "Open connections, per listener",
                    ["listener"], (((name,), n) for name, n in sorted(per_listener.items())))
        yield gauge("kafka_network_requestchannel_requestqueuesize",
                    "Complete requests waiting for a queued.max.requests slot",
                    samples=[((), sum(c.waiting_requests for c in server.connections))])
        yield gauge("kafka_network_socketserver_memorypoolused",
                    "Bytes of queued.max.request.bytes held by requests being received or handled",
                    samples=[((), server.memory_pool.used)])
        frames = server.frame_buffers
        yield gauge("kbroker_network_frame_buffers_pooled_bytes",
                    "Bytes of the buffers kept to read large request frames into again (in use or not)",
                    samples=[((), frames.pooled_bytes)])
        yield counter("kbroker_network_frame_buffers_reused",
                      "Request frames of 64 KiB or more read into a pooled buffer again",
                      samples=[((), frames.reused)])
        yield counter("kbroker_network_frame_buffers_allocated",
                      "Request frames of 64 KiB or more that needed a new buffer",
                      samples=[((), frames.allocated)])

    def _groups(self) -> Iterator[Metric]:
        services = self.services
        if services is None or services.group_coordinator.runtime is None:
            return
        classic: Counter[str] = Counter()
        consumer: Counter[str] = Counter()
        share: Counter[str] = Counter()
        offsets: list[tuple[str, str, int, int]] = []
        for _partition, shard in services.group_coordinator.runtime.active_shards():
            classic.update(str(g.state) for g in shard.groups.values())
            consumer.update(str(g.state) for g in shard.consumer_groups.values())
            share.update(str(g.state) for g in shard.group_manager.share_groups.values())
            for group in shard.offsets.groups():
                for (topic, partition), value in shard.offsets.group_offsets(group).items():
                    offsets.append((group, topic, partition, value.offset))
        prefix = "kafka_coordinator_group_groupmetadatamanager_"
        yield gauge(prefix + "numgroups", "Groups on this coordinator (both protocols)",
                    samples=[((), sum(classic.values()) + sum(consumer.values()))])
        for state in ("PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Empty"):
            yield gauge(prefix + f"numgroups{state.lower()}", f"Classic groups in state {state}",
                        samples=[((), classic.get(state, 0))])
        yield gauge(prefix + "numoffsets", "Committed offsets on this coordinator", samples=[((), len(offsets))])
        yield gauge("kafka_server_group_coordinator_metrics_group_count", "Groups per protocol", ["protocol"],
                    [(("classic",), sum(classic.values())), (("consumer",), sum(consumer.values())),
                     (("share",), sum(share.values()))])
        yield gauge("kafka_server_group_coordinator_metrics_share_group_count", "Share groups (KIP-932) per state",
                    ["state"], (((s.lower(),), share.get(s, 0)) for s in ("Empty", "Stable", "Dead")))
        yield gauge("kafka_server_group_coordinator_metrics_consumer_group_count",
                    "Consumer-protocol (KIP-848) groups per state", ["state"],
                    (((s.lower(),), consumer.get(s, 0))
                     for s in ("Empty", "Assigning", "Reconciling", "Stable", "Dead")))
        yield from self._lag(offsets)

    def _share_partitions(self) -> Iterator[Metric]:
        """Kafka's SharePartitionMetrics of the share-partitions this broker leads (labels group, topic,
        partition): the records in flight (start to end offset) and the acquisition locks that timed out."""
        services = self.services
        manager = services.share_partition_manager if services is not None else None
        if services is None or manager is None:
            return
        rows: list[tuple[tuple[str, str, str], int, int]] = []
        for (group, tid, p), sp in sorted(manager.partitions.items(), key=lambda kv: (kv[0][0], str(kv[0][1]), kv[0][2])):
            info = services.metadata.topic_by_id(tid)
            if info is not None:
                rows.append(((group, info.name, str(p)), sp.in_flight(), manager.lock_timeouts.get((group, tid, p), 0)))
        labels = ("group", "topic", "partition")
        yield gauge("kafka_server_sharepartitionmetrics_inflightmessagecount",
                    "Records in flight in the share-partition, from its start offset to its end offset",
                    labels, ((k, n) for k, n, _t in rows))
        yield counter("kafka_server_sharepartitionmetrics_acquisitionlocktimeout",
                      "Acquisition locks of the share-partition that timed out (Kafka's AcquisitionLockTimeoutPerSec)",
                      labels, ((k, t) for k, _n, t in rows))

    def _lag(self, offsets: list[tuple[str, str, int, int]]) -> Iterator[Metric]:
        assert self.services is not None
        rm = self.services.replica_manager
        lags: list[tuple[str, str, int, int, int]] = []
        for group, topic, partition, committed in offsets:
            p = rm.get_partition(topic, partition)
            if p is not None:
                lags.append((group, topic, partition, committed, max(0, p.high_watermark - committed)))
        lags.sort()
        per_group: Counter[tuple[str, str]] = Counter()
        for group, topic, _partition, _committed, lag in lags:
            per_group[(group, topic)] += lag
        labels = ("consumergroup", "topic", "partition")
        if len(lags) <= MAX_LAG_SERIES:
            yield gauge("kafka_consumergroup_current_offset", "Committed offset of the group on the partition",
                        labels, (((g, t, str(p)), c) for g, t, p, c, _lag in lags))
            yield gauge("kafka_consumergroup_lag", "High watermark minus the group's committed offset",
                        labels, (((g, t, str(p)), lag) for g, t, p, _c, lag in lags))
        yield gauge("kafka_consumergroup_lag_sum", "Lag of the group summed over the topic's partitions",
                    ("consumergroup", "topic"), ((k, v) for k, v in sorted(per_group.items())))
