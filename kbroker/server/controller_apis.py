"""`ControllerApis`: the dispatcher of a controller listener (Kafka's `ControllerApis`).

The handlers of kbroker/api served on the "controller" listener kind (BrokerRegistration,
BrokerHeartbeat, AlterPartition, AllocateProducerIds, CreateTopics, ..., ApiVersions) run as on any
listener, over `services.controller` (the `QuorumController`). The Raft APIs are not handlers of that
package: Vote, BeginQuorumEpoch, EndQuorumEpoch, FetchSnapshot, DescribeQuorum and, on this listener,
Fetch (a replica or observer fetching `__cluster_metadata`, never a client's Fetch) go to the Raft
client through `KafkaRaftManager.handle_inbound`. ApiVersions advertises the Raft APIs with the
versions the generated codecs speak.
"""

from __future__ import annotations

from kbroker.api.context import BrokerServices, RequestContext
from kbroker.api.dispatcher import ApiDispatcher
from kbroker.protocol import API_SPECS
from kbroker.protocol.headers import RequestHeader
from kbroker.raft.messages import RaftRequestBody
from kbroker.server.raft_manager import RAFT_API_KEYS, KafkaRaftManager


class ControllerApis(ApiDispatcher):
    def __init__(self, services: BrokerServices, manager: KafkaRaftManager) -> None:
        super().__init__(services, listener="controller")
        self.manager = manager
        self.raft_ranges = {k: (API_SPECS[k].min_version, API_SPECS[k].max_version) for k in RAFT_API_KEYS}
        # Fetch on the controller listener is Raft's: its range replaces the broker handler's.
        services.api_ranges = dict(sorted({**self.advertised_ranges(), **self.raft_ranges}.items()))

    def handle(self, ctx: RequestContext, header: RequestHeader, body: RaftRequestBody) -> object:
        key = header.api_key
        if key in self.raft_ranges:
            lo, hi = self.raft_ranges[key]
            if not lo <= header.api_version <= hi:
                return self.handle_unsupported(ctx, header)
            return self.manager.handle_inbound(key, body)
        return super().handle(ctx, header, body)
