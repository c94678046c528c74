"""IncrementalAlterConfigs (API key 44, v0-1, KIP-339): SET/DELETE/APPEND/SUBTRACT on topic, broker and group configs.

Topic changes are validated as a whole (Kafka's `LogConfig.validate`), persisted in the metadata
image and handed to the live logs at once. Broker changes are dynamic configs at the per-broker
(resource name = node id) or cluster-default ("") level; keys Kafka cannot update dynamically are
refused. BROKER_LOGGER changes set (or, DELETE, reset to inherit) a Python logger's level, with Kafka's
checks and messages. GROUP changes (KIP-848 / KIP-932 group configs, `kafka-configs --entity-type groups`)
go to the controller like topic changes, validated there as Kafka's `GroupConfig.validate`
(`kbroker.coord.group_config`). A resource named twice, or a key named twice within a resource, is INVALID_REQUEST.

Every resource that passes its checks goes to the controller in one `Controller.alter_configs`: Kafka's
`QuorumController.incrementalAlterConfigs` is one write, the ConfigRecords of all of them one batch.
A KRaft broker forwards the request as Kafka's `KafkaApis` + `ConfigAdminManager` do (`forward_whole`):
it answers duplicates, BROKER_LOGGER (its own loggers) and a BROKER resource naming another broker
itself, and sends every other resource in one Envelope; the controller runs this handler on the rest.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
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
)
from kbroker.cluster.configs import AlterConfigOp
from kbroker.config_defs import CONFIG_DEFS
from kbroker.controller.controller import (
    BrokerConfigsAlteration,
    ConfigAlteration,
    GroupConfigsAlteration,
    TopicConfigsAlteration,
)
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


def _check_resource(r: Any, counts: Mapping[tuple[int, str], int], types: tuple[int, ...]) -> None:
    """The checks of every resource before anything else, in Kafka's order and words
    (`ConfigAdminManager.preprocess`): named twice, a key named twice, a null value (legacy AlterConfigs:
    any; IncrementalAlterConfigs: but for DELETE), a resource type not handled here."""
    if counts[(r.resource_type, r.resource_name)] > 1:
        raise KafkaError("Each resource must appear at most once.", error_code=ErrorCode.INVALID_REQUEST)
    names = [c.name for c in r.configs]
    if len(set(names)) != len(names):
        raise KafkaError("Error due to duplicate config keys", error_code=ErrorCode.INVALID_REQUEST)
    nulls = [c.name for c in r.configs
             if c.value is None and getattr(c, "config_operation", AlterConfigOp.SET) != AlterConfigOp.DELETE]
    if nulls:
        raise KafkaError("Null value not supported for : " + ", ".join(nulls), error_code=ErrorCode.INVALID_REQUEST)
    if r.resource_type not in types:
        raise KafkaError(f"Unknown resource type {r.resource_type}", error_code=ErrorCode.INVALID_REQUEST)


def _node_id_of(name: str) -> int:
    try:
        return int(name)
    except ValueError:
        raise KafkaError(f"Node id must be an integer, but it is: {name}",
                         error_code=ErrorCode.INVALID_REQUEST) from None


def check_current_node_id(services: BrokerServices, name: str) -> None:
    """Kafka's `ConfigAdminManager.validateResourceNameIsCurrentNodeId`: a BROKER resource of an
    (Incremental)AlterConfigs names this node (or is "", the cluster default: not checked here)."""
    if _node_id_of(name) != services.node_id:
        raise KafkaError(f"Unexpected broker id, expected {services.node_id}, but received {name}",
                         error_code=ErrorCode.INVALID_REQUEST)


def _counts(resources: list[Any]) -> dict[tuple[int, str], int]:
    counts: dict[tuple[int, str], int] = {}
    for r in resources:
        key = (r.resource_type, r.resource_name)
        counts[key] = counts.get(key, 0) + 1
    return counts


async def run_per_resource(services: BrokerServices, resources: list[Any],
                           prepare: Callable[[Any], ConfigAlteration | None], result_cls: Any,
                           validate_only: bool, types: tuple[int, ...] = (TOPIC, BROKER)) -> list[Any]:
    """Check each resource and `prepare` its change (None: done here, e.g. a BROKER_LOGGER), then hand
    every prepared change to the controller at once (`Controller.alter_configs`: one write, one batch,
    as Kafka's QuorumController); duplicates and failures are answered per resource, in request order
    (shared with AlterConfigs)."""
    counts = _counts(resources)
    outcomes: dict[int, tuple[int, str | None]] = {}
    prepared: list[tuple[int, ConfigAlteration]] = []
    for i, r in enumerate(resources):
        try:
            _check_resource(r, counts, types)
            alteration = prepare(r)
        except Exception as e:  # noqa: BLE001 - every failure becomes this resource's error
            outcomes[i] = error_fields(e)
            continue
        if alteration is None:
            outcomes[i] = (0, None)
        else:
            prepared.append((i, alteration))
    if prepared:
        try:
            errors: list[Exception | None] = list(
                await services.controller.alter_configs([a for _, a in prepared], validate_only))
        except Exception as e:  # noqa: BLE001 - the whole write failed: every resource's error
            errors = [e] * len(prepared)
        for (i, _), error in zip(prepared, errors, strict=True):
            outcomes[i] = (0, None) if error is None else error_fields(error)
    return [result_cls(error_code=outcomes[i][0], error_message=outcomes[i][1], resource_type=r.resource_type,
                       resource_name=r.resource_name) for i, r in enumerate(resources)]


async def forward_whole(services: BrokerServices, api_key: int, request: Any, response_type: Any, version: int,
                        preprocess: Callable[[Any], Any | None], result_cls: Any, types: tuple[int, ...]) -> Any:
    """A KRaft broker's (Incremental)AlterConfigs (Kafka's `KafkaApis` with `ConfigAdminManager`): the
    broker answers what it preprocesses (duplicates, BROKER_LOGGER, a BROKER resource naming another
    broker), forwards the rest to the controller in one Envelope (`RemoteController.forward`) and
    reassembles the answer in the request's order. `preprocess(r)`: the resource to forward (possibly
    rewritten), or None when the broker handled it; raising answers it with that error."""
    assert services.kraft is not None
    resources = list(request.resources)
    counts = _counts(resources)
    local: dict[int, tuple[int, str | None]] = {}
    remaining: list[Any] = []
    for i, r in enumerate(resources):
        try:
            _check_resource(r, counts, types)
            kept = preprocess(r)
        except Exception as e:  # noqa: BLE001 - every failure becomes this resource's error
            local[i] = error_fields(e)
            continue
        if kept is None:
            local[i] = (0, None)
        else:
            remaining.append(kept)
    answered: dict[tuple[int, str], tuple[int, str | None]] = {}
    if remaining:
        forwarded = type(request)(resources=remaining, validate_only=request.validate_only)
        try:
            resp = await services.kraft.controller.forward(api_key, forwarded, response_type, version=version,
                                                           validate_only=request.validate_only)
            answered = {(x.resource_type, x.resource_name): (x.error_code, x.error_message) for x in resp.responses}
        except KafkaError as e:
            failed = error_fields(e)
            answered = {(x.resource_type, x.resource_name): failed for x in remaining}
    results = []
    for i, r in enumerate(resources):
        code, message = local.get(i) or answered.get(
            (r.resource_type, r.resource_name),
            (int(ErrorCode.UNKNOWN_SERVER_ERROR), None))  # Kafka logs "The controller returned fewer results"
        results.append(result_cls(error_code=code, error_message=message, resource_type=r.resource_type,
                                  resource_name=r.resource_name))
    return response_type(throttle_time_ms=0, responses=results)


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


def _ops(r: Any) -> list[tuple[str, int, str | None]]:
    return [(c.name, c.config_operation, c.value) for c in r.configs]


def _alter_broker_loggers(services: BrokerServices, ctx: RequestContext, r: Any, validate_only: bool) -> None:
    """BROKER_LOGGER: this node's own loggers, never forwarded (Kafka's RuntimeLoggerManager)."""
    check_config_resource(services, ctx, ACL_ALTER_CONFIGS, r.resource_type, r.resource_name)
    if _node_id_of(r.resource_name) != services.node_id:  # RuntimeLoggerManager.validateResourceNameIsNodeId
        raise KafkaError(f"Unexpected node id. Expected {services.node_id}, but received {r.resource_name}",
                         error_code=ErrorCode.INVALID_REQUEST)
    _alter_loggers(_ops(r), validate_only)


async def _forward(services: BrokerServices, ctx: RequestContext, version: int,
                   request: IncrementalAlterConfigsRequest) -> IncrementalAlterConfigsResponse:
    Resource = IncrementalAlterConfigsRequest.AlterConfigsResource
    Config = IncrementalAlterConfigsRequest.AlterableConfig

    def preprocess(r: Any) -> Any | None:
        if r.resource_type == BROKER_LOGGER:
            _alter_broker_loggers(services, ctx, r, request.validate_only)
            return None
        if r.resource_type == BROKER:
            # The resource must name this broker or be "" (ConfigAdminManager.preprocess). APPEND and
            # SUBTRACT are resolved against this broker's configs: the controller gets SET / DELETE.
            if r.resource_name != "":
                check_current_node_id(services, r.resource_name)
            changes = _broker_changes(services, r.resource_name == "", _ops(r))
            return Resource(resource_type=BROKER, resource_name=r.resource_name, configs=[
                Config(name=k, config_operation=int(AlterConfigOp.SET if v is not None else AlterConfigOp.DELETE),
                       value=v) for k, v in changes.items()])
        return r

    result: IncrementalAlterConfigsResponse = await forward_whole(
        services, API_KEY, request, IncrementalAlterConfigsResponse, version, preprocess, Result, _TYPES)
    return result


_TYPES = (TOPIC, BROKER, BROKER_LOGGER, GROUP)


def forwarded_broker_id(services: BrokerServices, ctx: RequestContext, name: str) -> int | None:
    """The broker a BROKER resource names: on a controller listener any broker (Kafka's ControllerApis: a
    broker forwarding its client's request names itself; --bootstrap-controller names any), elsewhere
    only this node (None: this node or the cluster default)."""
    if name != "" and ctx.listener_name.upper() in services.config.controller_listener_names:
        return _node_id_of(name)
    if name != "":
        check_current_node_id(services, name)
    return None


async def handle(services: BrokerServices, ctx: RequestContext, header: RequestHeader,
           request: IncrementalAlterConfigsRequest) -> IncrementalAlterConfigsResponse:
    if services.kraft is not None:
        return await _forward(services, ctx, header.api_version, request)

    def prepare(r: Any) -> ConfigAlteration | None:
        if r.resource_type == BROKER_LOGGER:
            _alter_broker_loggers(services, ctx, r, request.validate_only)
            return None
        check_config_resource(services, ctx, ACL_ALTER_CONFIGS, r.resource_type, r.resource_name)
        ops = tuple(_ops(r))
        if r.resource_type == TOPIC:
            return TopicConfigsAlteration(r.resource_name, ops)
        if r.resource_type == GROUP:
            if r.resource_name == "":
                raise KafkaError("Default group resources are not allowed.", error_code=ErrorCode.INVALID_REQUEST)
            return GroupConfigsAlteration(r.resource_name, ops)
        default = r.resource_name == ""
        broker_id = forwarded_broker_id(services, ctx, r.resource_name)
        return BrokerConfigsAlteration(default, _broker_changes(services, default, list(ops)), broker_id)

    results = await run_per_resource(services, list(request.resources), prepare, Result, request.validate_only,
                                     _TYPES)
    return IncrementalAlterConfigsResponse(throttle_time_ms=0, responses=results)


def error_response(request: IncrementalAlterConfigsRequest, version: int,
                   error: Any) -> IncrementalAlterConfigsResponse:
    return IncrementalAlterConfigsResponse(throttle_time_ms=0, responses=[
        Result(error_code=int(error), error_message=error.message or None, resource_type=r.resource_type,
               resource_name=r.resource_name)
        for r in request.resources
    ])
