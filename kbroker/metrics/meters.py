"""The meters the broker records into: cheap on the hot paths, read only at scrape time.

Kafka keeps Yammer meters and histograms in a registry (BrokerTopicStats, RequestMetrics,
ReplicaManager's, LogFlushStats); kbroker keeps the same quantities as plain counters on slotted
objects, bound once (a `Partition` holds its topic's `TopicMetrics`, a request its API's
`RequestMetrics`), so that recording is an attribute increment and a histogram observation one
`bisect`. Rates are left to Prometheus (`rate()` over the `_total` counters), where Kafka's Yammer
meters computed one-, five- and fifteen-minute rates in the broker.

Times are recorded in seconds (the difference of two `time.monotonic()` readings) and exposed in
milliseconds, as Kafka's `...TimeMs` histograms are.

Threads: everything here is updated on the event loop, except `LOG_FLUSH_STATS` (fsyncs also run on
the background executor), which takes a lock. Imports nothing of kbroker.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

# Bucket upper bounds (inclusive, Prometheus' `le`) of every time histogram, in milliseconds:
# from a tenth of a millisecond (a request answered on the loop) to 30 s (request.timeout.ms).
TIME_BUCKETS_MS: tuple[float, ...] = (
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0,
    30000.0,
)
_TIME_BUCKETS_S: tuple[float, ...] = tuple(b / 1000 for b in TIME_BUCKETS_MS)

# Highest API version a per-version request counter holds (Kafka's highest today is 18, Fetch).
MAX_TRACKED_VERSION = 31
# API keys are below this (Kafka's highest today is 92); larger ones are counted in the last slot.
MAX_API_KEY = 128


class Histogram:
    """Bucket counts (not cumulative: `counts[i]` counts observations in bucket i, the last one above
    every bound) and their sum, in seconds."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...] = _TIME_BUCKETS_S) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect_left(self.bounds, seconds)] += 1
        self.sum += seconds

    @property
    def count(self) -> int:
        return sum(self.counts)

    def snapshot(self) -> tuple[list[int], float]:
        """(bucket counts, sum): a consistent copy to expose."""
        return list(self.counts), self.sum


class LockedHistogram(Histogram):
    """A histogram observed from several threads (the log flush time: fsyncs also run on workers)."""

    __slots__ = ("_lock",)

    def __init__(self, bounds: tuple[float, ...] = _TIME_BUCKETS_S) -> None:
        super().__init__(bounds)
        self._lock = threading.Lock()

    def observe(self, seconds: float) -> None:
        with self._lock:
            self.counts[bisect_left(self.bounds, seconds)] += 1
            self.sum += seconds

    def snapshot(self) -> tuple[list[int], float]:
        with self._lock:
            return list(self.counts), self.sum


class TopicMetrics:
    """Kafka's BrokerTopicMetrics for one topic (`kafka.server:type=BrokerTopicMetrics,topic=...`).

    Updated where Kafka updates them: bytes and messages in, and the produce request counts, per
    partition appended (ReplicaManager.appendToLocalLog); bytes out per partition read for a consumer
    fetch; the fetch request counts per partition fetched.
    """

    __slots__ = (
        "topic", "bytes_in", "messages_in", "bytes_out", "bytes_rejected", "total_produce_requests",
        "failed_produce_requests", "total_fetch_requests", "failed_fetch_requests",
        "total_share_fetch_requests", "failed_share_fetch_requests",
        "total_share_acknowledgement_requests", "failed_share_acknowledgement_requests",
    )

    FIELDS = (
        "bytes_in", "messages_in", "bytes_out", "bytes_rejected", "total_produce_requests",
        "failed_produce_requests", "total_fetch_requests", "failed_fetch_requests",
        "total_share_fetch_requests", "failed_share_fetch_requests",
        "total_share_acknowledgement_requests", "failed_share_acknowledgement_requests",
    )

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.bytes_in = 0
        self.messages_in = 0
        self.bytes_out = 0
        self.bytes_rejected = 0
        self.total_produce_requests = 0
        self.failed_produce_requests = 0
        self.total_fetch_requests = 0
        self.failed_fetch_requests = 0
        # KIP-932, per topic of a ShareFetch / ShareAcknowledge (Kafka's SharePartitionManager and
        # ShareFetch mark them once per topic of the request, kbroker.api._share_metrics).
        self.total_share_fetch_requests = 0
        self.failed_share_fetch_requests = 0
        self.total_share_acknowledgement_requests = 0
        self.failed_share_acknowledgement_requests = 0

    def values(self) -> tuple[int, ...]:
        return tuple(getattr(self, f) for f in self.FIELDS)


