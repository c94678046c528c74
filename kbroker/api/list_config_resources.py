"""ListConfigResources (API key 74, v0-1, KIP-1142): the resources that can have configs.

Kafka 4.3.1's `KafkaApis.handleListConfigResources`, checked against the reference broker: v0 (which
was ListClientMetricsResources) knows only CLIENT_METRICS; v1 knows TOPIC, BROKER, BROKER_LOGGER,
CLIENT_METRICS and GROUP. An empty type list means every type the version knows; a type it does not
know answers UNSUPPORTED_VERSION with no resources. The resources come in Kafka's order: groups that
have dynamic configs, client-metrics subscriptions (none: kbroker has no client telemetry, KIP-714), this
broker as a BROKER_LOGGER and as a BROKER (named by node id), then every topic (sorted here; Kafka's
order is its hash set's). `kafka-configs --list` and the Admin API's `listConfigResources` use it.
"""

from __future__ import annotations

from kbroker.api._authz import check_cluster
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.metadata.image import ConfigResourceType
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.headers import RequestHeader
from kbroker.protocol.messages.list_config_resources import (
    ListConfigResourcesRequest,
    ListConfigResourcesResponse,
)
from kbroker.security.acl import DESCRIBE_CONFIGS

API_KEY = 74
MIN_VERSION = 0
MAX_VERSION = 1

Resource = ListConfigResourcesResponse.ConfigResource

# ListConfigResourcesRequest.supportedResourceTypes per version.
_SUPPORTED_V0 = (ConfigResourceType.CLIENT_METRICS,)
_SUPPORTED_V1 = (ConfigResourceType.TOPIC, ConfigResourceType.BROKER, ConfigResourceType.BROKER_LOGGER,
                 ConfigResourceType.CLIENT_METRICS, ConfigResourceType.GROUP)


def error_response(request: ListConfigResourcesRequest, version: int, error: ErrorCode) -> ListConfigResourcesResponse:
    return ListConfigResourcesResponse(throttle_time_ms=0, error_code=int(error), config_resources=[])


def handle(services: BrokerServices, ctx: RequestContext, header: RequestHeader,
           request: ListConfigResourcesRequest) -> ListConfigResourcesResponse:
    check_cluster(services, ctx, DESCRIBE_CONFIGS)  # KafkaApis: DESCRIBE_CONFIGS on the cluster
    supported = _SUPPORTED_V0 if header.api_version == 0 else _SUPPORTED_V1
    requested = set(request.resource_types) if request.resource_types else set(supported)
    if not requested <= set(supported):
        return error_response(request, header.api_version, ErrorCode.UNSUPPORTED_VERSION)
    image = services.metadata.image
    node = str(services.node_id)
    resources: list[Resource] = []
    if ConfigResourceType.GROUP in requested:
        resources += [Resource(resource_name=r.name, resource_type=int(ConfigResourceType.GROUP))
                      for r in sorted(image.configs.configs) if r.type == ConfigResourceType.GROUP]
    # CLIENT_METRICS: no client telemetry subscriptions exist (KIP-714 is not implemented).
    if ConfigResourceType.BROKER_LOGGER in requested:
        resources.append(Resource(resource_name=node, resource_type=int(ConfigResourceType.BROKER_LOGGER)))
    if ConfigResourceType.BROKER in requested:
        resources.append(Resource(resource_name=node, resource_type=int(ConfigResourceType.BROKER)))
    if ConfigResourceType.TOPIC in requested:
        resources += [Resource(resource_name=t.name, resource_type=int(ConfigResourceType.TOPIC))
                      for t in sorted(services.metadata.topics(), key=lambda t: t.name)]
    return ListConfigResourcesResponse(throttle_time_ms=0, error_code=0, config_resources=resources)
