"""Replication quotas (KIP-73), as Kafka's `ReplicationQuotaManager` and the throttle parts of its
`TopicConfigHandler` / `BrokerConfigHandler`.

- Rates: `leader.replication.throttled.rate` and `follower.replication.throttled.rate`, bytes per
  second, dynamic broker configs (per broker, else the cluster-wide default; unset: Long.MAX_VALUE, no
  throttle). Measured as Kafka's client quotas are: a `Rate` over `replication.quota.window.num`
  samples of `replication.quota.window.size.seconds` (cluster/quotas.py's `Rate`), checked against
  the quota without recording (`isQuotaExceeded`); recorded with no check (`record`).
- Throttled replicas: the topic configs `leader.replication.throttled.replicas` and
  `follower.replication.throttled.replicas`, `*` (every replica of the topic) or a list of
  `partition:broker`; a broker throttles the partitions whose entry names itself (Kafka's
  `parseThrottledPartitions`). `kafka-reassign-partitions --throttle` sets both rates on the brokers
  taking part and both lists on the topics moved (leader: the current replicas, follower: the new
  ones), and `--verify` removes them once the reassignment is done.
- Metrics: `kafka.server:type=LeaderReplication` / `type=FollowerReplication`, attribute
  `byte-rate` (the sensor's Rate). Kafka has no throttle-time metric for replication quotas (a
  throttled follower is not told: its fetch comes back empty, or is not sent).

`ReplicationQuotas` is a metadata publisher: each image's broker configs set the two rates, each
changed topic config its throttled partitions. Sans-IO: values and a clock in.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from kbroker.cluster.quotas import QuotaWindow, Rate
from kbroker.metadata.delta import MetadataDelta
from kbroker.metadata.image import ConfigResourceType, MetadataImage

LEADER_REPLICATION_THROTTLED_RATE = "leader.replication.throttled.rate"
FOLLOWER_REPLICATION_THROTTLED_RATE = "follower.replication.throttled.rate"
LEADER_REPLICATION_THROTTLED_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICATION_THROTTLED_REPLICAS = "follower.replication.throttled.replicas"
UNBOUNDED_RATE = 9223372036854775807  # Long.MAX_VALUE: QuotaConfig's default replication throttled rate
LEADER_REPLICATION, FOLLOWER_REPLICATION = "LeaderReplication", "FollowerReplication"
ALL_REPLICAS = -1  # Kafka's ReplicationQuotaManager.AllReplicas marker: every partition of the topic


def parse_throttled_partitions(value: str, broker_id: int) -> list[int]:
    """The partitions of a `*.replication.throttled.replicas` value throttled on `broker_id`:
    `[ALL_REPLICAS]` for `*`, else the partitions of the `partition:broker` entries naming this broker."""
    value = value.strip()
    if value == "*":
        return [ALL_REPLICAS]
    out: list[int] = []
    for entry in value.split(","):
        parts = entry.strip().split(":")
        if len(parts) != 2:
            continue
        try:
            partition, broker = int(parts[0]), int(parts[1])
        except ValueError:
            continue
        if broker == broker_id:
            out.append(partition)
    return out


class ReplicationQuotaManager:
    """One replication quota (`LeaderReplication` or `FollowerReplication`): the byte rate, its bound,
    and the throttled partitions by topic."""

    def __init__(self, replication_type: str, window: QuotaWindow, clock: Callable[[], int]) -> None:
        self.replication_type = replication_type
        self.window = window
        self.clock = clock
        self.quota: float = float(UNBOUNDED_RATE)
        self.rate = Rate(window)
        self.throttled_partitions: dict[str, frozenset[int]] = {}

    def update_quota(self, bytes_per_second: float) -> None:
        self.quota = bytes_per_second

    def is_quota_exceeded(self) -> bool:
        if self.quota >= UNBOUNDED_RATE:
            return False
        return self.rate.measure(self.clock()) > self.quota

    def record(self, value: int) -> None:
        if value > 0:
            self.rate.record(float(value), self.clock())

    def byte_rate(self) -> float:
        return self.rate.measure(self.clock())

    def is_throttled(self, topic: str, partition: int) -> bool:
        partitions = self.throttled_partitions.get(topic)
        return partitions is not None and (partition in partitions or ALL_REPLICAS in partitions)

    def mark_throttled(self, topic: str, partitions: Iterable[int]) -> None:
        self.throttled_partitions[topic] = frozenset(partitions)

    def remove_throttle(self, topic: str) -> None:
        self.throttled_partitions.pop(topic, None)


def _rate(value: str | None) -> float:
    if value is None:
        return float(UNBOUNDED_RATE)
    try:
        return float(int(value))
    except ValueError:
        return float(UNBOUNDED_RATE)


class ReplicationQuotas:
    """The leader and follower quotas of one broker, kept up to date from the metadata image."""

    name = "ReplicationQuotas"

    def __init__(self, node_id: int, window: QuotaWindow, clock: Callable[[], int]) -> None:
        self.node_id = node_id
        self.leader = ReplicationQuotaManager(LEADER_REPLICATION, window, clock)
        self.follower = ReplicationQuotaManager(FOLLOWER_REPLICATION, window, clock)
        self._loaded = False

    def on_metadata_update(self, delta: MetadataDelta, image: MetadataImage, manifest: object) -> None:
        changed = delta.changed_configs()
        if not self._loaded or any(r.type == ConfigResourceType.BROKER for r in changed):
            self.update_rates(image.configs.broker_config(self.node_id), image.configs.cluster_broker_config())
        if not self._loaded:
            topics = [r.name for r in image.configs.configs if r.type == ConfigResourceType.TOPIC]
        else:
            topics = [r.name for r in changed if r.type == ConfigResourceType.TOPIC]
        for topic in topics:
            self.update_topic(topic, image.configs.topic_config(topic))
        self._loaded = True

    def update_rates(self, per_broker: Mapping[str, str], cluster_default: Mapping[str, str]) -> None:
        """Kafka's `BrokerConfigHandler`: this broker's value, else the `<default>` broker's."""
        for manager, key in ((self.leader, LEADER_REPLICATION_THROTTLED_RATE),
                             (self.follower, FOLLOWER_REPLICATION_THROTTLED_RATE)):
            manager.update_quota(_rate(per_broker.get(key, cluster_default.get(key))))

    def update_topic(self, topic: str, configs: Mapping[str, str]) -> None:
        """Kafka's `TopicConfigHandler.updateThrottledList` for both lists."""
        for manager, key in ((self.leader, LEADER_REPLICATION_THROTTLED_REPLICAS),
                             (self.follower, FOLLOWER_REPLICATION_THROTTLED_REPLICAS)):
            value = configs.get(key)
            if value:
                manager.mark_throttled(topic, parse_throttled_partitions(value, self.node_id))
            else:
                manager.remove_throttle(topic)
