"""Broker registrations on the controller: Kafka's `ClusterControlManager`.

Checks a BrokerRegistration against the image and Kafka 4.3's rules, in Kafka's order, and returns
the `RegisterBrokerRecord`:
- the cluster id must match (INCONSISTENT_CLUSTER_ID "Expected cluster ID X, but got cluster ID Y");
- a broker id whose registration still has a live session may re-register only with the same
  incarnation id (DUPLICATE_BROKER_REGISTRATION): a second process with the same node.id is refused
  until the first one's session expires;
- ZooKeeper brokers are refused (BROKER_ID_NOT_REGISTERED);
- log directories (metadata.version >= 3.7-IV2, KIP-858): at least one, none reserved, no duplicate,
  none owned by another broker (INVALID_REGISTRATION);
- every feature the broker declares must contain the finalized level (0 when not finalized), every
  finalized feature it does not declare must be 0, and it must declare `metadata.version`
  (UNSUPPORTED_VERSION / INVALID_REGISTRATION, Kafka's messages).
The broker epoch is the offset of the registration's batch (Kafka: `offsetControl.nextWriteOffset()`),
so it only grows. A new incarnation (new incarnation id: the broker restarted) gets a new epoch and
starts fenced, and its previous incarnation leaves every ISR in the same batch (Kafka 4.3's
BrokerShutdownHandler; with ELR an unclean shutdown also leaves the ELRs); the same incarnation
re-registering (a retried request) amends the registration and keeps its epoch and fencing state.

Also: `check_broker_epoch` (STALE_BROKER_EPOCH for every request a broker sends with its epoch),
which brokers may lead (`is_active`: unfenced and not shutting down), the brokers placement may use,
a broker's default log directory, and the `BrokerHeartbeatManager`, which exists only while this
controller is active (`activate` / `deactivate`).

Pure over the image it is handed (the controller's own, uncommitted view).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kbroker.clock import Clock
from kbroker.controller.broker_heartbeat_manager import DEFAULT_SESSION_TIMEOUT_MS, BrokerHeartbeatManager
from kbroker.controller.replica_placer import UsableBroker
from kbroker.controller.result import ControllerResult, MetadataRecord
from kbroker.metadata.image import METADATA_VERSION, BrokerRegistration, DirectoryId, MetadataImage
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.messages.broker_registration import BrokerRegistrationRequest
from kbroker.protocol.messages.controller_registration import ControllerRegistrationRequest
from kbroker.protocol.metadata_records import RegisterBrokerRecord
from kbroker.protocol.metadata_records.register_controller_record import RegisterControllerRecord

# MetadataVersion.IBP_3_7_IV0: the first level with controller registrations (KIP-919).
CONTROLLER_REGISTRATION_METADATA_VERSION = 15

# MetadataVersion.IBP_3_7_IV2: the first level with directory assignment (KIP-858).
DIRECTORY_ASSIGNMENT_METADATA_VERSION = 18
_RESERVED_DIRECTORIES = frozenset({DirectoryId.MIGRATING, DirectoryId.UNASSIGNED, DirectoryId.LOST})


@dataclass(frozen=True, slots=True)
class BrokerRegistrationReply:
    """Kafka's `BrokerRegistrationReply`."""

    epoch: int


def _err(code: ErrorCode, message: str | None = None) -> KafkaError:
    return KafkaError(message, error_code=code)


