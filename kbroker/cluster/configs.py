"""Config resolution for topics and the broker (Kafka's `ConfigHelper`, with the validation rules of its
controller-side `ConfigurationControlManager`).

Owns topic-config validation (Kafka's `LogConfig.validate` wording), the levels a broker key is set at
(dynamic, dynamic default, static, default) and the synonym lists DescribeConfigs shows, the description
of a topic's configs (value, source, synonyms), and the new override sets Incremental/legacy
AlterConfigs and dynamic broker config changes produce. It writes nothing: the controller
(kbroker.controller.configuration_control) turns those sets into `ConfigRecord`s, and the
`DynamicConfigPublisher` hands changed configs to the live logs.

Reads the metadata image through `MetadataCache`; must not import net/, api/, replica/ or the broker
wiring (the broker config object is handed in: its type is imported for the type checker only).
The broker config table (`kbroker.config_defs.CONFIG_DEFS`) is pure data and imported directly.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from enum import IntEnum
from typing import TYPE_CHECKING, Any, NamedTuple

from kbroker.config_defs import CONFIG_DEFS
from kbroker.coord.group_config import GROUP_CONFIG_DEFS, GroupConfig, validate_group_configs
from kbroker.log.config import (
    TOPIC_CONFIGS,
    TOPIC_CONFIGS_BY_NAME,
    ConfigType,
    LogConfig,
    TopicConfigDef,
)
from kbroker.metadata.cache import MetadataCache
from kbroker.metadata.image import ConfigResource, ConfigResourceType
from kbroker.metadata.views import DYNAMIC_DEFAULT_PREFIX as _DYNAMIC_DEFAULT_PREFIX
from kbroker.protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kbroker.config import KafkaConfig

__all__ = [
    "AlterConfigOp",
    "ConfigEntry",
    "ConfigSource",
    "ConfigSynonym",
    "ConfigHelper",
    "parse_broker_value",
    "render",
]


class ConfigSource(IntEnum):
    """DescribeConfigs `config_source` ids (Kafka's `DescribeConfigsResponse.ConfigSource`)."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    DYNAMIC_GROUP_CONFIG = 8


class AlterConfigOp(IntEnum):
    """IncrementalAlterConfigs `config_operation` ids (KIP-339)."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


class ConfigSynonym(NamedTuple):
    name: str
    value: str | None
    source: int


class ConfigEntry(NamedTuple):
    """One described config. The first seven fields are the contract's tuple."""

    name: str
    value: str | None
    source: int
    is_default: bool
    read_only: bool
    sensitive: bool
    synonyms: list[ConfigSynonym]
    config_type: int = ConfigType.UNKNOWN
    documentation: str | None = None


def _err(code: ErrorCode, message: str | None = None) -> KafkaError:
    return KafkaError(message, error_code=code)


_TYPE_NAMES = {ConfigType.INT: "INT", ConfigType.LONG: "LONG", ConfigType.SHORT: "SHORT"}
_INT_BOUNDS = {ConfigType.INT: 2**31, ConfigType.LONG: 2**63, ConfigType.SHORT: 2**15}
_CLEANUP_POLICIES = ("compact", "delete")


def _parse_problem(defn: TopicConfigDef, value: str) -> str | None:
    """Kafka's `ConfigDef.parseType` wording for a value that does not parse (ranges are the log layer's)."""
    text = value.strip()
    if defn.type in _TYPE_NAMES:
        try:
            number = int(text)
        except ValueError:
            return f"Not a number of type {_TYPE_NAMES[defn.type]}"
        bound = _INT_BOUNDS[defn.type]
        return None if -bound <= number < bound else f"Not a number of type {_TYPE_NAMES[defn.type]}"
    if defn.type == ConfigType.DOUBLE:
        try:
            float(text)
        except ValueError:
            return "Not a number of type DOUBLE"
    if defn.type == ConfigType.BOOLEAN and text.lower() not in ("true", "false"):
        return "Expected value to be either true or false"
    return None


def _bad_list_item(defn: TopicConfigDef, value: str) -> str | None:
    """Kafka's ValidList reports the first offending element as the invalid value."""
    if defn.name == "cleanup.policy":
        for item in (x.strip() for x in value.split(",")):
            if item and item not in _CLEANUP_POLICIES:
                return item
    return None


def render(value: Any) -> str | None:
    """A typed broker-config value as Kafka renders it in DescribeConfigs."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return str(value)


# Distinct (broker configs, topic overrides) pairs whose LogConfig is kept (`ConfigHelper.log_config`).
_LOG_CONFIG_CACHE_SIZE = 256


class ConfigHelper:
    """Resolves, validates and describes topic and dynamic broker configs (Kafka's `ConfigHelper` and
    the validation half of its `ConfigurationControlManager`).

    Reads the current metadata image through the `MetadataCache`; computes new override sets for the
    controller (`incremental_topic_configs`, `altered_broker_configs`) without writing anything:
    the controller turns them into records.
    """

    def __init__(self, config: KafkaConfig, metadata: MetadataCache) -> None:
        self.config = config
        self.metadata = metadata
        self._log_configs: dict[tuple[frozenset[tuple[str, str]], frozenset[tuple[str, str]]], LogConfig] = {}

    # -- broker config access ----------------------------------------------------------------

    def _static(self, key: str) -> tuple[str | None, int]:
        """(value, source) of a broker key from the static config: STATIC_BROKER_CONFIG or DEFAULT_CONFIG."""
        if key not in self.config:  # a key the broker config does not define (log.local.retention.*)
            return None, ConfigSource.UNKNOWN
        return render(self.config[key]), ConfigSource[self.config.source(key)]

    def dynamic_broker_configs(self, default: bool, stored: Mapping[str, str] | None = None) -> dict[str, str]:
        """Dynamic broker overrides: per-broker (`default=False`) or cluster-wide defaults.

        Both live in the image's one `broker_configs` map; cluster-wide defaults (resource name "")
        carry the `<default>/` prefix so the two levels keep Kafka's precedence and sources.
        """
        out: dict[str, str] = {}
        for key, value in (self.metadata.broker_configs if stored is None else stored).items():
            if key.startswith(_DYNAMIC_DEFAULT_PREFIX) == default:
                out[key[len(_DYNAMIC_DEFAULT_PREFIX):] if default else key] = value
        return out

    def broker_levels(self, key: str, stored: Mapping[str, str] | None = None) -> list[ConfigSynonym]:
        """Every level that sets `key`, highest precedence first (dynamic, dynamic default, static, default)."""
        levels: list[ConfigSynonym] = []
        per_broker = self.dynamic_broker_configs(False, stored)
        if key in per_broker:
            levels.append(ConfigSynonym(key, per_broker[key], ConfigSource.DYNAMIC_BROKER_CONFIG))
        defaults = self.dynamic_broker_configs(True, stored)
        if key in defaults:
            levels.append(ConfigSynonym(key, defaults[key], ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG))
        value, source = self._static(key)
        if source == ConfigSource.UNKNOWN:
            value, source = self._config_default(key)
        elif source == ConfigSource.STATIC_BROKER_CONFIG:
            levels.append(ConfigSynonym(key, value, ConfigSource.STATIC_BROKER_CONFIG))
            # Kafka lists the default under the static value when the key has one.
            value, source = self._config_default(key)
        if source == ConfigSource.DEFAULT_CONFIG and value is not None:
            levels.append(ConfigSynonym(key, value, ConfigSource.DEFAULT_CONFIG))
        return levels

    def _config_default(self, key: str) -> tuple[str | None, int]:
        d = CONFIG_DEFS.get(key)
        if d is not None:
            return render(d.default), ConfigSource.DEFAULT_CONFIG
        # A broker key the broker config does not define (log.local.retention.*, tiered storage):
        # its default is the topic config's, when the two share a unit.
        for defn in TOPIC_CONFIGS:
            if (key, 1) in defn.synonyms:
                return defn.default_string(), ConfigSource.DEFAULT_CONFIG
        return None, ConfigSource.UNKNOWN

    def config_synonyms(self, keys: Sequence[str], primary: str, *, per_broker: bool = True) -> list[ConfigSynonym]:
        """Kafka's `ConfigHelper.configSynonyms`: every level of every key of a synonym family.

        Level-major (dynamic, dynamic default, static, default; keys in precedence order inside a
        level), then everything before the first entry named `primary` is dropped: so a family whose
        primary key (`log.retention.ms` for retention.ms) is set nowhere lists no synonyms at all,
        exactly as Kafka answers. The cluster-default resource keeps only dynamic-default entries.
        """
        levels = [self.broker_levels(k) for k in keys]
        out = [s for source in (ConfigSource.DYNAMIC_BROKER_CONFIG, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
                                ConfigSource.STATIC_BROKER_CONFIG, ConfigSource.DEFAULT_CONFIG)
               for lv in levels for s in lv if s.source == source]
        while out and out[0].name != primary:
            out.pop(0)
        if not per_broker:
            out = [s for s in out if s.source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG]
        return out

    def broker_props(self, stored: Mapping[str, str] | None = None) -> dict[str, str]:
        """The broker keys that topic configs fall back to, as set at any non-default level."""
        props: dict[str, str] = {}
        for defn in TOPIC_CONFIGS:
            for key, _ in defn.synonyms:
                for level in self.broker_levels(key, stored):
                    if level.source != ConfigSource.DEFAULT_CONFIG and level.value is not None:
                        props[key] = level.value
                        break
        return props

    def log_config(self, overrides: Mapping[str, str]) -> LogConfig:
        """The `LogConfig` a topic with these overrides runs with (broker synonyms, then Kafka defaults).

        Resolving the broker's synonyms walks every topic config's levels (about 0.2 ms); hosting a
        topic's thousand new partitions asked it a thousand times for the same answer (a fifth of the
        hosting time, issue 17). So the result is kept per (dynamic broker configs, topic overrides): the
        static config never changes after start, and any change to the other two is a new key. Each
        caller gets its own copy."""
        key = (frozenset(self.metadata.broker_configs.items()), frozenset(overrides.items()))
        cached = self._log_configs.get(key)
        if cached is None:
            if len(self._log_configs) >= _LOG_CONFIG_CACHE_SIZE:
                self._log_configs.clear()
            cached = self._log_configs[key] = LogConfig.from_props(self.broker_props(), overrides)
        return copy.copy(cached)

    def config_for_topic(self, name: str) -> LogConfig | None:
        """The LogConfig a new log of topic `name` opens with (LogManager's `config_for_topic` hook)."""
        info = self.metadata.topic(name)
        return None if info is None else self.log_config(info.configs)

    # -- validation ------------------------------------------------------------------------------

    def validate_topic_configs(self, configs: Mapping[str, str | None]) -> dict[str, str]:
        """Kafka's `LogConfig.validate` for a topic's full override set; INVALID_CONFIG on failure."""
        nulls = [k for k, v in configs.items() if v is None]
        if nulls:
            raise _err(ErrorCode.INVALID_CONFIG, f"Null value not supported for topic configs: {','.join(nulls)}")
        clean = {k: str(v) for k, v in configs.items()}
        for name, value in clean.items():
            defn = TOPIC_CONFIGS_BY_NAME.get(name)
            if defn is None:
                raise _err(ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {name}")
            problem = _parse_problem(defn, value)
            if problem:
                raise _err(ErrorCode.INVALID_CONFIG, f"Invalid value {value} for configuration {name}: {problem}")
            item = _bad_list_item(defn, value)
            if item is not None:
                raise _err(ErrorCode.INVALID_CONFIG, f"Invalid value {item} for configuration {name}: "
                           f"String must be one of: {', '.join(_CLEANUP_POLICIES)}")
        try:
            cfg = self.log_config(clean)
        except ValueError as e:
            raise _err(ErrorCode.INVALID_CONFIG, str(e)) from None
        if cfg.min_compaction_lag_ms > cfg.max_compaction_lag_ms:
            raise _err(
                ErrorCode.INVALID_CONFIG,
                f"conflict topic config setting min.compaction.lag.ms ({cfg.min_compaction_lag_ms}) > "
                f"max.compaction.lag.ms ({cfg.max_compaction_lag_ms})",
            )
        if cfg.remote_storage_enable:
            # No tiered storage here: Kafka answers the same when remote.log.storage.system.enable=false.
            raise _err(
                ErrorCode.INVALID_CONFIG,
                "Tiered Storage functionality is disabled in the broker. Topic cannot be configured "
                "with remote log storage.",
            )
        return clean

    # -- topic configs ------------------------------------------------------------------------------

    def incremental_topic_configs(
        self, current: Mapping[str, str], ops: Iterable[tuple[str, int, str | None]]
    ) -> dict[str, str]:
        """IncrementalAlterConfigs (KIP-339) on a topic's overrides: SET, DELETE, APPEND, SUBTRACT;
        the validated new override set."""
        new: dict[str, str | None] = dict(current)
        for key, op, value in ops:
            try:
                op = AlterConfigOp(op)
            except ValueError:
                raise _err(ErrorCode.INVALID_REQUEST, f"Unknown alter configs op type {op}") from None
            if op == AlterConfigOp.SET:
                new[key] = value  # None is refused by validation below
            elif op == AlterConfigOp.DELETE:
                new.pop(key, None)
            else:
                defn = TOPIC_CONFIGS_BY_NAME.get(key)
                if defn is None:
                    raise _err(ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {key}")
                if defn.type != ConfigType.LIST:
                    raise _err(ErrorCode.INVALID_CONFIG,
                               f"Can't {op.name} to key {key} because its type is not LIST.")
                existing = new.get(key)
                if existing is None:
                    existing = self.log_config({}).to_props().get(key, "")
                items = [x.strip() for x in existing.split(",") if x.strip()]
                given = [x.strip() for x in (value or "").split(",") if x.strip()]
                if op == AlterConfigOp.APPEND:
                    items += [x for x in given if x not in items]
                else:
                    items = [x for x in items if x not in given]
                new[key] = ",".join(items)
        return self.validate_topic_configs(new)

    def describe_topic_configs(
        self, name: str, keys: Iterable[str] | None = None,
        include_synonyms: bool = False, include_documentation: bool = False,
    ) -> list[ConfigEntry]:
        """Every config of topic `name` with its effective value and source (Kafka's `createTopicConfigEntry`)."""
        info = self.metadata.topic(name)
        if info is None:
            raise _err(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        return self.describe_configs_for_overrides(info.configs, keys, include_synonyms, include_documentation)

    def describe_configs_for_overrides(
        self, overrides: Mapping[str, str], keys: Iterable[str] | None = None,
        include_synonyms: bool = False, include_documentation: bool = False, *, for_creation: bool = False,
    ) -> list[ConfigEntry]:
        """The description of a topic with these overrides (also for validate-only CreateTopics).

        `for_creation`: the source as CreateTopics v5+ reports it (KIP-525). Kafka's controller
        resolves it differently from DescribeConfigs: the first level (dynamic, dynamic default,
        static) at which any synonym key is set, without DescribeConfigs' primary-key rule, so
        `log.retention.hours` set statically makes retention.ms STATIC_BROKER_CONFIG there.
        """
        wanted = set(keys) if keys is not None else None
        values = self.log_config(overrides).to_props()
        entries = []
        for defn in sorted(TOPIC_CONFIGS, key=lambda d: d.name):
            if defn.internal or (wanted is not None and defn.name not in wanted):
                continue
            entry = self._topic_entry(defn, overrides, values, include_synonyms, include_documentation)
            if for_creation and defn.name not in overrides:
                entry = entry._replace(source=self._creation_source(defn))
            entries.append(entry)
        return entries

    def _creation_source(self, defn: TopicConfigDef) -> int:
        levels = [s.source for key, _ in defn.synonyms for s in self.broker_levels(key)]
        for source in (ConfigSource.DYNAMIC_BROKER_CONFIG, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
                       ConfigSource.STATIC_BROKER_CONFIG):
            if source in levels:
                return int(source)
        return int(ConfigSource.DEFAULT_CONFIG)

    def _topic_entry(self, defn: TopicConfigDef, overrides: Mapping[str, str], values: Mapping[str, str],
                     include_synonyms: bool, include_documentation: bool) -> ConfigEntry:
        synonyms: list[ConfigSynonym] = []
        if defn.name in overrides:
            synonyms.append(ConfigSynonym(defn.name, overrides[defn.name], ConfigSource.DYNAMIC_TOPIC_CONFIG))
        keys = [key for key, _ in defn.synonyms]
        if keys:
            synonyms.extend(self.config_synonyms(keys, keys[0]))
        source = synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG
        value = values.get(defn.name, defn.default_string())
        if defn.sensitive:
            value = None
            synonyms = [s._replace(value=None) for s in synonyms]
        return ConfigEntry(
            name=defn.name,
            value=value,
            source=int(source),
            is_default=source == ConfigSource.DEFAULT_CONFIG,
            read_only=False,
            sensitive=defn.sensitive,
            synonyms=synonyms if include_synonyms else [],
            config_type=defn.type,
            documentation=(defn.doc or None) if include_documentation else None,
        )

    # -- group configs (the GROUP resource) ---------------------------------------------------------

    def broker_value(self, key: str) -> object:
        """A broker key's typed value (group configs fall back to and are bounded by these)."""
        return self.config[key] if key in self.config else None

    def stored_group_configs(self, group_id: str) -> Mapping[str, str]:
        """The group's dynamic configs in the metadata image."""
        return self.metadata.image.configs.config_map(ConfigResource(ConfigResourceType.GROUP, group_id))

    def group_config(self, group_id: str) -> GroupConfig:
        """What group `group_id` runs with: its overrides over the broker's keys, within the broker's bounds."""
        return GroupConfig.evaluate(self.stored_group_configs(group_id), self.broker_value)

    def incremental_group_configs(
        self, current: Mapping[str, str], ops: Iterable[tuple[str, int, str | None]]
    ) -> dict[str, str]:
        """IncrementalAlterConfigs on a group's overrides (SET, DELETE; the keys are not lists), validated
        as Kafka's `GroupConfig.validate`."""
        new: dict[str, str] = dict(current)
        for key, op, value in ops:
            try:
                op = AlterConfigOp(op)
            except ValueError:
                raise _err(ErrorCode.INVALID_REQUEST, f"Unknown alter configs op type {op}") from None
            if op == AlterConfigOp.SET:
                if value is None:
                    raise _err(ErrorCode.INVALID_REQUEST, f"Null value not supported for : {key}")
                new[key] = value
            elif op == AlterConfigOp.DELETE:
                new.pop(key, None)
            else:
                raise _err(ErrorCode.INVALID_CONFIG, f"Can't {op.name} to key {key} because its type is not LIST.")
        validate_group_configs(new, self.broker_value)
        return new

    def describe_group_configs(self, group_id: str, keys: Iterable[str] | None = None,
                               include_synonyms: bool = False, include_documentation: bool = False
                               ) -> list[ConfigEntry]:
        """Every group config of `group_id` (Kafka's `ConfigHelper.createGroupConfigEntry`): the override
        (DYNAMIC_GROUP_CONFIG), else the broker key it falls back to, else Kafka's default."""
        wanted = set(keys) if keys is not None else None
        overrides = self.stored_group_configs(group_id)
        entries = []
        for defn in GROUP_CONFIG_DEFS:
            if wanted is not None and defn.name not in wanted:
                continue
            synonyms: list[ConfigSynonym] = []
            if defn.name in overrides:
                synonyms.append(ConfigSynonym(defn.name, overrides[defn.name], ConfigSource.DYNAMIC_GROUP_CONFIG))
            if defn.broker_synonym is not None:
                synonyms.extend(self.broker_levels(defn.broker_synonym))
            else:
                synonyms.append(ConfigSynonym(defn.name, defn.default, ConfigSource.DEFAULT_CONFIG))
            first = synonyms[0]
            entries.append(ConfigEntry(
                name=defn.name, value=first.value, source=int(first.source),
                is_default=first.source == ConfigSource.DEFAULT_CONFIG, read_only=False, sensitive=False,
                synonyms=synonyms if include_synonyms else [],
                config_type={"boolean": ConfigType.BOOLEAN, "int": ConfigType.INT}.get(defn.type, ConfigType.STRING),
                documentation=defn.doc if include_documentation else None,
            ))
        return entries

    # -- dynamic broker configs -----------------------------------------------------------------------

    def altered_broker_configs(self, default: bool, changes: Mapping[str, str | None],
                               stored: Mapping[str, str]) -> dict[str, str]:
        """The dynamic broker configs after setting (value) or deleting (None) `changes` at one level.

        As Kafka's broker-side validation: a known key that is not dynamically updatable, or a value
        that does not parse or validate, refuses the whole resource with INVALID_REQUEST; a key
        the broker does not know is stored as a custom config.
        """
        defs = CONFIG_DEFS
        not_dynamic = sorted(k for k in changes if k in defs and not defs[k].dynamic_update)
        if not_dynamic:
            # Kafka renders the offending keys as a Java collection: "[a, b]".
            raise _err(ErrorCode.INVALID_REQUEST,
                       f"Cannot update these configs dynamically: [{', '.join(not_dynamic)}]")
        for key, value in changes.items():
            if value is None or key not in defs:
                continue
            defn = defs[key]
            try:
                typed = parse_broker_value(defn.type, value)
                if defn.validator is not None:
                    defn.validator(key, typed)
            except ValueError as e:
                message = str(e)
                if not message.startswith("Invalid value"):
                    message = f"Invalid value {value} for configuration {key}: {message}"
                raise _err(ErrorCode.INVALID_REQUEST, message) from None
        for key in _REPLICATION_THROTTLED_RATES.intersection(changes):
            # Kafka's DynamicConfig.Broker (KIP-73): LONG, at least 0; not in the broker's config table
            # (Kafka's DescribeConfigs lists them only once set).
            value = changes[key]
            if value is None:
                continue
            try:
                rate = int(value.strip())
            except ValueError:
                raise _err(ErrorCode.INVALID_REQUEST, f"Invalid value {value} for configuration {key}: "
                           "Not a number of type LONG") from None
            if rate < 0:
                raise _err(ErrorCode.INVALID_REQUEST,
                           f"Invalid value {value} for configuration {key}: Value must be at least 0")
        new = dict(stored)
        prefix = _DYNAMIC_DEFAULT_PREFIX if default else ""
        for key, value in changes.items():
            if value is None:
                new.pop(prefix + key, None)
            else:
                new[prefix + key] = str(value)
        # Topic configs fall back to these keys: refuse a value no topic's LogConfig would accept.
        try:
            LogConfig.from_props(self.broker_props(new), {})
        except ValueError as e:
            raise _err(ErrorCode.INVALID_REQUEST, str(e)) from None
        return new




_REPLICATION_THROTTLED_RATES = frozenset({"leader.replication.throttled.rate", "follower.replication.throttled.rate"})


def parse_broker_value(config_type: str, raw: str) -> Any:
    """Kafka's `ConfigDef.parseType` for a dynamic broker value; ValueError with Kafka's wording."""
    text = raw.strip()
    if config_type in ("int", "long", "short"):
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"Not a number of type {config_type.upper()}") from None
    if config_type == "double":
        try:
            return float(text)
        except ValueError:
            raise ValueError("Not a number of type DOUBLE") from None
    if config_type == "boolean":
        if text.lower() not in ("true", "false"):
            raise ValueError("Expected value to be either true or false")
        return text.lower() == "true"
    if config_type == "list":
        return [x.strip() for x in text.split(",") if x.strip()]
    return text if config_type != "password" else raw
