"""Topic and dynamic broker configs on the controller: Kafka's `ConfigurationControlManager`.

The validation and the new value sets come from `kbroker.cluster.configs.ConfigHelper` (the same rules
the broker describes configs with); this module turns the difference between the current and the new
set into `ConfigRecord`s: one per key set, one with a null value per key removed, as Kafka's
controller writes them. Cluster-wide broker defaults are resource name "", a broker's own settings
its node id.

With eligible leader replicas (KIP-966, `eligible.leader.replicas.version` >= 1), as Kafka 4.3.1:
every `min.insync.replicas` ConfigRecord is followed by a `ClearElrRecord` (for that topic, or for every
topic when the cluster default or a broker's value changes: the ELRs were computed against the old
minimum), a broker-level `min.insync.replicas` cannot be set or removed, and the cluster-level one
cannot be removed (INVALID_CONFIG, Kafka's messages).

Turning ELR on (`update_features` with `eligible.leader.replicas.version` > 0, not validate-only) first
writes Kafka's `maybeGenerateElrSafetyRecords`: the cluster-level `min.insync.replicas` ConfigRecord
(the static value) when there is none, and a null ConfigRecord removing every broker-level one, ahead
of the FeatureLevelRecord, in one atomic batch. Turning it off writes only the FeatureLevelRecord, as
Kafka 4.3.1 does (no ClearElrRecord): each partition drops its ELR / last-known ELR at its next change
(`PartitionChangeBuilder` with ELR off), and a snapshot written with ELR off leaves them out.

Pure: reads the image it is given, returns a `ControllerResult`, writes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence

from kbroker.cluster.configs import ConfigHelper
from kbroker.controller.result import ControllerResult, MetadataRecord
from kbroker.metadata.image import ConfigResource, ConfigResourceType
from kbroker.metadata.views import (
    BROKER_RESOURCE,
    DYNAMIC_DEFAULT_PREFIX,
    TOPIC_RESOURCE,
    MetadataView,
    TopicInfo,
)
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.metadata_records import ClearElrRecord, ConfigRecord

MIN_IN_SYNC_REPLICAS = "min.insync.replicas"
ELIGIBLE_LEADER_REPLICAS_VERSION = "eligible.leader.replicas.version"

log = logging.getLogger(__name__)


def config_diff(resource_type: int, resource_name: str, old: Mapping[str, str],
                new: Mapping[str, str]) -> list[MetadataRecord]:
    records: list[MetadataRecord] = []
    for key in sorted(set(old) | set(new)):
        value = new.get(key)
        if old.get(key) != value:
            records.append(ConfigRecord(resource_type=resource_type, resource_name=resource_name,
                                        name=key, value=value))
    return records


class ConfigurationControlManager:
    """Alters topic and broker configs as records."""

    def __init__(self, view: Callable[[], MetadataView], helper: ConfigHelper, *, node_id: int,
                 eligible_leader_replicas_enabled: Callable[[], bool] | None = None,
                 static_min_insync_replicas: Callable[[], int] | None = None) -> None:
        self._view = view
        self.helper = helper
        self.node_id = node_id
        self._elr_enabled = eligible_leader_replicas_enabled or (lambda: False)
        self._static_min_isr = static_min_insync_replicas or (lambda: 1)

    def maybe_generate_elr_safety_records(self, out: list[MetadataRecord]) -> str:
        """Kafka's `maybeGenerateElrSafetyRecords`: what makes enabling ELR safe -- a cluster-level
        min.insync.replicas (the static value) if absent, and no broker-level ones. Appends to `out`;
        returns the log message ("" when nothing was needed)."""
        configs = self._view().image.configs
        parts: list[str] = []
        if MIN_IN_SYNC_REPLICAS not in configs.cluster_broker_config():
            value = self._static_min_isr()
            out.append(ConfigRecord(resource_type=BROKER_RESOURCE, resource_name="", name=MIN_IN_SYNC_REPLICAS,
                                    value=str(value)))
            parts.append(f"Generating cluster-level {MIN_IN_SYNC_REPLICAS} of {value}")
        removed: list[str] = []
        brokers = sorted((r.name for r in configs.configs
                          if r.type == ConfigResourceType.BROKER and r.name.isdigit()), key=int)
        for name in brokers:
            if MIN_IN_SYNC_REPLICAS in configs.config_map(ConfigResource(ConfigResourceType.BROKER, name)):
                out.append(ConfigRecord(resource_type=BROKER_RESOURCE, resource_name=name, name=MIN_IN_SYNC_REPLICAS,
                                        value=None))
                removed.append(name)
        if removed:
            parts.append(f"Removing broker-level {MIN_IN_SYNC_REPLICAS} for brokers: " + ", ".join(removed))
        return ". ".join(parts) + "." if parts else ""

    def update_features(self, feature_records: Sequence[MetadataRecord], updates: Mapping[str, tuple[int, int]],
                        validate_only: bool) -> list[MetadataRecord]:
        """Kafka's `ConfigurationControlManager.updateFeatures`: `feature_records` (the
        FeatureControlManager's, already validated) preceded by the ELR safety records when the update
        sets eligible.leader.replicas.version above 0 (and is not validate-only)."""
        if validate_only:
            return []
        if updates.get(ELIGIBLE_LEADER_REPLICAS_VERSION, (0, 0))[0] > 0:
            records: list[MetadataRecord] = []
            message = self.maybe_generate_elr_safety_records(records)
            if message:
                log.info("%s", message)
            return records + list(feature_records)
        return list(feature_records)

    def create_clear_elr_records_as_needed(self, records: Sequence[MetadataRecord]) -> list[MetadataRecord]:
        """Kafka's `createClearElrRecordsAsNeeded`: a ClearElrRecord per min.insync.replicas change."""
        if not self._elr_enabled():
            return []
        out: list[MetadataRecord] = []
        for r in records:
            if isinstance(r, ConfigRecord) and r.name == MIN_IN_SYNC_REPLICAS:
                out.append(ClearElrRecord(topic_name=r.resource_name) if r.resource_type == TOPIC_RESOURCE
                           else ClearElrRecord())
        return out

    def _with_clear_elr(self, records: list[MetadataRecord]) -> list[MetadataRecord]:
        return records + self.create_clear_elr_records_as_needed(records)

    def _topic(self, name: str) -> TopicInfo:
        info = self._view().topic(name)
        if info is None:
            raise KafkaError(f"The topic '{name}' does not exist.", error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        return info

    def _topic_result(self, info: TopicInfo, new: dict[str, str]) -> ControllerResult[TopicInfo]:
        updated = TopicInfo(info.name, info.topic_id, info.num_partitions, info.replication_factor,
                            new, info.is_internal)
        return ControllerResult(updated, self._with_clear_elr(config_diff(TOPIC_RESOURCE, info.name, info.configs,
                                                                          new)))

    def incremental_alter_topic_configs(
        self, name: str, ops: Iterable[tuple[str, int, str | None]]
    ) -> ControllerResult[TopicInfo]:
        info = self._topic(name)
        return self._topic_result(info, self.helper.incremental_topic_configs(info.configs, ops))

    def alter_topic_configs(self, name: str, configs: Mapping[str, str | None]) -> ControllerResult[TopicInfo]:
        info = self._topic(name)
        return self._topic_result(info, self.helper.validate_topic_configs(configs))

    def incremental_alter_group_configs(
        self, group_id: str, ops: Iterable[tuple[str, int, str | None]]
    ) -> ControllerResult[None]:
        """IncrementalAlterConfigs on a GROUP resource: validated as Kafka's `GroupConfig.validate`
        (against this node's broker bounds), written as ConfigRecords with resource type GROUP."""
        if group_id == "":
            raise KafkaError("Default group resources are not allowed.", error_code=ErrorCode.INVALID_REQUEST)
        current = self._view().image.configs.config_map(ConfigResource(ConfigResourceType.GROUP, group_id))
        new = self.helper.incremental_group_configs(current, ops)
        return ControllerResult(None, config_diff(int(ConfigResourceType.GROUP), group_id, current, new))

    def alter_broker_configs(self, default: bool, changes: Mapping[str, str | None],
                             broker_id: int | None = None) -> ControllerResult[None]:
        """`broker_id`: the broker whose configs change (a request another broker forwarded names
        itself, as Kafka's ConfigurationControlManager takes the resource name); default: this node."""
        node = self.node_id if broker_id is None else broker_id
        if node == self.node_id:
            stored = self._view().broker_configs
        else:
            configs = self._view().image.configs
            stored = {DYNAMIC_DEFAULT_PREFIX + k: v for k, v in configs.cluster_broker_config().items()}
            stored.update(configs.broker_config(node))
        new = self.helper.altered_broker_configs(default, changes, stored)
        prefix = DYNAMIC_DEFAULT_PREFIX if default else ""

        def level(m: Mapping[str, str]) -> dict[str, str]:
            if default:
                return {k[len(prefix):]: v for k, v in m.items() if k.startswith(prefix)}
            return {k: v for k, v in m.items() if not k.startswith(DYNAMIC_DEFAULT_PREFIX)}

        name = "" if default else str(node)
        records = config_diff(BROKER_RESOURCE, name, level(stored), level(new))
        if self._elr_enabled():
            for r in records:
                if not isinstance(r, ConfigRecord) or r.name != MIN_IN_SYNC_REPLICAS:
                    continue
                if r.resource_name:
                    raise KafkaError("Broker-level min.insync.replicas cannot be altered while ELR is enabled.",
                                     error_code=ErrorCode.INVALID_CONFIG)
                if r.value is None:
                    raise KafkaError("Cluster-level min.insync.replicas cannot be removed while ELR is enabled.",
                                     error_code=ErrorCode.INVALID_CONFIG)
        return ControllerResult(None, self._with_clear_elr(records))
