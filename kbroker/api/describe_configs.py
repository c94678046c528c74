"""DescribeConfigs (API key 32, v1-4): topic, broker, broker-logger and group configs with value, source, synonyms.

Topic resources list every topic config (Kafka's `LogConfig` keys) with the effective value: the
topic's override (DYNAMIC_TOPIC_CONFIG), else the broker's synonym keys at the dynamic,
dynamic-default or static level, else Kafka's default. A broker resource named by our node id lists
every broker key; the empty name (cluster-wide default) lists only the dynamic defaults, as Kafka's
`ConfigHelper.describeConfigs` does. Synonym lists follow Kafka's `configSynonyms` (see
`ConfigHelper.config_synonyms`). A BROKER_LOGGER resource lists the process's Python loggers ("root"
and each named one) with their effective level in log4j's names. Sensitive values are null;
synonyms and documentation (v3+) only when asked for. A GROUP resource lists every group config
(`kbroker.coord.group_config`, Kafka's order) for any group id, existing or not, as Kafka does: the
group's override (DYNAMIC_GROUP_CONFIG), else the broker key it falls back to; the empty id is
INVALID_REQUEST. Every answer here was compared with Kafka
4.3.1's (tests/interop/test_admin_differential.py).
"""

from __future__ import annotations

import logging
from typing import Any

from kbroker.api._authz import check_config_resource
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.cluster.configs import ConfigEntry, ConfigSource
from kbroker.config_defs import CONFIG_DEFS
from kbroker.controller.replication_control import validate_topic_name
from kbroker.protocol.errors import ErrorCode, KafkaError, error_fields
from kbroker.protocol.headers import RequestHeader
from kbroker.protocol.messages.describe_configs import DescribeConfigsRequest, DescribeConfigsResponse
from kbroker.security.acl import DESCRIBE_CONFIGS

API_KEY = 32
MIN_VERSION = 1
MAX_VERSION = 4

TOPIC = 2
BROKER = 4
BROKER_LOGGER = 8
GROUP = 32

# Kafka's LogLevelConfig.VALID_LOG_LEVELS, and how Python's levels read in Kafka's (log4j) names.
VALID_LOG_LEVELS = ("FATAL", "ERROR", "WARN", "INFO", "DEBUG", "TRACE")
ROOT_LOGGER = "root"
_TO_KAFKA_LEVEL = {logging.CRITICAL: "FATAL", logging.ERROR: "ERROR", logging.WARNING: "WARN",
                   logging.INFO: "INFO", logging.DEBUG: "DEBUG"}
TO_PYTHON_LEVEL = {"FATAL": logging.CRITICAL, "ERROR": logging.ERROR, "WARN": logging.WARNING,
                   "INFO": logging.INFO, "DEBUG": logging.DEBUG, "TRACE": 5}

Result = DescribeConfigsResponse.DescribeConfigsResult
Entry = DescribeConfigsResponse.DescribeConfigsResourceResult
Synonym = DescribeConfigsResponse.DescribeConfigsSynonym

# Kafka's `ConfigDef.Type` order, which DescribeConfigs v3+ puts on the wire.
_CONFIG_TYPES = {"boolean": 1, "string": 2, "int": 3, "short": 4, "long": 5, "double": 6, "list": 7,
                 "class": 8, "password": 9}


def broker_config_entries(services: BrokerServices, resource_name: str, keys: set[str] | None,
                          include_synonyms: bool, include_documentation: bool) -> list[ConfigEntry]:
    """Kafka's `createBrokerConfigEntry` for our node (`resource_name` = node id) or the cluster default ("")."""
    tm = services.configs
    defs = CONFIG_DEFS
    per_broker = resource_name != ""
    dynamic_default = tm.dynamic_broker_configs(default=True)
    if per_broker:
        # Kafka lists every config it knows plus any custom key set dynamically.
        names = sorted(set(defs) | set(tm.dynamic_broker_configs(default=False)) | set(dynamic_default))
    else:
        names = sorted(dynamic_default)
    entries: list[ConfigEntry] = []
    for name in names:
        if keys is not None and name not in keys:
            continue
        d = defs.get(name)
        synonyms = tm.config_synonyms(_synonym_keys(name), name, per_broker=per_broker)
        sensitive = d is not None and d.sensitive  # d is None for a custom dynamic key
        source = synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG
        if per_broker:
            own = tm.broker_levels(name)
            value = own[0].value if own else None
        else:
            value = dynamic_default.get(name)
        if sensitive:
            value = None
            synonyms = [s._replace(value=None) for s in synonyms]
        entries.append(ConfigEntry(
            name=name,
            value=value,
            source=int(source),
            is_default=source == ConfigSource.DEFAULT_CONFIG,
            read_only=d is None or not d.dynamic_update,
            sensitive=sensitive,
            synonyms=synonyms if include_synonyms else [],
            config_type=0 if d is None else _CONFIG_TYPES.get(d.described_type, 0),
            documentation=(d.doc or None) if d is not None and include_documentation else None,
        ))
    return entries


def _synonym_keys(name: str) -> list[str]:
    """Kafka's `DynamicBrokerConfig.brokerConfigSynonyms`: the ms/minutes/hours families."""
    from kbroker.log.config import TOPIC_CONFIGS

    for defn in TOPIC_CONFIGS:
        keys = [k for k, _ in defn.synonyms]
        if name in keys and len(keys) > 1:
            return keys
    return [name]


