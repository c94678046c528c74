"""DescribeCluster (API key 60, v0-2): the cluster id, this node as the only broker and as the "controller".

KRaft brokers report a random live broker as the controller id, since clients cannot reach the
controllers (KIP-590); on one node that is us. Asking a broker for CONTROLLER endpoints (v1+
endpoint_type=2) gets UNSUPPORTED_ENDPOINT_TYPE, as from Kafka's broker listeners.
"""

from __future__ import annotations

from typing import Any

from kbroker.api._authz import cluster_authorized_operations
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.api.metadata import AUTHORIZED_OPERATIONS_OMITTED, in_cluster, registered_rack
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.headers import RequestHeader
from kbroker.protocol.messages.describe_cluster import DescribeClusterRequest, DescribeClusterResponse

API_KEY = 60
MIN_VERSION = 0
MAX_VERSION = 2

BROKER_ENDPOINT = 1


def handle(services: BrokerServices, ctx: RequestContext, header: RequestHeader, request: DescribeClusterRequest) -> DescribeClusterResponse:
    endpoint_type = request.endpoint_type if header.api_version >= 1 else BROKER_ENDPOINT
    if endpoint_type != BROKER_ENDPOINT:
        return DescribeClusterResponse(
            throttle_time_ms=0,
            error_code=int(ErrorCode.UNSUPPORTED_ENDPOINT_TYPE),
            error_message="The request was sent to an endpoint of type BROKER, but we wanted an "
                          "endpoint of type CONTROLLER",
            endpoint_type=endpoint_type,
            cluster_id=services.cluster_id,
            controller_id=-1,
            brokers=[],
        )
    endpoints = list(services.config.advertised_listeners)
    chosen = [e for e in endpoints if e.name == ctx.listener_name] or endpoints[:1]
    rack = registered_rack(services)
    brokers = [
        DescribeClusterResponse.DescribeClusterBroker(broker_id=services.node_id, host=e.host, port=e.port,
                                                      rack=rack, is_fenced=False)
        for e in chosen[:1]
    ]
    controller_id = services.node_id
    if in_cluster(services):
        # A KRaft cluster: every registered broker with this listener; fenced ones only when asked (v2).
        include_fenced = header.api_version >= 2 and request.include_fenced_brokers
        brokers = []
        for b in sorted(services.metadata.image.cluster.brokers.values(), key=lambda b: b.id):
            e = b.endpoint(ctx.listener_name)
            if e is not None and (include_fenced or not b.fenced):
                brokers.append(DescribeClusterResponse.DescribeClusterBroker(
                    broker_id=b.id, host=e.host, port=e.port, rack=b.rack, is_fenced=b.fenced))
        alive = [b.broker_id for b in brokers if not b.is_fenced]
        controller_id = services.node_id if services.node_id in alive else (alive[0] if alive else -1)
    # KIP-430 (AuthHelper.computeDescribeClusterResponse): 0 unless the principal may DESCRIBE the
    # cluster, else its operations on it (all of CLUSTER's without an authorizer). The request itself
    # needs no right.
    ops = cluster_authorized_operations(services, ctx) if request.include_cluster_authorized_operations \
        else AUTHORIZED_OPERATIONS_OMITTED
    return DescribeClusterResponse(
        throttle_time_ms=0,
        error_code=0,
        error_message=None,
        endpoint_type=BROKER_ENDPOINT,
        cluster_id=services.cluster_id,
        controller_id=controller_id,
        brokers=brokers,
        cluster_authorized_operations=ops,
    )


def error_response(request: DescribeClusterRequest, version: int, error: Any) -> DescribeClusterResponse:
    return DescribeClusterResponse(throttle_time_ms=0, error_code=int(error), error_message=error.message or None,
                                   cluster_id="", controller_id=-1, brokers=[])
