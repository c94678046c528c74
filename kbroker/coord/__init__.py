"""Coordinators: the classic group coordinator and committed offsets (later: transactions).

Owns the group state machine (`group`), the rebalance protocol (`coordinator`), offsets and group
administration (`group_admin`, `offsets`), group persistence (`persistence`), injected dependencies
(`config`), the `__consumer_offsets` record formats (`records`) and the runtime binding them to the broker's event loop and logs (`runtime`). Must not import
kbroker.net (no socket code) and must not import kbroker.api.
"""

from kbroker.coord.config import CoordinatorConfig
from kbroker.coord.coordinator import GroupCoordinator
from kbroker.coord.runtime import GROUP_METADATA_TOPIC, GroupCoordinatorRuntime, partition_for

__all__ = ["CoordinatorConfig", "GroupCoordinator", "GroupCoordinatorRuntime", "GROUP_METADATA_TOPIC",
           "partition_for"]
