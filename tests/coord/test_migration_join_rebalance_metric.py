"""A classic JoinGroup into a consumer group bumps the group epoch through the consumer protocol's
shared step, so it counts in consumer-group-rebalance-count (group-rebalance-count{protocol=consumer})
exactly as Kafka 4.3.1's `classicGroupJoinToConsumerGroup` records CONSUMER_GROUP_REBALANCES_SENSOR
on every epoch bump; a rejoin that changes nothing bumps and counts nothing."""

from __future__ import annotations

from kbroker.metrics.meters import GROUP_COORDINATOR_METRICS
from kbroker.protocol.errors import ErrorCode
from tests.coord.test_group_migration import M, settle_classic

E = ErrorCode


def test_classic_join_into_consumer_group_counts_one_consumer_rebalance() -> None:
    h = M()
    a, _b = h.classic_group(2)
    assert h.hb("n", 0).error == E.NONE  # the upgrade: now a consumer group
    epoch = h.group().group_epoch
    classic_before = GROUP_COORDINATOR_METRICS.classic_rebalances
    consumer_before = GROUP_COORDINATOR_METRICS.consumer_rebalances
    first = h.join("")
    assert first.error == E.MEMBER_ID_REQUIRED
    joined = h.join(first.member_id)
    assert joined.error == E.NONE
    assert h.group().group_epoch == epoch + 1
    assert h.group().target_assignment_epoch == epoch + 1
    assert GROUP_COORDINATOR_METRICS.consumer_rebalances == consumer_before + 1
    assert GROUP_COORDINATOR_METRICS.classic_rebalances == classic_before
    # A classic member rejoining with the same subscription: no new epoch, nothing counted.
    settle_classic(h, a)
    assert h.group().group_epoch == epoch + 1
    assert GROUP_COORDINATOR_METRICS.consumer_rebalances == consumer_before + 1