class ClusterControlManager:
    def __init__(
        self,
        image: Callable[[], MetadataImage],
        *,
        cluster_id: str,
        clock: Clock,
        session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
        broker_shutdown_handler: Callable[[int, bool, list[MetadataRecord]], None] | None = None,
        local_broker_incarnation_id: uuid.UUID | None = None,
        local_node_id: int = -1,
    ) -> None:
        self._image = image
        # A combined node: the incarnation of this process's own broker side (see `activate`).
        self.local_broker_incarnation_id = local_broker_incarnation_id
        self.local_node_id = local_node_id
        # Kafka's BrokerShutdownHandler (ReplicationControlManager.handleBrokerShutdown): the records
        # that take a restarted broker's previous incarnation out of every ISR.
        self.broker_shutdown_handler = broker_shutdown_handler
        self.cluster_id = cluster_id
        self.clock = clock
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_manager: BrokerHeartbeatManager | None = None

    # -- activation ------------------------------------------------------------------------------------

    def activate(self) -> None:
        """Start broker sessions afresh (this controller just became active): every registered broker
        gets a full session from now, as Kafka's `ClusterControlManager.activate`."""
        manager = BrokerHeartbeatManager(self.clock, self.session_timeout_ms)
        for b in self._image().cluster.brokers.values():
            manager.register(b.id, b.fenced)
            if b.id == self.local_node_id and self.local_broker_incarnation_id is not None \
                    and b.incarnation_id != self.local_broker_incarnation_id:
                # A combined node's controller and broker side are one process: a registration of this
                # node id by another incarnation is this node's previous process, which is gone (a
                # kill -9 leaves it unfenced). Its session ends now, so the broker side re-registers at
                # once instead of after broker.session.timeout.ms (Kafka 4.3 waits the session out after
                # an unclean stop; KAFKA-19130 spared only clean ones). kbroker's difference, for the
                # default one-voter node's restart (docs/cluster.md, "The default single node").
                manager.expire_session(b.id)
        self.heartbeat_manager = manager

    def deactivate(self) -> None:
        self.heartbeat_manager = None

    def heartbeats(self) -> BrokerHeartbeatManager:
        if self.heartbeat_manager is None:
            raise RuntimeError("ClusterControlManager is not active.")
        return self.heartbeat_manager

    # -- queries ---------------------------------------------------------------------------------------

    def registration(self, broker_id: int) -> BrokerRegistration | None:
        return self._image().cluster.brokers.get(broker_id)

    def is_unfenced(self, broker_id: int) -> bool:
        b = self.registration(broker_id)
        return b is not None and not b.fenced

    def is_active(self, broker_id: int) -> bool:
        """May lead and be in an ISR: registered, unfenced, not in controlled shutdown."""
        b = self.registration(broker_id)
        return b is not None and not b.fenced and not b.in_controlled_shutdown

    def in_controlled_shutdown(self, broker_id: int) -> bool:
        b = self.registration(broker_id)
        return b is not None and b.in_controlled_shutdown

    def usable_brokers(self) -> list[UsableBroker]:
        """Brokers placement may use: registered, not in controlled shutdown (fenced ones last)."""
        return [UsableBroker(b.id, b.rack, b.fenced) for b in sorted(self._image().cluster.brokers.values(),
                                                                     key=lambda b: b.id)
                if not b.in_controlled_shutdown]

    def default_dir(self, broker_id: int) -> uuid.UUID:
        """Kafka's `ClusterControlManager.defaultDir`: a broker's only directory, MIGRATING when it
        reported none, UNASSIGNED when it has several (the broker picks and reports) or is unknown."""
        b = self.registration(broker_id)
        if b is None:
            return DirectoryId.UNASSIGNED
        if not b.directories:
            return DirectoryId.MIGRATING
        if len(b.directories) == 1:
            return b.directories[0]
        return DirectoryId.UNASSIGNED

    def has_online_dir(self, broker_id: int, directory: uuid.UUID | None) -> bool:
        """Kafka's `DirectoryId.isOnline` for the broker's registered (online) directories."""
        b = self.registration(broker_id)
        if b is None:
            return False
        if directory is None or directory in (DirectoryId.UNASSIGNED, DirectoryId.MIGRATING):
            return True
        if directory == DirectoryId.LOST:
            return False
        return not b.directories or directory in b.directories

    def check_broker_epoch(self, broker_id: int, broker_epoch: int) -> None:
        b = self.registration(broker_id)
        if b is None:
            raise _err(ErrorCode.STALE_BROKER_EPOCH, f"No broker registration found for broker id {broker_id}")
        if b.epoch != broker_epoch:
            raise _err(ErrorCode.STALE_BROKER_EPOCH,
                       f"Expected broker epoch {b.epoch}, but got broker epoch {broker_epoch}")

    # -- registration ----------------------------------------------------------------------------------

    def register_broker(
        self, request: BrokerRegistrationRequest, new_broker_epoch: int, finalized: Mapping[str, int]
    ) -> ControllerResult[BrokerRegistrationReply]:
        heartbeats = self.heartbeats()
        if request.cluster_id != self.cluster_id:
            raise _err(ErrorCode.INCONSISTENT_CLUSTER_ID,
                       f"Expected cluster ID {self.cluster_id}, but got cluster ID {request.cluster_id}")
        broker_id = request.broker_id
        image = self._image()
        existing = image.cluster.brokers.get(broker_id)
        if existing is not None and heartbeats.has_valid_session(broker_id) \
                and request.incarnation_id != existing.incarnation_id:
            raise _err(ErrorCode.DUPLICATE_BROKER_REGISTRATION,
                       "Another broker is registered with that broker id. If the broker was recently restarted "
                       "this should self-resolve once the heartbeat manager expires the broker's session.")
        if request.is_migrating_zk_broker:
            raise _err(ErrorCode.BROKER_ID_NOT_REGISTERED, "Controller does not support registering ZK brokers.")
        metadata_version = image.features.metadata_version or 0
        directory_assignment = metadata_version >= DIRECTORY_ASSIGNMENT_METADATA_VERSION
        if directory_assignment:
            self._check_directories(broker_id, list(request.log_dirs), image)

        features: list[RegisterBrokerRecord.BrokerFeature] = []
        unverified = dict(finalized)
        for f in request.features:
            features.append(self._process_feature(f.name, f.min_supported_version, f.max_supported_version,
                                                  finalized))
            unverified.pop(f.name, None)
        if not any(f.name == METADATA_VERSION for f in request.features):
            raise _err(ErrorCode.INVALID_REGISTRATION, "Request features do not contain 'metadata.version'")
        for name, level in sorted(unverified.items()):
            if level != 0:
                self._process_feature(name, 0, 0, finalized)

        record = RegisterBrokerRecord(
            broker_id=broker_id,
            is_migrating_zk_broker=request.is_migrating_zk_broker,
            incarnation_id=request.incarnation_id,
            rack=request.rack,
            end_points=[RegisterBrokerRecord.BrokerEndpoint(name=lis.name, host=lis.host, port=lis.port,
                                                            security_protocol=lis.security_protocol)
                        for lis in request.listeners],
            features=features,
            log_dirs=list(request.log_dirs) if directory_assignment else [],
        )
        records: list[MetadataRecord] = []
        same_incarnation = existing is not None and existing.incarnation_id == request.incarnation_id
        if same_incarnation:
            assert existing is not None
            record.fenced = existing.fenced
            record.in_controlled_shutdown = existing.in_controlled_shutdown
            record.broker_epoch = existing.epoch
        else:
            # A new incarnation: its previous one is gone, clean (the broker names the epoch it shut
            # down with) or not. Kafka 4.3 first takes it out of every ISR (without ELR either way),
            # in the same batch; the epoch stays the batch's first offset.
            clean = existing is not None and existing.epoch == request.previous_broker_epoch
            if self.broker_shutdown_handler is not None:
                self.broker_shutdown_handler(broker_id, clean, records)
            record.broker_epoch = new_broker_epoch
            heartbeats.remove(broker_id)
        heartbeats.register(broker_id, record.fenced)
        records.append(record)
        return ControllerResult(BrokerRegistrationReply(record.broker_epoch), records)

    def register_controller(self, request: ControllerRegistrationRequest,
                            finalized: Mapping[str, int]) -> ControllerResult[None]:
        """Kafka's ClusterControlManager.registerController (KIP-919): a controller (a voter of the
        quorum) announces its listeners and supported features; one RegisterControllerRecord, replayed
        into the image's controller registrations. metadata.version must be at least 3.7-IV0 (15)."""
        metadata_version = self._image().features.metadata_version or 0
        if metadata_version < CONTROLLER_REGISTRATION_METADATA_VERSION:
            raise _err(ErrorCode.UNSUPPORTED_VERSION, "The current MetadataVersion is too old to support "
                                                      "controller registrations.")
        features = []
        for f in request.features:
            level = finalized.get(f.name, 0)
            if not f.min_supported_version <= level <= f.max_supported_version:
                raise _err(ErrorCode.UNSUPPORTED_VERSION,
                           f"Unable to register because the controller has an unsupported version of {f.name}: "
                           f"supported {f.min_supported_version}-{f.max_supported_version}, finalized {level}")
            features.append(RegisterControllerRecord.ControllerFeature(
                name=f.name, min_supported_version=f.min_supported_version,
                max_supported_version=f.max_supported_version))
        record = RegisterControllerRecord(
            controller_id=request.controller_id, incarnation_id=request.incarnation_id,
            zk_migration_ready=request.zk_migration_ready,
            end_points=[RegisterControllerRecord.ControllerEndpoint(
                name=e.name, host=e.host, port=e.port, security_protocol=e.security_protocol)
                for e in request.listeners],
            features=features)
        return ControllerResult(None, [record])

    def _check_directories(self, broker_id: int, log_dirs: list[uuid.UUID], image: MetadataImage) -> None:
        if not log_dirs:
            raise _err(ErrorCode.INVALID_REGISTRATION, "No directories specified in request")
        if any(d in _RESERVED_DIRECTORIES for d in log_dirs):
            raise _err(ErrorCode.INVALID_REGISTRATION, "Reserved directory ID in request")
        if len(set(log_dirs)) != len(log_dirs):
            raise _err(ErrorCode.INVALID_REGISTRATION, "Duplicate directory ID in request")
        for other in image.cluster.brokers.values():
            if other.id == broker_id:
                continue
            for d in log_dirs:
                if d in other.directories:
                    raise _err(ErrorCode.INVALID_REGISTRATION,
                               f"Broker {other.id} is already registered with directory {d}")

    @staticmethod
    def _process_feature(
        name: str, min_version: int, max_version: int, finalized: Mapping[str, int]
    ) -> RegisterBrokerRecord.BrokerFeature:
        level = finalized.get(name, 0)
        if not min_version <= level <= max_version:
            raise _err(ErrorCode.UNSUPPORTED_VERSION,
                       f"Unable to register because the broker does not support finalized version {level} of "
                       f"{name}. The broker wants a version between {min_version} and {max_version}, inclusive.")
        return RegisterBrokerRecord.BrokerFeature(name=name, min_supported_version=min_version,
                                                  max_supported_version=max_version)
