"""The replica layer: partitions this broker hosts, their high watermarks and leader epochs, the
delayed-operation purgatories (Fetch long polling, acks=all Produce) and fetch sessions (KIP-227).

Sits between the api layer and the synchronous storage engine (`kbroker.log`). Must not import
net/ or api/.
"""

from kbroker.replica.partition import Partition
from kbroker.replica.replica_manager import ProducePartitionResult, ReplicaManager

__all__ = ["Partition", "ProducePartitionResult", "ReplicaManager"]
