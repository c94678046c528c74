"""UpdateFeatures on the controller: Kafka's `FeatureControlManager.updateFeatures` (KIP-584, KIP-778).

Pure: reads the image it is given and returns the FeatureLevelRecords to write (or raises
INVALID_UPDATE_VERSION, and then nothing is written: all features or none). Shared by the single
node's `LocalController` and the quorum's `QuorumController`. The checks, in Kafka 4.3.1's order,
each with Kafka's message ("Invalid update version <v> for feature <f>. <why>", prefixed by the API
layer's "The update failed for all features since the following feature had an error: "):

- an upgrade type other than UPGRADE / SAFE_DOWNGRADE / UNSAFE_DOWNGRADE ("The controller does not
  support the given upgrade type.") and a level below 0;
- the level must be in the range this controller supports ("Local controller <id> does not support
  this feature." / "... only supports versions <min>-<max>"), then in the range every registered
  broker declared ("Broker <id> ..."), then every other registered controller once metadata.version
  can carry controller registrations (3.7-IV0, level 15) ("Controller <id> ...");
- a lower level needs SAFE_DOWNGRADE or UNSAFE_DOWNGRADE, a higher one UPGRADE ("Can't downgrade to a
  newer version.");
- a feature's dependencies hold against the levels the request would leave finalized (Kafka's
  `Feature.validateVersion`): `eligible.leader.replicas.version` 1 (KIP-966) needs metadata.version
  4.0-IV1 (level 23), "eligible.leader.replicas.version could not be set to 1 because it depends on
  metadata.version level 23"; a name Kafka does not know is "Feature <f> not found.".

A valid update writes one FeatureLevelRecord per feature, also when the level does not change (as
Kafka: the record is the operation's offset to wait on). metadata.version is not changed on a running
kbroker node (its own message).

kraft.version (KIP-853) is not a FeatureLevelRecord: its level is the Raft layer's (the latest
KRaftVersionRecord, `KRaftVersionAccessor`). An UPGRADE asks the Raft leader to upgrade
(`KafkaRaftClient.upgrade_kraft_version`: every voter must support the level and have told the leader
its directory id; the leader appends KRaftVersionRecord + VotersRecord) and writes a NoOpRecord as the
operation's offset, as Kafka's FeatureControlManager does; the Raft layer's refusals come back with
their own error and message (INVALID_UPDATE_VERSION "Invalid upgrade of kraft.version to 1 because not
all of the voters support it", ...). A SAFE_DOWNGRADE / UNSAFE_DOWNGRADE to another level is refused:
"Can't downgrade the version of this feature." (an UPGRADE to a lower level fails earlier, with the
generic "without setting the upgrade type" message). Without an accessor (the in-process
LocalController, no Raft) kraft.version stays where it is.

Not here: Kafka's check that every voter has registered ("controller <id> has not registered, and may
not support this feature"): the quorum controller does not know the voter set. The ELR safety records
written with an `eligible.leader.replicas.version` upgrade are the `ConfigurationControlManager`'s
(`update_features`), as in Kafka.

Must not import asyncio or the server layer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from kbroker.controller.result import MetadataRecord
from kbroker.metadata.image import METADATA_VERSION, MetadataImage, VersionRange
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.metadata_records import FeatureLevelRecord, NoOpRecord

ELIGIBLE_LEADER_REPLICAS_VERSION = "eligible.leader.replicas.version"
KRAFT_VERSION = "kraft.version"
# FeatureUpdate.UpgradeType (KIP-778): 0 UNKNOWN, 1 UPGRADE, 2 SAFE_DOWNGRADE, 3 UNSAFE_DOWNGRADE.
UPGRADE_TYPE_UPGRADE = 1
UPGRADE_TYPE_SAFE_DOWNGRADE = 2
UPGRADE_TYPE_UNSAFE_DOWNGRADE = 3
# MetadataVersion.MINIMUM_VERSION (3.3-IV3) and IBP_3_7_IV0 (isControllerRegistrationSupported).
MINIMUM_METADATA_VERSION = 7
CONTROLLER_REGISTRATION_METADATA_VERSION = 15
# The features Kafka 4.3.1 knows (Feature.FEATURES) and, per (feature, level), what it depends on
# (FeatureVersion.dependencies): only ELRV_1 has one, metadata.version 4.0-IV1.
KNOWN_FEATURES = frozenset({"kraft.version", "transaction.version", "group.version",
                            ELIGIBLE_LEADER_REPLICAS_VERSION, "share.version", "streams.version"})
FEATURE_DEPENDENCIES: Mapping[tuple[str, int], Mapping[str, int]] = {
    (ELIGIBLE_LEADER_REPLICAS_VERSION, 1): {METADATA_VERSION: 23},
}
_DISABLED = VersionRange(0, 0)


UPDATE_FAILED_PREFIX = "The update failed for all features since the following feature had an error: "


class KRaftVersionAccessor(Protocol):
    """Kafka's `KRaftVersionAccessor`: the Raft layer's kraft.version and its upgrade."""

    def kraft_version(self) -> int:
        """The finalized kraft.version (the latest KRaftVersionRecord in the Raft log)."""
        ...

    def upgrade_kraft_version(self, epoch: int, level: int, validate_only: bool) -> bool:
        """Upgrade as the Raft leader of `epoch`; raises KafkaError (Kafka's ApiException) when refused."""
        ...


def invalid_update_version(feature: str, level: int, message: str) -> KafkaError:
    """Kafka's `invalidUpdateVersion`, with the API layer's all-or-nothing prefix."""
    return KafkaError(f"{UPDATE_FAILED_PREFIX}Invalid update version {level} for feature {feature}. {message}",
                      error_code=ErrorCode.INVALID_UPDATE_VERSION)


def _range_text(r: VersionRange) -> str:
    return str(r.min) if r.min == r.max else f"{r.min}-{r.max}"


def reason_not_supported(level: int, what: str, supported: VersionRange) -> str | None:
    """Kafka's `QuorumFeatures.reasonNotSupported`."""
    if supported.min <= level <= supported.max:
        return None
    if supported.max == 0:
        return f"{what} does not support this feature."
    return f"{what} only supports versions {_range_text(supported)}"


def validate_dependencies(name: str, level: int, proposed: Mapping[str, int]) -> str | None:
    """Kafka's `Feature.validateVersion`: None, or why `name` cannot be at `level` next to `proposed`."""
    if name not in KNOWN_FEATURES:
        return f"Feature {name} not found."
    mv = proposed.get(METADATA_VERSION)
    if level >= 1 and (mv is None or mv < MINIMUM_METADATA_VERSION):
        return (f"{name} could not be set to {level} because it depends on "
                f"metadata.version={MINIMUM_METADATA_VERSION} (3.3-IV3)")
    for dependency, needed in FEATURE_DEPENDENCIES.get((name, level), {}).items():
        have = proposed.get(dependency)
        if have is None or have < needed:
            return f"{name} could not be set to {level} because it depends on {dependency} level {needed}"
    return None


class FeatureControlManager:
    """Kafka's FeatureControlManager for the features this controller implements."""

    def __init__(self, node_id: int, supported: Mapping[str, tuple[int, int]],
                 kraft: KRaftVersionAccessor | None = None, epoch: int = -1) -> None:
        self.node_id = node_id
        self.supported = supported
        self.kraft = kraft
        self.epoch = epoch  # the active controller's epoch (the Raft leader epoch the upgrade is for)

    def _reason_not_supported(self, image: MetadataImage, name: str, level: int) -> str | None:
        lo_hi = self.supported.get(name)
        local = _DISABLED if lo_hi is None else VersionRange(lo_hi[0], lo_hi[1])
        reason = reason_not_supported(level, f"Local controller {self.node_id}", local)
        if reason is not None:
            return reason
        for broker_id in sorted(image.cluster.brokers):
            broker = image.cluster.brokers[broker_id]
            reason = reason_not_supported(level, f"Broker {broker_id}", broker.supported_features.get(name, _DISABLED))
            if reason is not None:
                return reason
        if (image.features.metadata_version or 0) >= CONTROLLER_REGISTRATION_METADATA_VERSION:
            for controller_id in sorted(image.cluster.controllers):
                if controller_id == self.node_id:
                    continue
                controller = image.cluster.controllers[controller_id]
                reason = reason_not_supported(level, f"Controller {controller_id}",
                                              controller.supported_features.get(name, _DISABLED))
                if reason is not None:
                    return reason
        return None

    def update_features(self, image: MetadataImage, updates: Mapping[str, tuple[int, int]],
                        validate_only: bool = False) -> list[MetadataRecord]:
        """The records of `updates` ({feature: (level, upgrade type)}), or INVALID_UPDATE_VERSION."""
        features = image.features
        proposed: dict[str, int] = dict(features.finalized_versions)
        proposed[METADATA_VERSION] = features.metadata_version or 0
        proposed.update({name: level for name, (level, _) in updates.items()})
        records: list[MetadataRecord] = []
        for name, (level, upgrade_type) in updates.items():
            if upgrade_type not in (UPGRADE_TYPE_UPGRADE, UPGRADE_TYPE_SAFE_DOWNGRADE, UPGRADE_TYPE_UNSAFE_DOWNGRADE):
                raise invalid_update_version(name, level, "The controller does not support the given upgrade type.")
            current = self.kraft.kraft_version() if name == KRAFT_VERSION and self.kraft is not None \
                else features.level(name)
            if level < 0:
                raise invalid_update_version(name, level, "A feature version cannot be less than 0.")
            reason = self._reason_not_supported(image, name, level)
            if reason is not None:
                raise invalid_update_version(name, level, reason)
            if level < current and upgrade_type == UPGRADE_TYPE_UPGRADE:
                raise invalid_update_version(name, level, "Can't downgrade the version of this feature without "
                                             "setting the upgrade type to either safe or unsafe downgrade.")
            if level > current and upgrade_type != UPGRADE_TYPE_UPGRADE:
                raise invalid_update_version(name, level, "Can't downgrade to a newer version.")
            if name == KRAFT_VERSION and self.kraft is not None:
                if upgrade_type == UPGRADE_TYPE_UPGRADE:
                    try:
                        self.kraft.upgrade_kraft_version(self.epoch, level, validate_only)
                    except KafkaError as e:
                        raise KafkaError(UPDATE_FAILED_PREFIX + str(e), error_code=e.error_code) from e
                    records.append(NoOpRecord())
                elif level != current:
                    raise invalid_update_version(name, level, "Can't downgrade the version of this feature.")
                continue
            if name == KRAFT_VERSION:
                if level != current:
                    raise invalid_update_version(name, level, "kbroker does not change kraft.version through "
                                                 "UpdateFeatures.")
                continue  # the same level: nothing to write (Kafka: ApiError.NONE, no record)
            if name == METADATA_VERSION:
                if level != current:
                    raise invalid_update_version(name, level, "kbroker does not change metadata.version on a "
                                                 "running node.")
                records.append(FeatureLevelRecord(name=name, feature_level=level))
                continue
            reason = validate_dependencies(name, level, proposed)
            if reason is not None:
                raise invalid_update_version(name, level, reason)
            records.append(FeatureLevelRecord(name=name, feature_level=level))
        return records

    @staticmethod
    def is_elr_feature_enabled(image: MetadataImage) -> bool:
        """Kafka's `isElrFeatureEnabled`: eligible.leader.replicas.version >= 1 (KIP-966)."""
        return image.features.level(ELIGIBLE_LEADER_REPLICAS_VERSION) >= 1
