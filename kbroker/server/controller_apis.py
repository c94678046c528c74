"""`ControllerApis`: the dispatcher of a controller listener (Kafka's `ControllerApis`).

The handlers of kbroker/api served on the "controller" listener kind (BrokerRegistration,
BrokerHeartbeat, AlterPartition, AllocateProducerIds, CreateTopics, ..., ApiVersions) run as on any
listener, over `services.controller` (the `QuorumController`). The Raft APIs are not handlers of that
package: Vote, BeginQuorumEpoch, EndQuorumEpoch, FetchSnapshot, DescribeQuorum and, on this listener,
Fetch (a replica or observer fetching `__cluster_metadata`, never a client's Fetch) go to the Raft
client through `KafkaRaftManager.handle_inbound`, and so do AddRaftVoter / RemoveRaftVoter (KIP-853,
`kafka-metadata-quorum add-controller / remove-controller`: ALTER on the cluster; the leader answers once
the VotersRecord commits). ApiVersions advertises the Raft APIs with the
versions the generated codecs speak. DescribeCluster on this listener is the controller's (KIP-919,
`kafka-metadata-quorum --bootstrap-controller`): the voters as CONTROLLER endpoints, the Raft leader
as the controller id. Envelope (API 58, KIP-590): an Apache Kafka broker forwards a client's admin
request wrapped in one; it is unwrapped, dispatched here as if it had come on this listener, and its
response (header and body) wrapped back.
"""

from __future__ import annotations

import inspect
import ipaddress

from kbroker.api._authz import authorize_cluster, cluster_authorized_operations
from kbroker.api.context import NO_RESPONSE, BrokerServices, CloseConnection, RequestContext
from kbroker.api.dispatcher import ApiDispatcher
from kbroker.protocol import API_SPECS, ProtocolError, decode_request_frame, encode_response_frame
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.headers import RequestHeader
from kbroker.protocol.messages.controller_registration import (
    ControllerRegistrationRequest,
    ControllerRegistrationResponse,
)
from kbroker.protocol.messages.describe_cluster import DescribeClusterRequest, DescribeClusterResponse
from kbroker.protocol.messages.envelope import EnvelopeRequest, EnvelopeResponse
from kbroker.raft.messages import RaftRequestBody
from kbroker.security.acl import ALTER, CLUSTER_ACTION, DESCRIBE
from kbroker.security.principal import deserialize_principal
from kbroker.server.raft_manager import RAFT_API_KEYS, RAFT_RESPONSE_TYPES, KafkaRaftManager

DESCRIBE_CLUSTER = 60
CONTROLLER_REGISTRATION = 70
ENVELOPE = 58
DESCRIBE_QUORUM = 55
CONTROLLER_ENDPOINT = 2


def carries_error(response: object, code: int, depth: int = 4) -> bool:
    """Whether a generated response carries error `code` in any `error_code` field, at the top or in
    its nested results (Kafka's `AbstractResponse.errorCounts`)."""
    names = getattr(type(response), "__slots__", ())
    for name in names:
        value = getattr(response, name, None)
        if name == "error_code" and value == code:
            return True
        if depth > 0 and isinstance(value, list):
            if any(carries_error(v, code, depth - 1) for v in value if hasattr(type(v), "__slots__")):
                return True
    return False


