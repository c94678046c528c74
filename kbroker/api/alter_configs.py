"""AlterConfigs (API key 33, v0-2): the legacy whole-set replacement of topic or broker configs.

The configs sent replace every override of the resource (a topic's overrides, or the dynamic broker
configs at the per-broker or cluster-default level); a config left out returns to its default.
Superseded by IncrementalAlterConfigs (KIP-339) but still sent by librdkafka's `alter_configs`.
"""

from __future__ import annotations

from typing import Any

from kbroker.api._authz import check_config_resource
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.api.describe_configs import TOPIC, check_broker_resource
from kbroker.api.incremental_alter_configs import run_per_resource
from kbroker.protocol.headers import RequestHeader
from kbroker.protocol.messages.alter_configs import AlterConfigsRequest, AlterConfigsResponse
from kbroker.security.acl import ALTER_CONFIGS as ACL_ALTER_CONFIGS

API_KEY = 33
MIN_VERSION = 0
MAX_VERSION = 2

Result = AlterConfigsResponse.AlterConfigsResourceResponse


async def handle(services: BrokerServices, ctx: RequestContext, header: RequestHeader, request: AlterConfigsRequest) -> AlterConfigsResponse:
    controller = services.controller

    async def apply(r: Any) -> None:
        check_config_resource(services, ctx, ACL_ALTER_CONFIGS, r.resource_type, r.resource_name)
        configs = {c.name: c.value for c in r.configs}
        if r.resource_type == TOPIC:
            await controller.alter_topic_configs(r.resource_name, configs, validate_only=request.validate_only)
        else:
            check_broker_resource(services, r.resource_name)
            default = r.resource_name == ""
            changes: dict[str, str | None] = {k: None for k in services.configs.dynamic_broker_configs(default)}
            changes.update(configs)
            await controller.alter_broker_configs(default, changes, validate_only=request.validate_only)

    results = await run_per_resource(list(request.resources), apply, Result)
    return AlterConfigsResponse(throttle_time_ms=0, responses=results)


def error_response(request: AlterConfigsRequest, version: int, error: Any) -> AlterConfigsResponse:
    return AlterConfigsResponse(throttle_time_ms=0, responses=[
        Result(error_code=int(error), error_message=error.message or None, resource_type=r.resource_type,
               resource_name=r.resource_name)
        for r in request.resources
    ])
