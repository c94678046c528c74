"""AlterConfigs (API key 33, v0-2): the legacy whole-set replacement of topic or broker configs.

The configs sent replace every override of the resource (a topic's overrides, or the dynamic broker
configs at the per-broker or cluster-default level); a config left out returns to its default.
Superseded by IncrementalAlterConfigs (KIP-339) but still sent by librdkafka's `alter_configs`.

Every resource that passes its checks goes to the controller in one `Controller.alter_configs` (Kafka's
`QuorumController.legacyAlterConfigs`: one write, one batch). A KRaft broker answers duplicates and a
BROKER resource naming another broker itself and forwards the rest in one Envelope, as Kafka's
`KafkaApis` + `ConfigAdminManager` do (`forward_whole`); the controller runs this handler on the rest,
replacing the dynamic configs of the broker the resource names.
"""

from __future__ import annotations

from typing import Any

from kbroker.api._authz import check_config_resource
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.api.describe_configs import BROKER, TOPIC
from kbroker.api.incremental_alter_configs import (
    check_current_node_id,
    forward_whole,
    forwarded_broker_id,
    run_per_resource,
)
from kbroker.controller.controller import BrokerConfigsAlteration, ConfigAlteration, TopicConfigsAlteration
from kbroker.protocol.headers import RequestHeader
from kbroker.protocol.messages.alter_configs import AlterConfigsRequest, AlterConfigsResponse
from kbroker.security.acl import ALTER_CONFIGS as ACL_ALTER_CONFIGS

API_KEY = 33
MIN_VERSION = 0
MAX_VERSION = 2

Result = AlterConfigsResponse.AlterConfigsResourceResponse
_TYPES = (TOPIC, BROKER)


def _current_broker_configs(services: BrokerServices, default: bool, broker_id: int | None) -> set[str]:
    """The dynamic config keys the replacement clears: the cluster defaults, this node's, or (a request
    a broker forwarded to the controller) the named broker's."""
    if default or broker_id is None or broker_id == services.node_id:
        return set(services.configs.dynamic_broker_configs(default))
    return set(services.metadata.image.configs.broker_config(broker_id))


async def handle(services: BrokerServices, ctx: RequestContext, header: RequestHeader, request: AlterConfigsRequest) -> AlterConfigsResponse:
    if services.kraft is not None:
        def preprocess(r: Any) -> Any | None:
            if r.resource_type == BROKER and r.resource_name != "":
                check_current_node_id(services, r.resource_name)
            return r

        forwarded: AlterConfigsResponse = await forward_whole(
            services, API_KEY, request, AlterConfigsResponse, header.api_version, preprocess, Result, _TYPES)
        return forwarded

    def prepare(r: Any) -> ConfigAlteration:
        check_config_resource(services, ctx, ACL_ALTER_CONFIGS, r.resource_type, r.resource_name)
        configs = {c.name: c.value for c in r.configs}
        if r.resource_type == TOPIC:
            return TopicConfigsAlteration(r.resource_name, replace=configs)
        default = r.resource_name == ""
        broker_id = forwarded_broker_id(services, ctx, r.resource_name)
        changes: dict[str, str | None] = {k: None for k in _current_broker_configs(services, default, broker_id)}
        changes.update(configs)
        return BrokerConfigsAlteration(default, changes, broker_id)

    results = await run_per_resource(services, list(request.resources), prepare, Result, request.validate_only,
                                     _TYPES)
    return AlterConfigsResponse(throttle_time_ms=0, responses=results)


def error_response(request: AlterConfigsRequest, version: int, error: Any) -> AlterConfigsResponse:
    return AlterConfigsResponse(throttle_time_ms=0, responses=[
        Result(error_code=int(error), error_message=error.message or None, resource_type=r.resource_type,
               resource_name=r.resource_name)
        for r in request.resources
    ])