class ControllerApis(ApiDispatcher):
    def __init__(self, services: BrokerServices, manager: KafkaRaftManager) -> None:
        super().__init__(services, listener="controller")
        self.manager = manager
        self.raft_ranges = {k: (API_SPECS[k].min_version, API_SPECS[k].max_version) for k in RAFT_API_KEYS}
        # Fetch on the controller listener is Raft's: its range replaces the broker handler's.
        services.api_ranges = dict(sorted({**self.advertised_ranges(), **self.raft_ranges,
                                           ENVELOPE: (0, 0), CONTROLLER_REGISTRATION: (0, 0)}.items()))

    def handle(self, ctx: RequestContext, header: RequestHeader, body: object) -> object:
        key = header.api_key
        if key == CONTROLLER_REGISTRATION and isinstance(body, ControllerRegistrationRequest):
            if not authorize_cluster(self.services, ctx, CLUSTER_ACTION):
                return ControllerRegistrationResponse(error_code=int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
                                                      error_message=None)
            return self.controller_registration(body)
        if key == ENVELOPE and isinstance(body, EnvelopeRequest):
            if not authorize_cluster(self.services, ctx, CLUSTER_ACTION):
                # ControllerApis.handleEnvelopeRequest: only brokers (CLUSTER_ACTION) may forward.
                return EnvelopeResponse(response_data=None, error_code=int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED))
            return self.envelope(ctx, body)
        if key == DESCRIBE_CLUSTER and isinstance(body, DescribeClusterRequest) and key in self.handlers:
            return self.describe_cluster(ctx, header, body)
        if key in self.raft_ranges:
            lo, hi = self.raft_ranges[key]
            if not lo <= header.api_version <= hi:
                return self.handle_unsupported(ctx, header)
            assert isinstance(body, RaftRequestBody)  # decoded by its key, a Raft API's
            # ControllerApis: the Raft APIs need CLUSTER_ACTION on the cluster (DescribeQuorum: DESCRIBE);
            # a refusal is the response's top-level CLUSTER_AUTHORIZATION_FAILED.
            # AddRaftVoter / RemoveRaftVoter (KIP-853): ALTER on the cluster, as Kafka's ControllerApis.
            operation = DESCRIBE if key == DESCRIBE_QUORUM else ALTER if key in (80, 81) else CLUSTER_ACTION
            if not authorize_cluster(self.services, ctx, operation):
                return RAFT_RESPONSE_TYPES[key](error_code=int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED))
            return self.manager.handle_inbound(key, body)
        return super().handle(ctx, header, body)

    async def controller_registration(self, request: ControllerRegistrationRequest) -> ControllerRegistrationResponse:
        """Kafka's ControllerApis.handleControllerRegistration (KIP-919): the active controller writes a
        RegisterControllerRecord and answers once it commits; any other voter answers NOT_CONTROLLER.
        Apache Kafka controllers in a mixed quorum send it to a kbroker leader."""
        links = self.services.kraft_controller
        if links is None:
            return ControllerRegistrationResponse(error_code=int(ErrorCode.NOT_CONTROLLER), error_message=None)
        try:
            await links.controller.register_controller(request)
        except KafkaError as e:
            return ControllerRegistrationResponse(error_code=int(e.error_code), error_message=str(e))
        return ControllerRegistrationResponse(error_code=0, error_message=None)

    def describe_cluster(self, ctx: RequestContext, header: RequestHeader,
                         request: DescribeClusterRequest) -> DescribeClusterResponse:
        """Kafka's ControllerApis.handleDescribeCluster: the quorum's voters, the active controller's id."""
        endpoint_type = request.endpoint_type if header.api_version >= 1 else 1
        client = self.manager.client
        if endpoint_type != CONTROLLER_ENDPOINT:
            return DescribeClusterResponse(
                throttle_time_ms=0, error_code=int(ErrorCode.UNSUPPORTED_ENDPOINT_TYPE),
                error_message="The request was sent to an endpoint of type CONTROLLER, but we wanted an "
                              "endpoint of type BROKER",
                endpoint_type=endpoint_type, cluster_id=self.services.cluster_id, controller_id=-1, brokers=[])
        leader = client.leader_and_epoch().leader_id
        brokers = [DescribeClusterResponse.DescribeClusterBroker(broker_id=node_id, host=e.host, port=e.port,
                                                                 rack=None, is_fenced=False)
                   for node_id, e in sorted(client.config.voters.items())]
        return DescribeClusterResponse(
            throttle_time_ms=0, error_code=0, error_message=None, endpoint_type=CONTROLLER_ENDPOINT,
            cluster_id=self.services.cluster_id, controller_id=leader if leader >= 0 else -1, brokers=brokers,
            cluster_authorized_operations=cluster_authorized_operations(self.services, ctx)
            if request.include_cluster_authorized_operations else -2147483648)

    async def envelope(self, ctx: RequestContext, request: EnvelopeRequest) -> EnvelopeResponse:
        """Kafka's ControllerApis.handleEnvelopeRequest. The inner request runs as the client: the
        principal the forwarding broker serialized (`DefaultPrincipalData`) and the client's address
        (a malformed one is INVALID_REQUEST, as Kafka's `parseEnvelopeRequest`); the inner header's
        client id is the client's."""
        try:
            principal = deserialize_principal(bytes(request.request_principal or b""))
            client_host = str(ipaddress.ip_address(bytes(request.client_host_address)))
        except ValueError:
            return EnvelopeResponse(response_data=None, error_code=int(ErrorCode.INVALID_REQUEST))
        try:
            inner_header, inner_body = decode_request_frame(request.request_data)
        except ProtocolError:
            return EnvelopeResponse(response_data=None, error_code=int(ErrorCode.INVALID_REQUEST))
        if inner_header.api_key == ENVELOPE:
            return EnvelopeResponse(response_data=None, error_code=int(ErrorCode.INVALID_REQUEST))
        try:
            inner_ctx = RequestContext(client_id=inner_header.client_id, listener_name=ctx.listener_name,
                                       peer=(client_host, 0), connection_id=ctx.connection_id,
                                       principal=str(principal))
            inner_ctx.forwarded = True
            result = self.handle(inner_ctx, inner_header, inner_body)
            if inspect.isawaitable(result):
                result = await result
        except CloseConnection:
            return EnvelopeResponse(response_data=None, error_code=int(ErrorCode.UNSUPPORTED_VERSION))
        if result is NO_RESPONSE:
            return EnvelopeResponse(response_data=None, error_code=int(ErrorCode.INVALID_REQUEST))
        if carries_error(result, ErrorCode.NOT_CONTROLLER):
            # Kafka's RequestChannel.buildResponseSend: an inner NOT_CONTROLLER (this controller lost the
            # leadership, or has not claimed it yet) is the Envelope's, so the forwarding broker's
            # NodeToControllerRequestThread finds the active controller and sends the request again.
            return EnvelopeResponse(response_data=None, error_code=int(ErrorCode.NOT_CONTROLLER))
        parts = encode_response_frame(inner_header.api_key, inner_header.api_version, inner_header.correlation_id,
                                      result)
        data = b"".join(bytes(p) for p in parts if isinstance(p, bytes | bytearray | memoryview))
        return EnvelopeResponse(response_data=data[4:], error_code=0)
