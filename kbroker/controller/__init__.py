"""The controller: the one writer of cluster metadata (Kafka's `QuorumController`, for one node today).

Owns the `Controller` interface the admin APIs call (create/delete topics, partitions, configs,
producer-id blocks, broker registration) and its single-node implementation `LocalController`, which
validates each request with the control managers (`replication_control`, `configuration_control`,
`producer_id_control`, `cluster_control`), turns it into Kafka's metadata records, appends them to
the local `__cluster_metadata` log (`metadata_log`), makes them durable, and only then hands them
to the broker's `MetadataLoader`, which builds the next `MetadataImage` and tells the publishers
(replica manager, coordinators, configs). Nothing else writes metadata.

The KRaft side (issue 13, docs/controller.md): `QuorumController` implements the same interface over
a replicated log it does not own (`raft_client`: the `RaftClient` / listener Protocols), keeping an
uncommitted image and answering on commit; `cluster_control` (registrations) and
`broker_heartbeat_manager` (sessions, fencing, controlled shutdown) own the brokers' lifecycle;
`replication_control` places replicas (`replica_placer`, rack-aware) and changes leaders and ISRs
through `partition_change` (Kafka's PartitionChangeBuilder); `pending` is the answer that completes
on commit. Security metadata has its managers too: `acl_control`, `scram_control`,
`client_quota_control` and `delegation_token_control` (KIP-48 tokens and their expiry sweep).

Must not import net/, api/, replica/ or coord/: the controller knows records and images, not the
services that react to them.
"""

from kbroker.controller.controller import Controller, NewTopic, ProducerIdsBlock

__all__ = ["Controller", "NewTopic", "ProducerIdsBlock"]
