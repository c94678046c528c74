"""Coordinators: the group coordinator (classic and KIP-848 consumer groups) and committed offsets
(later: transactions).

Owns the classic group state machine (`group`) and rebalance protocol (`coordinator`, `classic_sync`),
the KIP-848 consumer group (`consumer_group`), its heartbeat protocol (`consumer_coordinator`) and
server-side assignors (`assignors`), offsets and group administration (`group_admin`, `offsets`),
group persistence (`persistence`, `consumer_persistence`), injected dependencies (`config`), the
`__consumer_offsets` record formats (`records`, `consumer_records`) and the runtime binding them to
the broker's event loop and logs (`runtime`). Must not import kbroker.net (no socket code) and must
not import kbroker.api.
"""

from kbroker.coord.config import CoordinatorConfig
from kbroker.coord.coordinator import GroupCoordinator
from kbroker.coord.runtime import GROUP_METADATA_TOPIC, GroupCoordinatorRuntime, partition_for

__all__ = ["CoordinatorConfig", "GroupCoordinator", "GroupCoordinatorRuntime", "GROUP_METADATA_TOPIC",
           "partition_for"]