class RequestMetrics:
    """Kafka's RequestMetrics for one API: requests per version, and the six time histograms.

    A request's life, as Kafka splits it (`RequestChannel.Request.updateRequestMetrics`):
    request queue (complete frame received -> handed to its handler: waiting for a
    `queued.max.requests` slot), local (the handler's synchronous work), remote (a delayed operation
    waiting in a purgatory: acks=all, Fetch long polling, a JoinGroup), response queue (answer ready
    -> its turn to be written: responses leave in request order), send (the write into the
    transport), total (all of it).
    """

    __slots__ = ("api_key", "requests", "request_queue_time", "local_time", "remote_time",
                 "response_queue_time", "response_send_time", "total_time")

    def __init__(self, api_key: int) -> None:
        self.api_key = api_key
        self.requests = [0] * (MAX_TRACKED_VERSION + 1)
        self.request_queue_time = Histogram()
        self.local_time = Histogram()
        self.remote_time = Histogram()
        self.response_queue_time = Histogram()
        self.response_send_time = Histogram()
        self.total_time = Histogram()

    def record(self, received: float, dispatched: float, local_done: float, completed: float,
               flushed: float, sent: float) -> None:
        """One answered request: its six `time.monotonic()` readings, in order."""
        bounds = _TIME_BUCKETS_S
        # Queue and remote times are zero for most requests (no slot waited for, answered at once):
        # the first bucket, without a search.
        v = dispatched - received
        if v:
            h = self.request_queue_time
            h.counts[bisect_left(bounds, v)] += 1
            h.sum += v
        else:
            self.request_queue_time.counts[0] += 1
        h = self.local_time
        v = local_done - dispatched
        h.counts[bisect_left(bounds, v)] += 1
        h.sum += v
        v = completed - local_done
        if v:
            h = self.remote_time
            h.counts[bisect_left(bounds, v)] += 1
            h.sum += v
        else:
            self.remote_time.counts[0] += 1
        h = self.response_queue_time
        v = flushed - completed
        h.counts[bisect_left(bounds, v)] += 1
        h.sum += v
        h = self.response_send_time
        v = sent - flushed
        h.counts[bisect_left(bounds, v)] += 1
        h.sum += v
        h = self.total_time
        v = sent - received
        h.counts[bisect_left(bounds, v)] += 1
        h.sum += v

    def histograms(self) -> Iterator[tuple[str, Histogram]]:
        """(Kafka's MBean name, histogram) of each time."""
        yield "RequestQueueTimeMs", self.request_queue_time
        yield "LocalTimeMs", self.local_time
        yield "RemoteTimeMs", self.remote_time
        yield "ResponseQueueTimeMs", self.response_queue_time
        yield "ResponseSendTimeMs", self.response_send_time
        yield "TotalTimeMs", self.total_time


# Kafka's MetricConfig defaults (metrics.num.samples, metrics.sample.window.ms): a Meter's rate is the
# events of the live samples over the time they cover (at least all but one full window).
METRICS_NUM_SAMPLES = 2
METRICS_SAMPLE_WINDOW_MS = 30000


