"""KIP-73 replication quotas on a fake clock: the throttled-replica lists, the rate check, the image
publisher (per-broker rate over the cluster default), and the fetcher's `shouldFollowerThrottle`."""

from __future__ import annotations

from kbroker.cluster.quotas import QuotaWindow
from kbroker.cluster.replication_quotas import (
    ALL_REPLICAS,
    UNBOUNDED_RATE,
    ReplicationQuotaManager,
    ReplicationQuotas,
    parse_throttled_partitions,
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def test_parse_throttled_partitions_keeps_this_brokers_entries() -> None:
    assert parse_throttled_partitions("*", 3) == [ALL_REPLICAS]
    assert parse_throttled_partitions("0:1,0:2,1:2,2:3", 2) == [0, 1]
    assert parse_throttled_partitions("0:1, 1:1 ,bad,3:x", 1) == [0, 1]
    assert parse_throttled_partitions("", 1) == []


def test_quota_exceeded_once_the_windowed_rate_passes_the_bound() -> None:
    clock = FakeClock()
    q = ReplicationQuotaManager("LeaderReplication", QuotaWindow(num_samples=3, window_ms=1000), clock)
    q.record(10_000)
    assert not q.is_quota_exceeded()  # no bound yet: Long.MAX_VALUE
    q.update_quota(1000)
    # 10 000 bytes over the minimum window (num-1 = 2 s): 5 000 B/s > 1 000 B/s.
    assert q.byte_rate() == 5000 and q.is_quota_exceeded()
    clock.now += 3000  # the samples expire: the rate falls back under the bound
    assert not q.is_quota_exceeded()
    q.record(1500)
    assert not q.is_quota_exceeded()  # 750 B/s
    q.record(1000)
    assert q.is_quota_exceeded()  # 1 250 B/s


def test_throttled_partitions_by_topic() -> None:
    q = ReplicationQuotaManager("FollowerReplication", QuotaWindow(), FakeClock())
    q.mark_throttled("a", [0, 2])
    q.mark_throttled("b", [ALL_REPLICAS])
    assert q.is_throttled("a", 0) and q.is_throttled("a", 2) and not q.is_throttled("a", 1)
    assert q.is_throttled("b", 7) and not q.is_throttled("c", 0)
    q.remove_throttle("a")
    assert not q.is_throttled("a", 0)


def test_rates_and_lists_from_configs() -> None:
    quotas = ReplicationQuotas(2, QuotaWindow(), FakeClock())
    quotas.update_rates({}, {})
    assert quotas.leader.quota == float(UNBOUNDED_RATE) and quotas.follower.quota == float(UNBOUNDED_RATE)
    assert not quotas.leader.is_quota_exceeded()
    quotas.update_rates({"leader.replication.throttled.rate": "1000"},
                        {"leader.replication.throttled.rate": "5", "follower.replication.throttled.rate": "2000"})
    assert quotas.leader.quota == 1000  # this broker's value over the <default> broker's
    assert quotas.follower.quota == 2000
    quotas.update_topic("t", {"leader.replication.throttled.replicas": "0:1,1:2",
                              "follower.replication.throttled.replicas": "0:2"})
    assert quotas.leader.is_throttled("t", 1) and not quotas.leader.is_throttled("t", 0)
    assert quotas.follower.is_throttled("t", 0)
    quotas.update_topic("t", {})  # kafka-reassign-partitions --verify removed the lists
    assert not quotas.leader.is_throttled("t", 1) and not quotas.follower.is_throttled("t", 0)


def test_follower_leaves_out_throttled_partitions_that_have_not_caught_up() -> None:
    from kbroker.replica.replica_fetcher import ReplicaFetcher

    clock = FakeClock()
    quota = ReplicationQuotaManager("FollowerReplication", QuotaWindow(num_samples=3, window_ms=1000), clock)
    quota.mark_throttled("t", [0])
    quota.update_quota(100)
    fetcher = ReplicaFetcher.__new__(ReplicaFetcher)  # only the lag table is read
    fetcher.lag = {("t", 0): 50, ("t", 1): 50}
    assert not fetcher._should_follower_throttle(quota, ("t", 0))  # under the quota
    quota.record(10_000)
    assert fetcher._should_follower_throttle(quota, ("t", 0))
    assert not fetcher._should_follower_throttle(quota, ("t", 1))  # not a throttled replica
    fetcher.lag[("t", 0)] = 0  # caught up with the leader's HW: in sync, never held back
    assert not fetcher._should_follower_throttle(quota, ("t", 0))
    del fetcher.lag[("t", 0)]  # no response yet: Kafka counts it as not in sync
    assert fetcher._should_follower_throttle(quota, ("t", 0))


def test_throttled_rates_are_validated_as_kafka_longs() -> None:
    import pytest

    from kbroker.cluster.configs import ConfigHelper
    from kbroker.config import KafkaConfig
    from kbroker.metadata.cache import MetadataCache
    from kbroker.protocol.errors import KafkaError

    helper = ConfigHelper(KafkaConfig({"node.id": "2", "log.dirs": "/nonexistent"}), MetadataCache(2))
    new = helper.altered_broker_configs(False, {"leader.replication.throttled.rate": "1000"}, {})
    assert new == {"leader.replication.throttled.rate": "1000"}
    for bad, message in (("fast", "Not a number of type LONG"), ("-1", "Value must be at least 0")):
        with pytest.raises(KafkaError, match=message):
            helper.altered_broker_configs(False, {"follower.replication.throttled.rate": bad}, {})


def test_a_controller_alters_the_configs_of_the_broker_that_forwarded() -> None:
    """A forwarded IncrementalAlterConfigs names the sending broker: its ConfigRecord carries that id."""
    from kbroker.cluster.configs import ConfigHelper
    from kbroker.config import KafkaConfig
    from kbroker.controller.configuration_control import ConfigurationControlManager
    from kbroker.metadata.cache import MetadataCache

    cache = MetadataCache(1)
    helper = ConfigHelper(KafkaConfig({"node.id": "1", "log.dirs": "/nonexistent"}), cache)
    manager = ConfigurationControlManager(lambda: cache.view, helper, node_id=1)
    result = manager.alter_broker_configs(False, {"follower.replication.throttled.rate": "500"}, broker_id=2)
    assert [(r.resource_name, r.name, r.value) for r in result.records] == [
        ("2", "follower.replication.throttled.rate", "500")]
    own = manager.alter_broker_configs(False, {"follower.replication.throttled.rate": "500"})
    assert [r.resource_name for r in own.records] == ["1"]
