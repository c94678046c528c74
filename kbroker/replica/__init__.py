"""The replica layer: partitions this broker hosts (as leader or follower), their high watermarks,
ISR and leader epochs, the delayed-operation purgatories (Fetch long polling, acks=all Produce),
fetch sessions (KIP-227), and replication: the replica fetchers that copy from other leaders and the
AlterPartitionManager that proposes ISR changes to the controller (docs/replication.md).

Sits between the api layer and the synchronous storage engine (`kbroker.log`). Must not import
net/, api/ or server/ (the broker-to-controller channel is handed in as a callable). Outbound
connections go through `kbroker.client.NodeConnection`.
"""

from kbroker.replica.partition import Partition
from kbroker.replica.replica_manager import ProducePartitionResult, ReplicaManager

__all__ = ["Partition", "ProducePartitionResult", "ReplicaManager"]