class ListenerMetrics:
    """Kafka's socket-server-metrics of one listener: connections opened (`connection-creation-total`
    and `connection-creation-rate`, the Meter Kafka's Selector records per listener) and closed."""

    __slots__ = ("listener", "connection_creation", "connection_close", "_samples")

    def __init__(self, listener: str) -> None:
        self.listener = listener
        self.connection_creation = 0
        self.connection_close = 0
        self._samples: list[list[int]] = []  # [window start ms, connections], oldest first

    def record_connection_creation(self, now_ms: int) -> None:
        self.connection_creation += 1
        if not self._samples or now_ms - self._samples[-1][0] >= METRICS_SAMPLE_WINDOW_MS:
            self._samples.append([now_ms, 0])
            del self._samples[:-METRICS_NUM_SAMPLES]
        self._samples[-1][1] += 1

    def connection_creation_rate(self, now_ms: int) -> float:
        """Connections per second over the live samples (Kafka's `Rate` over a `WindowedCount`)."""
        live = [s for s in self._samples if now_ms - s[0] < METRICS_NUM_SAMPLES * METRICS_SAMPLE_WINDOW_MS]
        if not live:
            return 0.0
        elapsed = max(now_ms - live[0][0], (METRICS_NUM_SAMPLES - 1) * METRICS_SAMPLE_WINDOW_MS)
        return sum(s[1] for s in live) * 1000.0 / max(elapsed, 1)


@dataclass
class EventLoopMetrics:
    """kbroker's analogue of Kafka's network-processor idle ratio: the event loop's health.

    `lag` holds how late a timer scheduled every `interval` fired (a loop busy with other work, or
    blocked, runs it late); `idle_ratio` is the share of wall time the loop's thread was not on the
    CPU over the last window (Kafka's NetworkProcessorAvgIdlePercent, 0..1). Fed by
    `kbroker.net.loop_monitor.EventLoopMonitor`.
    """

    lag: Histogram = field(default_factory=Histogram)
    last_lag: float = 0.0
    max_lag: float = 0.0  # the largest lag since the last scrape (reset by the collector)
    idle_ratio: float = 1.0


@dataclass
class GroupCoordinatorMetrics:
    """Rebalances started, per protocol (Kafka's group-coordinator-metrics group-rebalance-count and
    consumer-group-rebalance-count). Process-wide, like Kafka's static coordinator metrics."""

    classic_rebalances: int = 0
    consumer_rebalances: int = 0
    share_rebalances: int = 0  # share-group-rebalance-count: a share group's epoch bumped by a heartbeat


# Kafka's AcknowledgeType ids and the `ackType` tag values of RecordAcknowledgementsPerSec.
ACK_TYPE_NAMES: Mapping[int, str] = {1: "Accept", 2: "Release", 3: "Reject", 4: "Renew"}


class WindowedStat:
    """Kafka's Avg and Max over a sensor's samples (metrics.num.samples windows of
    metrics.sample.window.ms): NaN when no live sample holds a value, as Kafka reports them."""

    __slots__ = ("_samples",)

    def __init__(self) -> None:
        self._samples: list[list[float]] = []  # [window start ms, count, sum, max], oldest first

    def record(self, value: float, now_ms: int) -> None:
        if not self._samples or now_ms - self._samples[-1][0] >= METRICS_SAMPLE_WINDOW_MS:
            self._samples.append([now_ms, 0, 0.0, float("-inf")])
            del self._samples[:-METRICS_NUM_SAMPLES]
        s = self._samples[-1]
        s[1] += 1
        s[2] += value
        s[3] = max(s[3], value)

    def _live(self, now_ms: int) -> list[list[float]]:
        return [s for s in self._samples if now_ms - s[0] < METRICS_NUM_SAMPLES * METRICS_SAMPLE_WINDOW_MS and s[1]]

    def avg(self, now_ms: int) -> float:
        live = self._live(now_ms)
        count = sum(s[1] for s in live)
        return sum(s[2] for s in live) / count if count else float("nan")

    def max(self, now_ms: int) -> float:
        live = self._live(now_ms)
        return max(s[3] for s in live) if live else float("nan")


