"""Coordinators: the group coordinator (classic and KIP-848 consumer groups) and committed offsets
(later: transactions and share groups, on the same runtime).

Layers, from the request down (Kafka's names):
- `service.GroupCoordinatorService`: what the group API handlers call; routes a request to the shard
  of its group's `__consumer_offsets` partition and answers once the runtime says its writes committed.
- `coordinator_runtime.CoordinatorRuntime`: the generic, sans-IO runtime of coordinators whose state
  lives in a log partition (load / unload, write and read operations, answers held until the high
  watermark passes the write, timers per shard); `runtime` binds it to the event loop and the
  replica manager.
- `shard.GroupCoordinatorShard`: one partition's state, combining `group_metadata_manager.
  GroupMetadataManager` (the group state machine: classic protocol with `classic_sync`, consumer
  protocol `consumer_coordinator` with `consumer_group` and `assignors`, `migration` between them,
  group records in `persistence` / `consumer_persistence`) and `offset_metadata_manager.
  OffsetMetadataManager` (committed offsets, `offsets`).
- `records` / `consumer_records`: the `__consumer_offsets` record formats; `config`: injected
  dependencies and settings.

Must not import kbroker.net (no socket code) and must not import kbroker.api.
"""

from kbroker.coord.config import CoordinatorConfig
from kbroker.coord.runtime import GROUP_METADATA_TOPIC, partition_for
from kbroker.coord.service import GroupCoordinatorService
from kbroker.coord.shard import GroupCoordinatorShard

__all__ = ["CoordinatorConfig", "GroupCoordinatorService", "GroupCoordinatorShard", "GROUP_METADATA_TOPIC",
           "partition_for"]