def broker_loggers() -> dict[str, logging.Logger]:
    """The loggers `kafka-configs --entity-type broker-loggers` sees: root and every named logger."""
    loggers: dict[str, logging.Logger] = {ROOT_LOGGER: logging.getLogger()}
    for name, obj in sorted(logging.root.manager.loggerDict.items()):
        if isinstance(obj, logging.Logger):
            loggers[name] = obj
    return loggers


def _kafka_level(logger: logging.Logger) -> str:
    level = logger.getEffectiveLevel()
    if level <= 5:
        return "TRACE"
    for threshold in (logging.CRITICAL, logging.ERROR, logging.WARNING, logging.INFO):
        if level >= threshold:
            return _TO_KAFKA_LEVEL[threshold]
    return "DEBUG"


def logger_entries(keys: set[str] | None) -> list[ConfigEntry]:
    """Kafka's BROKER_LOGGER description: each logger's effective level, source DYNAMIC_BROKER_LOGGER_CONFIG."""
    return [
        ConfigEntry(name=name, value=_kafka_level(logger), source=int(ConfigSource.DYNAMIC_BROKER_LOGGER_CONFIG),
                    is_default=False, read_only=False, sensitive=False, synonyms=[], config_type=2)
        for name, logger in broker_loggers().items()
        if keys is None or name in keys
    ]


def check_broker_resource(services: BrokerServices, name: str) -> None:
    """A BROKER resource must name our node id, or be "" (the cluster-wide default)."""
    if name == "":
        return
    try:
        broker_id = int(name)
    except ValueError:
        raise KafkaError(f"Broker id must be an integer, but it is: {name}",
                         error_code=ErrorCode.INVALID_REQUEST) from None
    if broker_id != services.node_id:
        raise KafkaError(f"Unexpected broker id, expected {services.node_id} or empty string, "
                         f"but received {name}", error_code=ErrorCode.INVALID_REQUEST)


def _describe(services: BrokerServices, resource: Any, include_synonyms: bool, include_documentation: bool) -> list[ConfigEntry]:
    keys = set(resource.configuration_keys) if resource.configuration_keys is not None else None
    if resource.resource_type == TOPIC:
        validate_topic_name(resource.resource_name)
        tm = services.configs
        if services.metadata.topic(resource.resource_name) is None:
            raise KafkaError(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        return list(tm.describe_topic_configs(resource.resource_name, keys, include_synonyms, include_documentation))
    if resource.resource_type == BROKER:
        name = resource.resource_name or ""
        check_broker_resource(services, name)
        return broker_config_entries(services, name, keys, include_synonyms, include_documentation)
    if resource.resource_type == BROKER_LOGGER:
        check_broker_resource(services, resource.resource_name or str(services.node_id))
        return logger_entries(keys)
    if resource.resource_type == GROUP:
        if not resource.resource_name:
            raise KafkaError("Group name must not be empty", error_code=ErrorCode.INVALID_REQUEST)
        return services.configs.describe_group_configs(resource.resource_name, keys, include_synonyms,
                                                       include_documentation)
    raise KafkaError(f"Unsupported resource type: {resource.resource_type}", error_code=ErrorCode.INVALID_REQUEST)


# Kafka's ConfigResource.Type ids; any other id fails the whole request (INVALID_REQUEST for every
# resource, with Errors.INVALID_REQUEST's message), checked against Kafka 4.3.1.
_KNOWN_RESOURCE_TYPES = frozenset({2, 4, 8, 16, 32})
_INVALID_REQUEST_MESSAGE = ("This most likely occurs because of a request being malformed by the client library "
                            "or the message was sent to an incompatible broker. See the broker logs for more details.")


def handle(services: BrokerServices, ctx: RequestContext, header: RequestHeader, request: DescribeConfigsRequest) -> DescribeConfigsResponse:
    if any(r.resource_type not in _KNOWN_RESOURCE_TYPES for r in request.resources):
        return DescribeConfigsResponse(throttle_time_ms=0, results=[
            Result(error_code=int(ErrorCode.INVALID_REQUEST), error_message=_INVALID_REQUEST_MESSAGE,
                   resource_type=r.resource_type, resource_name=r.resource_name, configs=[])
            for r in request.resources])
    results = []
    for resource in request.resources:
        try:
            check_config_resource(services, ctx, DESCRIBE_CONFIGS, resource.resource_type, resource.resource_name)
            entries = _describe(services, resource, request.include_synonyms, request.include_documentation)
        except Exception as e:  # noqa: BLE001 - every failure becomes this resource's error
            code, message = error_fields(e)
            # Kafka's ConfigHelper leaves ErrorMessage at its generated default, "", unless an
            # exception carried a message (an unknown topic is answered by the code alone).
            results.append(Result(error_code=code, error_message=message or "", resource_type=resource.resource_type,
                                  resource_name=resource.resource_name, configs=[]))
            continue
        configs = [
            Entry(name=e.name, value=e.value, read_only=e.read_only, config_source=e.source,
                  is_sensitive=e.sensitive,
                  synonyms=[Synonym(name=s.name, value=s.value, source=int(s.source)) for s in e.synonyms],
                  config_type=e.config_type, documentation=e.documentation)
            for e in entries
        ]
        results.append(Result(error_code=0, error_message="", resource_type=resource.resource_type,
                              resource_name=resource.resource_name, configs=configs))
    return DescribeConfigsResponse(throttle_time_ms=0, results=results)


def error_response(request: DescribeConfigsRequest, version: int, error: Any) -> DescribeConfigsResponse:
    return DescribeConfigsResponse(throttle_time_ms=0, results=[
        Result(error_code=int(error), error_message=error.message or None, resource_type=r.resource_type,
               resource_name=r.resource_name, configs=[])
        for r in request.resources
    ])
