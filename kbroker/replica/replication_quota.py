"""`ReplicaQuota`: what the replication paths ask of a replication quota (KIP-73, Kafka's `ReplicaQuota`).

Two quotas throttle replication of the *throttled replicas* only, and only while such a replica is
out of sync (a reassignment copying a partition, a replica catching up after a restart); in-sync
replication is never held back:
- the leader's (`leader.replication.throttled.rate`, `leader.replication.throttled.replicas`): a
  follower's fetch of a throttled partition gets no records while the leader's replication byte rate
  is over the quota and that follower is not in the ISR (Kafka's `shouldLeaderThrottle`); the bytes
  of throttled partitions sent to followers are recorded when the response goes out;
- the follower's (`follower.replication.throttled.rate`, `follower.replication.throttled.replicas`):
  the replica fetcher leaves a throttled partition out of its next Fetch while its rate is over the
  quota and the partition has not caught up with the leader's high watermark (Kafka's
  `shouldFollowerThrottle`); the bytes it appends for throttled partitions are recorded.

The implementation (rates over `replication.quota.window.*`, the throttled-replica lists read from
the metadata image) is kbroker.cluster.replication_quotas; this module holds the seam and a quota
that never throttles. Must not import cluster/ (it sits above replica/).
"""

from __future__ import annotations

from typing import Protocol


class ReplicaQuota(Protocol):
    def record(self, value: int) -> None:
        """Bytes of throttled partitions replicated now."""

    def is_throttled(self, topic: str, partition: int) -> bool:
        """The partition's replica on this broker is in the throttled-replicas list."""

    def is_quota_exceeded(self) -> bool:
        """The measured rate is above the quota."""


class UnlimitedReplicaQuota:
    """No replication throttle (the default until the wiring hands in the broker's quotas)."""

    def record(self, value: int) -> None:
        return None

    def is_throttled(self, topic: str, partition: int) -> bool:
        return False

    def is_quota_exceeded(self) -> bool:
        return False


UNLIMITED_REPLICA_QUOTA = UnlimitedReplicaQuota()
