"""IncrementalAlterConfigs (API key 44, v0-1, KIP-339): SET/DELETE/APPEND/SUBTRACT on topic, broker and group configs.

Topic changes are validated as a whole (Kafka's `LogConfig.validate`), persisted in the metadata
image and handed to the live logs at once. Broker changes are dynamic configs at the per-broker
(resource name = node id) or cluster-default ("") level; keys Kafka cannot update dynamically are
refused. BROKER_LOGGER changes set (or, DELETE, reset to inherit) a Python logger's level, with Kafka's
checks and messages. GROUP changes (KIP-848 / KIP-932 group configs, `kafka-configs --entity-type groups`)
go to the controller like topic changes, validated there as Kafka's `GroupConfig.validate`
(`kbroker.coord.group_config`). A resource named twice, or a key named twice within a resource, is INVALID_REQUEST.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from kbroker.api._authz import check_config_resource
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.api.describe_configs import (
    BROKER,
    BROKER_LOGGER,
    GROUP,
    ROOT_LOGGER,
    TO_PYTHON_LEVEL,
    TOPIC,
    VALID_LOG_LEVELS,
    broker_loggers,
    check_broker_resource,
)
from kbroker.cluster.configs import AlterConfigOp
from kbroker.config_defs import CONFIG_DEFS
from kbroker.protocol.errors import ErrorCode, KafkaError, error_fields
from kbroker.protocol.headers import RequestHeader
from kbroker.protocol.messages.incremental_alter_configs import (
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from kbroker.security.acl import ALTER_CONFIGS as ACL_ALTER_CONFIGS

API_KEY = 44
MIN_VERSION = 0
MAX_VERSION = 1

Result = IncrementalAlterConfigsResponse.AlterConfigsResourceResponse


async def run_per_resource(resources: list[Any], apply: Callable[[Any], Awaitable[None]], result_cls: Any,
                           types: tuple[int, ...] = (TOPIC, BROKER)) -> list[Any]:
    """Apply each resource, answering duplicates and failures per resource (shared with AlterConfigs)."""
    counts: dict[tuple[int, str], int] = {}
    for r in resources:
        key = (r.resource_type, r.resource_name)
        counts[key] = counts.get(key, 0) + 1
    results = []
    for r in resources:
        code, message = 0, None
        try:
            if counts[(r.resource_type, r.resource_name)] > 1:
                raise KafkaError("Each resource must appear at most once.", error_code=ErrorCode.INVALID_REQUEST)
            names = [c.name for c in r.configs]
            if len(set(names)) != len(names):
                raise KafkaError("Error due to duplicate config keys", error_code=ErrorCode.INVALID_REQUEST)
            if r.resource_type not in types:
                raise KafkaError(f"Unsupported resource type: {r.resource_type}",
                                 error_code=ErrorCode.INVALID_REQUEST)
            await apply(r)
        except Exception as e:  # noqa: BLE001 - every failure becomes this resource's error
            code, message = error_fields(e)
        results.append(result_cls(error_code=code, error_message=message, resource_type=r.resource_type,
                                  resource_name=r.resource_name))
    return results


def _broker_changes(services: BrokerServices, default: bool, ops: list[tuple[str, int, str | None]]) -> dict[str, str | None]:
    current = services.configs.dynamic_broker_configs(default)
    defs = CONFIG_DEFS
    changes: dict[str, str | None] = {}
    for key, op, value in ops:
        try:
            kind = AlterConfigOp(op)
        except ValueError:
            raise KafkaError(f"Unknown alter configs op type {op}", error_code=ErrorCode.INVALID_REQUEST) from None
        if kind == AlterConfigOp.SET:
            if value is None:
                raise KafkaError(f"Null value not supported for : {key}", error_code=ErrorCode.INVALID_REQUEST)
            changes[key] = value
        elif kind == AlterConfigOp.DELETE:
            changes[key] = None
        else:
            d = defs.get(key)
            if d is None or d.type != "list":
                raise KafkaError(f"Config value append is not allowed for config key: {key}",
                                 error_code=ErrorCode.INVALID_CONFIG)
            base = current.get(key)
            if base is None:
                base = services.config.value_as_string(key) or ""
            items = [x.strip() for x in base.split(",") if x.strip()]
            given = [x.strip() for x in (value or "").split(",") if x.strip()]
            if kind == AlterConfigOp.APPEND:
                items += [x for x in given if x not in items]
            else:
                items = [x for x in items if x not in given]
            changes[key] = ",".join(items)
    return changes


def _alter_loggers(ops: list[tuple[str, int, str | None]], validate_only: bool) -> None:
    """Kafka's `validateLogLevelConfigs` + `LoggingController`, on Python's logging levels."""
    loggers = broker_loggers()
    changes: list[tuple[logging.Logger, int]] = []
    for name, op, value in ops:
        if op in (AlterConfigOp.APPEND, AlterConfigOp.SUBTRACT):
            raise KafkaError(f"{AlterConfigOp(op).name} operation is not allowed for the BROKER_LOGGER resource",
                             error_code=ErrorCode.INVALID_REQUEST)
        logger = loggers.get(name)
        if logger is None:
            raise KafkaError(f"Logger {name} does not exist!", error_code=ErrorCode.INVALID_CONFIG)
        if op == AlterConfigOp.SET:
            if value not in VALID_LOG_LEVELS:
                raise KafkaError(f"Cannot set the log level of {name} to {value} as it is not a supported log "
                                 f"level. Valid log levels are {', '.join(VALID_LOG_LEVELS)}",
                                 error_code=ErrorCode.INVALID_CONFIG)
            changes.append((logger, TO_PYTHON_LEVEL[value]))
        elif op == AlterConfigOp.DELETE:
            if name == ROOT_LOGGER:
                raise KafkaError(f"Removing the log level of the {ROOT_LOGGER} logger is not allowed",
                                 error_code=ErrorCode.INVALID_REQUEST)
            changes.append((logger, logging.NOTSET))
        else:
            raise KafkaError(f"Unknown alter configs op type {op}", error_code=ErrorCode.INVALID_REQUEST)
    if not validate_only:
        for logger, level in changes:
            logger.setLevel(level)


async def handle(services: BrokerServices, ctx: RequestContext, header: RequestHeader,
           request: IncrementalAlterConfigsRequest) -> IncrementalAlterConfigsResponse:
    controller = services.controller

    async def apply(r: Any) -> None:
        check_config_resource(services, ctx, ACL_ALTER_CONFIGS, r.resource_type, r.resource_name)
        ops = [(c.name, c.config_operation, c.value) for c in r.configs]
        if r.resource_type == TOPIC:
            await controller.incremental_alter_topic_configs(r.resource_name, ops,
                                                             validate_only=request.validate_only)
        elif r.resource_type == GROUP:
            if r.resource_name == "":
                raise KafkaError("Default group resources are not allowed.", error_code=ErrorCode.INVALID_REQUEST)
            await controller.incremental_alter_group_configs(r.resource_name, ops,
                                                             validate_only=request.validate_only)
        elif r.resource_type == BROKER_LOGGER:
            check_broker_resource(services, r.resource_name or str(services.node_id))
            _alter_loggers(ops, request.validate_only)
        else:
            default = r.resource_name == ""
            broker_id = None
            if ctx.listener_name.upper() in services.config.controller_listener_names and not default:
                # Kafka's ControllerApis: a controller changes any broker's configs (a broker forwarding
                # its client's request in an Envelope names itself; --bootstrap-controller names any).
                try:
                    broker_id = int(r.resource_name)
                except ValueError:
                    raise KafkaError(f"Broker id must be an integer, but it is: {r.resource_name}",
                                     error_code=ErrorCode.INVALID_REQUEST) from None
            else:
                check_broker_resource(services, r.resource_name)
            await controller.alter_broker_configs(default, _broker_changes(services, default, ops),
                                                  validate_only=request.validate_only, broker_id=broker_id)

    results = await run_per_resource(list(request.resources), apply, Result, (TOPIC, BROKER, BROKER_LOGGER, GROUP))
    return IncrementalAlterConfigsResponse(throttle_time_ms=0, responses=results)


def error_response(request: IncrementalAlterConfigsRequest, version: int,
                   error: Any) -> IncrementalAlterConfigsResponse:
    return IncrementalAlterConfigsResponse(throttle_time_ms=0, responses=[
        Result(error_code=int(error), error_message=error.message or None, resource_type=r.resource_type,
               resource_name=r.resource_name)
        for r in request.resources
    ])
