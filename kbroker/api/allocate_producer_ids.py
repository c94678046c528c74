"""AllocateProducerIds (API key 67, v0; controller listener): the next block of producer ids for a broker.

Kafka's `ControllerApis.handleAllocateProducerIdsRequest`: the controller checks the broker epoch and
commits a `ProducerIdsRecord` before answering with the block (1000 ids,
controller/producer_id_control.py).
"""

from __future__ import annotations

from kbroker.api._authz import check_cluster
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.headers import RequestHeader
from kbroker.protocol.messages.allocate_producer_ids import (
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
)
from kbroker.security.acl import CLUSTER_ACTION

API_KEY = 67
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(services: BrokerServices, ctx: RequestContext, header: RequestHeader,
                 request: AllocateProducerIdsRequest) -> AllocateProducerIdsResponse:
    check_cluster(services, ctx, CLUSTER_ACTION)  # Kafka's ControllerApis: CLUSTER_ACTION on the cluster
    block = await services.controller.allocate_producer_ids(request.broker_id, request.broker_epoch)
    return AllocateProducerIdsResponse(throttle_time_ms=0, error_code=0, producer_id_start=block.first_producer_id,
                                       producer_id_len=block.size)


def error_response(request: AllocateProducerIdsRequest, version: int, error: ErrorCode) -> AllocateProducerIdsResponse:
    return AllocateProducerIdsResponse(throttle_time_ms=0, error_code=int(error))
