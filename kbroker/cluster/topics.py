"""Topic administration on a single node: create, delete and grow topics.

Owns `TopicManager`, the one place that changes the topic part of the metadata image (Kafka's
`ReplicationControlManager`; a single node has no controller quorum), Kafka's topic-name rules and
manual-assignment checks, and `error_fields`. Config resolution (topic-config validation and
description, synonyms, dynamic broker configs) is `kbroker.cluster.configs`: `TopicManager` keeps its
config methods and delegates them there, and this module re-exports the config names other code
imports from it. Every error is a `KafkaError` carrying Kafka's error code and, where Kafka sends one,
Kafka's error message.

Persists through `MetadataStore` and creates/removes partitions through the `ReplicaManager`; must
not import net/, api/ or the broker wiring (the broker config object is handed in: its type is
imported for the type checker only). Which topics are internal is Kafka's `Topic.isInternal`
(`kbroker.protocol.topic`).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from kbroker.cluster.configs import (
    AlterConfigOp,
    ConfigEntry,
    ConfigSource,
    ConfigSynonym,
    ConfigurationControlManager,
    _err,
    parse_broker_value,
    render,
)
from kbroker.cluster.metadata import MetadataStore, TopicInfo
from kbroker.log.config import LogConfig
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.topic import CLUSTER_METADATA_TOPIC_NAME, is_internal

if TYPE_CHECKING:
    from kbroker.config import KafkaConfig
    from kbroker.replica.replica_manager import ReplicaManager

__all__ = [
    "AlterConfigOp",
    "ConfigEntry",
    "ConfigSource",
    "ConfigSynonym",
    "TopicManager",
    "parse_broker_value",
    "render",
    "validate_topic_name",
]

MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")


def validate_topic_name(name: str | None) -> None:
    """Kafka's `Topic.validate`, with Kafka 4.3's messages; raises INVALID_TOPIC_EXCEPTION."""
    problem = None
    if not name:
        problem = "the empty string is not allowed"
    elif name in (".", ".."):
        problem = f"'{name}' is not allowed"
    elif len(name) > MAX_TOPIC_NAME_LENGTH:
        problem = f"the length of '{name}' is longer than the max allowed length {MAX_TOPIC_NAME_LENGTH}"
    elif not _LEGAL_TOPIC_NAME.fullmatch(name):
        problem = f"'{name}' contains one or more characters other than ASCII alphanumerics, '.', '_' and '-'"
    if problem is not None:
        raise _err(ErrorCode.INVALID_TOPIC_EXCEPTION, f"Topic name is invalid: {problem}")


def _collision_key(name: str) -> str:
    # Kafka's `Topic.unifyCollisionChars`: '.' and '_' collide in metric names.
    return name.replace(".", "_")


def _new_topic_id() -> uuid.UUID:
    # Kafka's `Uuid.randomUuid` never hands out an id whose base64 form starts with '-' (command-line
    # tools would take it for an option), nor the zero id.
    while True:
        tid = uuid.uuid4()
        if tid.bytes[0] >> 2 != 62 and tid.int != 0:
            return tid


class TopicManager:
    """Creates, deletes, grows and configures topics, keeping the metadata image and the logs in step."""

    def __init__(self, config: KafkaConfig, metadata: MetadataStore, replica_manager: ReplicaManager,
                 *, node_id: int | None = None) -> None:
        self.config = config
        self.metadata = metadata
        self.replica_manager = replica_manager
        self.node_id = int(node_id if node_id is not None else config.node_id)
        self.configs = ConfigurationControlManager(config, self.metadata, self.replica_manager)

    # -- config resolution: delegated to `ConfigurationControlManager` (kbroker.cluster.configs) ------

    def dynamic_broker_configs(self, default: bool, stored: Mapping[str, str] | None = None) -> dict[str, str]:
        """Dynamic broker overrides: per-broker (`default=False`) or cluster-wide defaults."""
        return self.configs.dynamic_broker_configs(default, stored)

    def broker_levels(self, key: str, stored: Mapping[str, str] | None = None) -> list[ConfigSynonym]:
        """Every level that sets `key`, highest precedence first (dynamic, dynamic default, static, default)."""
        return self.configs.broker_levels(key, stored)

    def config_synonyms(self, keys: Sequence[str], primary: str, *, per_broker: bool = True) -> list[ConfigSynonym]:
        """Kafka's `ConfigHelper.configSynonyms`: every level of every key of a synonym family."""
        return self.configs.config_synonyms(keys, primary, per_broker=per_broker)

    def broker_props(self, stored: Mapping[str, str] | None = None) -> dict[str, str]:
        """The broker keys that topic configs fall back to, as set at any non-default level."""
        return self.configs.broker_props(stored)

    def log_config(self, overrides: Mapping[str, str]) -> LogConfig:
        """The `LogConfig` a topic with these overrides runs with (broker synonyms, then Kafka defaults)."""
        return self.configs.log_config(overrides)

    def config_for_topic(self, name: str) -> LogConfig | None:
        """The LogConfig a new log of topic `name` opens with (LogManager's `config_for_topic` hook)."""
        return self.configs.config_for_topic(name)

    def validate_topic_configs(self, configs: Mapping[str, str | None]) -> dict[str, str]:
        """Kafka's `LogConfig.validate` for a topic's full override set; INVALID_CONFIG on failure."""
        return self.configs.validate_topic_configs(configs)

    def incremental_alter_topic_configs(
        self, name: str, ops: Iterable[tuple[str, int, str | None]], validate_only: bool = False
    ) -> TopicInfo:
        """IncrementalAlterConfigs (KIP-339) on a topic: SET, DELETE, APPEND, SUBTRACT."""
        return self.configs.incremental_alter_topic_configs(name, ops, validate_only)

    def alter_topic_configs(self, name: str, configs: Mapping[str, str | None],
                            validate_only: bool = False) -> TopicInfo:
        """Legacy AlterConfigs on a topic: the given set replaces every override."""
        return self.configs.alter_topic_configs(name, configs, validate_only)

    def describe_topic_configs(
        self, name: str, keys: Iterable[str] | None = None,
        include_synonyms: bool = False, include_documentation: bool = False,
    ) -> list[ConfigEntry]:
        """Every topic config with its effective value and source (Kafka's `createTopicConfigEntry`)."""
        return self.configs.describe_configs_for_overrides(self.topic(name).configs, keys, include_synonyms,
                                                           include_documentation)

    def describe_configs_for_overrides(
        self, overrides: Mapping[str, str], keys: Iterable[str] | None = None,
        include_synonyms: bool = False, include_documentation: bool = False, *, for_creation: bool = False,
    ) -> list[ConfigEntry]:
        """The description of a topic with these overrides (also for validate-only CreateTopics)."""
        return self.configs.describe_configs_for_overrides(overrides, keys, include_synonyms,
                                                           include_documentation, for_creation=for_creation)

    def alter_broker_configs(self, default: bool, changes: Mapping[str, str | None],
                             validate_only: bool = False) -> None:
        """Set (value) or delete (None) dynamic broker configs at one level, then re-apply topic configs."""
        self.configs.alter_broker_configs(default, changes, validate_only)

    # -- validation ------------------------------------------------------------------------------

    def _check_name_free(self, name: str) -> None:
        if self.metadata.topic(name) is not None:
            raise _err(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        key = _collision_key(name)
        for other in self.metadata.topics():
            if _collision_key(other.name) == key:
                raise _err(ErrorCode.INVALID_TOPIC_EXCEPTION,
                           f"Topic '{name}' collides with existing topic: {other.name}")

    def _validate_assignment(self, broker_ids: Sequence[int], replication_factor: int | None) -> None:
        """Kafka's `validateManualPartitionAssignment` against our single registered broker."""
        if not broker_ids:
            raise _err(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                       "The manual partition assignment includes an empty replica list.")
        seen: set[int] = set()
        for b in broker_ids:
            if b in seen:
                raise _err(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                           f"The manual partition assignment includes the broker {b} more than once.")
            seen.add(b)
            if b != self.node_id:
                raise _err(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                           f"The manual partition assignment includes broker {b}, but no such broker is registered.")
        if replication_factor is not None and replication_factor != len(broker_ids):
            raise _err(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"The manual partition assignment includes a partition with {len(broker_ids)} replica(s), "
                f"but this is not consistent with previous partitions, which have {replication_factor} replica(s).",
            )

    def _placement(self, num_partitions: int, replication_factor: int) -> None:
        if replication_factor > 1:
            raise _err(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                f"Unable to replicate the partition {replication_factor} time(s): The target replication "
                f"factor of {replication_factor} cannot be reached because only 1 broker(s) are registered "
                "or some brokers have all their log directories cordoned.",
            )

    # -- create / delete / grow -------------------------------------------------------------------

    def create_topic(
        self,
        name: str,
        num_partitions: int = -1,
        replication_factor: int = -1,
        configs: Mapping[str, str | None] | None = None,
        validate_only: bool = False,
        assignments: Mapping[int, Sequence[int]] | None = None,
    ) -> TopicInfo:
        """Create a topic the way Kafka's controller does, in its order of checks.

        Name rules, then existence and '.'/'_' collisions, then configs, then the manual assignment or
        the partition count and replication factor (-1 = `num.partitions` /
        `default.replication.factor`). With `validate_only` nothing is persisted.
        """
        validate_topic_name(name)
        if name == CLUSTER_METADATA_TOPIC_NAME:
            raise _err(ErrorCode.INVALID_REQUEST, f"Creation of internal topic {name} is prohibited.")
        self._check_name_free(name)
        clean = self.validate_topic_configs(configs or {})
        if assignments:
            if replication_factor != -1:
                raise _err(ErrorCode.INVALID_REQUEST, "A manual partition assignment was specified, "
                           "but replication factor was not set to -1.")
            if num_partitions != -1:
                raise _err(ErrorCode.INVALID_REQUEST, "A manual partition assignment was specified, "
                           "but numPartitions was not set to -1.")
            rf: int | None = None
            for _, broker_ids in sorted(assignments.items()):
                self._validate_assignment(broker_ids, rf)
                rf = len(broker_ids)
            if sorted(assignments) != list(range(len(assignments))):
                raise _err(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                           "partitions should be a consecutive 0-based integer sequence")
            num_partitions, replication_factor = len(assignments), rf or 1
        else:
            if replication_factor < -1 or replication_factor == 0:
                raise _err(ErrorCode.INVALID_REPLICATION_FACTOR,
                           "Replication factor must be larger than 0, or -1 to use the default value.")
            if num_partitions < -1 or num_partitions == 0:
                raise _err(ErrorCode.INVALID_PARTITIONS,
                           "Number of partitions was set to an invalid non-positive value.")
            if num_partitions == -1:
                num_partitions = int(self.config["num.partitions"])
            if replication_factor == -1:
                replication_factor = int(self.config["default.replication.factor"])
            self._placement(num_partitions, replication_factor)
        info = TopicInfo(
            name=name,
            topic_id=_new_topic_id(),
            num_partitions=num_partitions,
            replication_factor=replication_factor,
            configs=clean,
            is_internal=is_internal(name),
        )
        if validate_only:
            return info
        self.metadata.put_topic(info)
        try:
            self.replica_manager.add_partitions(info, range(num_partitions))
            self.configs.apply_log_config(info)
        except BaseException:
            # Kafka's controller would leave an offline topic behind; a half-created topic that no
            # client can use is worse on one node, so undo the metadata record.
            self._remove_quietly(name)
            raise
        return info

    def _remove_quietly(self, name: str) -> None:
        try:
            self.replica_manager.remove_topic(name)
        except Exception:  # noqa: BLE001 - best effort while unwinding another failure
            pass
        self.metadata.remove_topic(name)

    def topic(self, name: str) -> TopicInfo:
        info = self.metadata.topic(name)
        if info is None:
            raise _err(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        return info

    def deletion_enabled(self) -> bool:
        return bool(self.config["delete.topic.enable"])

    def delete_topic(self, name: str) -> TopicInfo:
        """Delete a topic and its logs; UNKNOWN_TOPIC_OR_PARTITION when it does not exist."""
        if not self.deletion_enabled():
            raise _err(ErrorCode.TOPIC_DELETION_DISABLED, "Topic deletion is disabled.")
        info = self.topic(name)
        self.replica_manager.remove_topic(name)
        self.metadata.remove_topic(name)
        return info

    def delete_topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo:
        info = self.metadata.topic_by_id(topic_id)
        if info is None:
            raise _err(ErrorCode.UNKNOWN_TOPIC_ID)
        return self.delete_topic(info.name)

    def create_partitions(
        self,
        name: str,
        new_total: int,
        validate_only: bool = False,
        assignments: Sequence[Sequence[int]] | None = None,
    ) -> TopicInfo:
        """Grow a topic to `new_total` partitions (Kafka never shrinks one)."""
        info = self.topic(name)
        current = info.num_partitions
        if new_total == current:
            raise _err(ErrorCode.INVALID_PARTITIONS, f"Topic already has {current} partition(s).")
        if new_total < current:
            raise _err(ErrorCode.INVALID_PARTITIONS, f"The topic {name} currently has {current} partition(s); "
                       f"{new_total} would not be an increase.")
        added = new_total - current
        if assignments is not None:
            if len(assignments) != added:
                raise _err(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"Attempted to add {added} additional "
                           f"partition(s), but only {len(assignments)} assignment(s) were specified.")
            for broker_ids in assignments:
                self._validate_assignment(broker_ids, info.replication_factor)
        else:
            self._placement(added, info.replication_factor)
        grown = TopicInfo(info.name, info.topic_id, new_total, info.replication_factor,
                          dict(info.configs), info.is_internal)
        if validate_only:
            return grown
        self.metadata.put_topic(grown)
        self.replica_manager.add_partitions(grown, range(current, new_total))
        self.configs.apply_log_config(grown)
        return grown

    def apply_log_configs(self) -> None:
        """After startup: hand every hosted log its full config (overrides + dynamic broker configs)."""
        for info in self.metadata.topics():
            self.configs.apply_log_config(info)


def error_fields(exc: BaseException) -> tuple[int, str | None]:
    """(error code, error message) for a per-resource result, as Kafka's `ApiError.fromThrowable` gives them.

    An error raised without a message of its own (e.g. an unknown topic in CreatePartitions) goes out
    with a null message, as Kafka's exceptions created without one do; clients then show their own.
    """
    if isinstance(exc, KafkaError):
        message = str(exc)
        return int(exc.error_code), (None if not message or message == exc.error_code.message else message)
    return int(ErrorCode.UNKNOWN_SERVER_ERROR), (str(exc) or None)