@dataclass
class ShareGroupMetrics:
    """Kafka's `kafka.server:type=ShareGroupMetrics` (records acknowledged per `ackType`, the time to
    load a share-partition's state) and the share coordinator's `share-coordinator-metrics` write count.
    Process-wide, like Kafka's broker-level share metrics; recorded by kbroker.coord's share-partition
    manager and share coordinator."""

    record_acknowledgements: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ACK_TYPE_NAMES.values(), 0))
    partition_load_time: Histogram = field(default_factory=Histogram)
    share_coordinator_writes: int = 0
    # share-coordinator-metrics write-latency-avg / write-latency-max: a WriteShareGroupState from its
    # start to its records committed on __share_group_state (ms).
    share_coordinator_write_latency: WindowedStat = field(default_factory=WindowedStat)
    # share-coordinator-metrics last-pruned-offset{topic, partition}: where each __share_group_state
    # partition was last pruned.
    last_pruned_offsets: dict[tuple[str, int], int] = field(default_factory=dict)

    def record_acknowledgement(self, ack_type: int, records: int) -> None:
        """Kafka's recordAcknowledgement: a batch acknowledged with one type counts its records, a batch
        with a type per offset counts one per offset."""
        name = ACK_TYPE_NAMES.get(ack_type)
        if name is not None:
            self.record_acknowledgements[name] += records


class BrokerMetrics:
    """Every meter one broker records into; built by the wiring, handed to net/ and replica/.

    `api_names` maps API keys to Kafka's request names (`Produce`, `Fetch`...) for the `request`
    label; the wiring takes them from kbroker.protocol.
    """

    def __init__(self, api_names: Mapping[int, str] | None = None) -> None:
        self.api_names: Mapping[int, str] = dict(api_names or {})
        self.topics: dict[str, TopicMetrics] = {}
        # Totals of topics whose meters were removed (the topic was deleted): the broker-wide
        # counters (BrokerTopicMetrics without a topic) must never go down.
        self.retired = [0] * len(TopicMetrics.FIELDS)
        self.requests: list[RequestMetrics | None] = [None] * MAX_API_KEY
        self.listeners: dict[str, ListenerMetrics] = {}
        self.event_loop = EventLoopMetrics()
        # ReplicaManager's IsrShrinksPerSec / IsrExpandsPerSec (an ISR change the controller committed,
        # counted by the leader when it applies the answer) and FailedIsrUpdatesPerSec (an
        # AlterPartition answered with an error; undelivered requests are retried, not counted).
        self.isr_shrinks = 0
        self.isr_expands = 0
        self.failed_isr_updates = 0
        # BrokerTopicMetrics ReplicationBytesInPerSec / ReplicationBytesOutPerSec (broker-wide only, as in
        # Kafka): record bytes a follower appended from its leaders, and that followers fetched from here.
        self.replication_bytes_in = 0
        self.replication_bytes_out = 0

    def topic(self, topic: str) -> TopicMetrics:
        """The topic's meters, created at first use (a partition binds them when it is hosted)."""
        stats = self.topics.get(topic)
        if stats is None:
            stats = self.topics[topic] = TopicMetrics(topic)
        return stats

    def remove_topic(self, topic: str) -> None:
        """Kafka's BrokerTopicStats.removeMetrics: the topic was deleted."""
        stats = self.topics.pop(topic, None)
        if stats is not None:
            self.retired = [a + b for a, b in zip(self.retired, stats.values(), strict=True)]

    def totals(self) -> tuple[int, ...]:
        """The broker-wide BrokerTopicMetrics (all topics, deleted ones included)."""
        out = list(self.retired)
        for stats in self.topics.values():
            for i, v in enumerate(stats.values()):
                out[i] += v
        return tuple(out)

    def request(self, api_key: int) -> RequestMetrics:
        """The API's request meters (one list index on the request path once created)."""
        slot = api_key if 0 <= api_key < MAX_API_KEY else MAX_API_KEY - 1
        stats = self.requests[slot]
        if stats is None:
            stats = self.requests[slot] = RequestMetrics(slot)
        return stats

    def listener(self, name: str) -> ListenerMetrics:
        stats = self.listeners.get(name)
        if stats is None:
            stats = self.listeners[name] = ListenerMetrics(name)
        return stats


# Kafka's LogFlushStats.logFlushTimer: one process-wide timer, fed by every log's flush.
LOG_FLUSH_STATS = LockedHistogram()
# Kafka's group coordinator rebalance counters.
GROUP_COORDINATOR_METRICS = GroupCoordinatorMetrics()
# Kafka's ShareGroupMetrics and share-coordinator-metrics.
SHARE_GROUP_METRICS = ShareGroupMetrics()
