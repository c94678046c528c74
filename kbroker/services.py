"""The one place the broker's services are built and wired: `build_services(config) -> BrokerServices`.

Owns the construction order (metadata cache and config helper -> LogManager -> ReplicaManager ->
storage start-up and recovery -> metadata loader with its first publishers -> the role's controller
-> group and transaction coordinators -> the role's first load of the image, which hosts the
partitions) and the hooks between the services (a new log asks the config helper for its config).
There is one construction path: what `process.roles` changes (kbroker's single node, a KRaft broker,
a KRaft controller) is a `_RoleWiring` (the controller the handlers call, how the image is first
loaded, the links to the cluster), made by one small function per role. `kbroker.broker.Broker`
and the in-process test stacks both call it, so a test runs exactly the wiring a broker runs.

It sits in the wiring layer, beside broker.py and config.py, because it imports every domain package
and the broker config; nothing below it may import it. It does not touch the event loop, sockets,
the data-directory lock or the periodic tasks (retention, flush, cleaning rounds): those belong to
`Broker`. The group coordinator is
built here but started by the caller (`services.group_coordinator.startup()` needs a running loop).
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kbroker.api.context import BrokerServices
from kbroker.clock import Clock, wall_clock_ms
from kbroker.cluster.config_publisher import DynamicConfigPublisher
from kbroker.cluster.configs import ConfigHelper
from kbroker.cluster.quotas import QuotaManagers, QuotaWindow
from kbroker.cluster.replication_quotas import ReplicationQuotas
from kbroker.config import KafkaConfig
from kbroker.controller.controller import Controller
from kbroker.controller.delegation_token_control import DelegationTokenConfig
from kbroker.controller.legacy_migration import LEGACY_METADATA_FILE
from kbroker.controller.local_controller import LocalController, bootstrap_records_from
from kbroker.controller.metadata_log import ClusterMetadataLog, MetadataLogConfig
from kbroker.controller.quorum_controller import QuorumControllerConfig
from kbroker.coord.producer_id_manager import ProducerIdManager
from kbroker.coord.service import GroupCoordinatorService
from kbroker.coord.share_coordinator import STATE_TOPIC, ShareCoordinatorService, in_kraft_cluster
from kbroker.coord.share_group_state_client import InProcessGroupStatePersister
from kbroker.coord.share_partition_manager import SharePartitionManager, SharePersister
from kbroker.coord.share_persister import (
    MetadataCoordinatorLocator,
    NetworkSharePersister,
    NodeConnectionTransport,
)
from kbroker.coord.transaction_coordinator import TransactionCoordinatorService
from kbroker.log.cleaner_manager import LogCleaner
from kbroker.log.config import LogConfig
from kbroker.log.manager import META_PROPERTIES, LogManager
from kbroker.metadata.cache import MetadataCache
from kbroker.metadata.loader import MetadataLoader
from kbroker.metrics.meters import BrokerMetrics
from kbroker.raft import QuorumConfig
from kbroker.raft.config import Endpoint
from kbroker.raft.metadata_log import MetadataLogRetention
from kbroker.raft.voter_set import bootstrap_voters, read_bootstrap_voter_set
from kbroker.replica.replica_manager import ReplicaManager
from kbroker.security.acl import StandardAuthorizer
from kbroker.server.kraft_broker import KRaftBrokerLinks
from kbroker.server.kraft_controller import KRaftControllerLinks, KRaftControllerSettings
from kbroker.server.metadata_follower import RaftMetadataFollower
from kbroker.server.settings import KRaftBrokerSettings, parse_bootstrap_servers, parse_voters

log = logging.getLogger(__name__)


def _log_metadata_fault(message: str, exc: Exception) -> None:
    log.error("Metadata loading fault: %s", message, exc_info=exc)


def broker_metrics(config: KafkaConfig) -> BrokerMetrics | None:
    """The broker's meters, or None when `kbroker.metrics.enable` is false (nothing is recorded)."""
    if not config["kbroker.metrics.enable"]:
        return None
    from kbroker.protocol import API_SPECS

    return BrokerMetrics({key: spec.name for key, spec in API_SPECS.items()})


def build_services(
    config: KafkaConfig,
    *,
    time_ms: Clock = wall_clock_ms,
    background_executor: Callable[[Callable[[], None]], object] | None = None,
) -> BrokerServices:
    """Build every service from `config`, recover the logs on disk, replay the metadata log and host
    the partitions the image assigns to this node.

    Raises ValueError for a broker config that gives no valid log config, the storage layer's
    `InconsistentMetaPropertiesError` / `KafkaStorageError` for unusable log dirs, and
    `LegacyMetadataError` for an unreadable legacy metadata file (the broker turns each into a
    one-line start-up error).
    """
    log_dirs = config.log_dirs
    node_id = config.node_id
    cache = MetadataCache(node_id)
    config_helper = ConfigHelper(config, cache)

    log_manager = LogManager(
        log_dirs,
        # Logs of a topic missing from the image (strays) open with the static broker config.
        LogConfig.from_props(config.broker_props()),
        node_id=node_id,
        time_ms=time_ms,
        # A log opened at start-up or created for a new partition: its topic's overrides over the
        # broker's static and dynamic configs (the one resolver, ConfigHelper.log_config).
        config_for_topic=config_helper.config_for_topic,
        background_executor=background_executor,
        producer_id_expiration_ms=config["producer.id.expiration.ms"],
        recovery_threads_per_data_dir=config["num.recovery.threads.per.data.dir"],
    )
    replica_manager = ReplicaManager(config, log_manager, cache, time_ms)
    if config.is_kraft_broker or config.is_kraft_controller or (
            config.is_kraft_combined and not _one_voter_quorum(config)):
        _check_formatted(config)
    replica_manager.metrics = broker_metrics(config)
    # Formats empty log dirs (meta.properties with a new cluster id, as `kafka-storage.sh format`
    # would), then recovers every partition log found on disk.
    log_manager.startup()
    try:
        return _host_partitions(config, time_ms, cache, config_helper, log_manager, replica_manager)
    except BaseException:
        # Nothing is served yet: close the recovered logs (flushed, checkpointed) before giving up.
        replica_manager.shutdown()
        log_manager.shutdown()
        raise


def metadata_log_config(config: KafkaConfig) -> MetadataLogConfig:
    """The metadata log's keys (Kafka's MetadataLogConfig); ValueError as Kafka's InvalidConfigurationException."""
    segment_bytes = int(config["metadata.log.segment.bytes"])
    min_bytes = int(config["metadata.log.segment.min.bytes"])
    if segment_bytes < min_bytes:
        raise ValueError(f"Cannot set metadata.log.segment.bytes below {min_bytes}: {segment_bytes}")
    return MetadataLogConfig(
        segment_bytes=segment_bytes,
        segment_ms=int(config["metadata.log.segment.ms"]),
        retention_max_bytes=int(config["metadata.max.retention.bytes"]),
        retention_ms=int(config["metadata.max.retention.ms"]),
        max_bytes_between_snapshots=int(config["metadata.log.max.record.bytes.between.snapshots"]),
        max_snapshot_interval_ms=int(config["metadata.log.max.snapshot.interval.ms"]),
    )


@dataclass(frozen=True, slots=True)
class _CoreServices:
    """What every process role shares, built before the role's own pieces: the image, the logs, the
    replica manager and the metadata loader with the publishers that come first."""

    config: KafkaConfig
    time_ms: Clock
    cache: MetadataCache
    config_helper: ConfigHelper
    log_manager: LogManager
    replica_manager: ReplicaManager
    loader: MetadataLoader
    cluster_id: str


@dataclass(frozen=True, slots=True)
class _RoleWiring:
    """What one `process.roles` adds to the core (Kafka's BrokerServer / ControllerServer split, in
    small): the controller the handlers call, how the image is first loaded, and the role's links."""

    controller: Controller
    # Replays or loads the local metadata, after every publisher is installed (it hosts the partitions).
    load: Callable[[], None]
    # A broker's group and transaction coordinators follow leadership of their state topics; a
    # process.roles=controller node serves neither (the services type still names them).
    hosts_coordinators: bool = True
    # authorizer.class.name: Kafka's StandardAuthorizer on every node with it set -- broker listeners and a
    # controller node's listener alike (Raft and broker traffic need CLUSTER_ACTION; an Envelope's inner
    # request is authorized as the principal it carries).
    authorizes: bool = True
    kraft: KRaftBrokerLinks | None = None
    kraft_controller: KRaftControllerLinks | None = None


def _host_partitions(
    config: KafkaConfig,
    time_ms: Clock,
    cache: MetadataCache,
    config_helper: ConfigHelper,
    log_manager: LogManager,
    replica_manager: ReplicaManager,
) -> BrokerServices:
    assert log_manager.cluster_id is not None
    node_id = config.node_id
    # The compaction planner (log.cleaner.*); the broker runs its rounds on a worker thread. It exists
    # before partitions are hosted, so a stray log deleted below also leaves its cleaner checkpoint.
    log_manager.cleaner = LogCleaner(
        log_manager,
        enabled=bool(config["log.cleaner.enable"]),
        dedupe_buffer_size=int(config["log.cleaner.dedupe.buffer.size"]),
        threads=int(config["log.cleaner.threads"]),
        time_ms=time_ms,
    )
    # The metadata flow: controller -> __cluster_metadata -> loader -> image -> publishers, in this
    # order (the cache first, so every later publisher and every request sees the new image).
    # A publisher that fails is logged and the others still run, as on a Kafka broker.
    loader = MetadataLoader(fault_handler=_log_metadata_fault)
    quotas = quota_managers(config, time_ms)
    replication_quotas = ReplicationQuotas(
        node_id, QuotaWindow(int(config["replication.quota.window.num"]),
                             int(config["replication.quota.window.size.seconds"]) * 1000), time_ms)
    replica_manager.leader_quota = replication_quotas.leader
    replica_manager.replica_fetcher_manager.quota = replication_quotas.follower
    loader.install_publishers([cache, quotas, replication_quotas, replica_manager, DynamicConfigPublisher(config_helper, replica_manager)])
    core = _CoreServices(config, time_ms, cache, config_helper, log_manager, replica_manager, loader,
                         log_manager.cluster_id)
    if config.is_kraft_controller:
        role = _kraft_controller_role(core)
    elif config.is_kraft_combined:
        role = _kraft_combined_role(core)
    elif config.is_kraft_broker:
        role = _kraft_broker_role(core)
    else:
        role = _single_node_role(core)
    controller = role.controller
    group_coordinator = GroupCoordinatorService(config, replica_manager, controller, cache, time_ms)
    producer_id_manager = ProducerIdManager(controller, node_id)
    transaction_coordinator = TransactionCoordinatorService(config, replica_manager, controller, cache,
                                                            producer_id_manager, group_coordinator, time_ms)
    share_coordinator = ShareCoordinatorService(config, replica_manager, controller, cache, time_ms) \
        if role.hosts_coordinators else None
    if share_coordinator is not None:
        loader.install_publishers([group_coordinator, transaction_coordinator, share_coordinator])
    role.load()
    return BrokerServices(
        config=config,
        log_manager=log_manager,
        metadata=cache,
        configs=config_helper,
        controller=controller,
        producer_id_manager=producer_id_manager,
        replica_manager=replica_manager,
        group_coordinator=group_coordinator,
        transaction_coordinator=transaction_coordinator,
        share_coordinator=share_coordinator,
        share_partition_manager=share_partition_manager(config, replica_manager, cache, group_coordinator,
                                                        share_coordinator, time_ms)
        if share_coordinator is not None else None,
        cluster_id=core.cluster_id,
        node_id=node_id,
        time_ms=time_ms,
        kraft=role.kraft,
        kraft_controller=role.kraft_controller,
        metrics=replica_manager.metrics,
        authorizer=build_authorizer(config) if role.authorizes else None,
        quotas=quotas,
    )


def quota_managers(config: KafkaConfig, time_ms: Clock) -> QuotaManagers:
    """The client quota managers (kbroker/cluster/quotas.py) with the broker's quota windows."""
    return QuotaManagers(
        QuotaWindow(int(config["quota.window.num"]), int(config["quota.window.size.seconds"]) * 1000),
        QuotaWindow(int(config["controller.quota.window.num"]),
                    int(config["controller.quota.window.size.seconds"]) * 1000),
        time_ms)


def delegation_token_config(config: KafkaConfig) -> DelegationTokenConfig:
    """The delegation.token.* keys (KIP-48) the controller reads."""
    return DelegationTokenConfig(
        secret_key=config["delegation.token.secret.key"] or None,
        max_lifetime_ms=int(config["delegation.token.max.lifetime.ms"]),
        expiry_time_ms=int(config["delegation.token.expiry.time.ms"]),
        expiry_check_interval_ms=int(config["delegation.token.expiry.check.interval.ms"]),
    )


def _single_node_role(core: _CoreServices) -> _RoleWiring:
    """kbroker's single node: a `LocalController` over the local `__cluster_metadata`, whose replay
    (bootstrapping it, and migrating a legacy JSON image, on first start) hosts every local partition."""
    config = core.config
    controller = LocalController(
        node_id=config.node_id,
        metadata_log=ClusterMetadataLog(config.metadata_log_dir, core.time_ms, config=metadata_log_config(config)),
        loader=core.loader,
        cache=core.cache,
        config_helper=core.config_helper,
        default_num_partitions=lambda: int(config["num.partitions"]),
        default_replication_factor=lambda: int(config["default.replication.factor"]),
        delete_topic_enable=lambda: bool(config["delete.topic.enable"]),
        max_partitions=lambda: int(config["kbroker.max.partitions"]),
        delegation_tokens=delegation_token_config(config),
        clock=core.time_ms,
    )
    return _RoleWiring(controller, load=lambda: controller.load(config.log_dirs[0] / LEGACY_METADATA_FILE))


def _check_formatted(config: KafkaConfig) -> None:
    """A broker joining a cluster needs the cluster's id in meta.properties, as Kafka's broker does: it
    never invents one (a single node formats its own dirs)."""
    missing = [d for d in config.log_dirs if not (d / META_PROPERTIES).exists()]
    if missing:
        raise ValueError(
            f"No meta.properties found in {', '.join(map(str, missing))}: with process.roles={config['process.roles'][0]} the log "
            "directories must be formatted with the cluster's id first (kafka-storage.sh format -t <cluster id> "
            "-c <this config>, docs/cluster.md)")


def _one_voter_quorum(config: KafkaConfig) -> bool:
    """A combined node that is its quorum's only voter: `controller.quorum.voters` lists this node alone, or
    only `controller.quorum.bootstrap.servers` is set (Kafka's sample server.properties). Such a node formats
    its empty log dirs itself on first start, as kbroker's single node always did (Kafka would ask for
    `kafka-storage format --standalone`, which kbroker's own format also accepts)."""
    voters = config["controller.quorum.voters"]
    if voters:
        return [v.split("@", 1)[0].strip() for v in voters] == [str(config.node_id)]
    # Bootstrap servers naming other controllers: a node of a larger dynamic quorum, formatted first.
    return not _bootstrap_servers_name_others(config)


def _bootstrap_servers_name_others(config: KafkaConfig) -> bool:
    """`controller.quorum.bootstrap.servers` names a controller other than this node's first controller
    listener (loopback and wildcard hosts count as this node)."""
    if not config.controller_listeners:
        return False
    own = config.controller_listeners[0]
    local_hosts = {own.host, "", "0.0.0.0", "::", "localhost", "127.0.0.1", "::1"}
    return any(s.port != own.port or s.host not in local_hosts
               for s in parse_bootstrap_servers(config["controller.quorum.bootstrap.servers"] or []))


def _self_voter(config: KafkaConfig) -> str:
    """This node as a voter on its first controller listener (an unspecified host is this host's loopback)."""
    e = config.controller_listeners[0]
    host = e.host if e.host not in ("", "0.0.0.0", "::") else "127.0.0.1"
    return f"{config.node_id}@{host}:{e.port}"


def combined_node_is_observer(config: KafkaConfig) -> bool:
    """A combined node that starts as an observer of its quorum (KIP-853): formatted with
    `--no-initial-controllers` (no VotersRecord in its bootstrap checkpoint, no `controller.quorum.voters`)
    and configured with `controller.quorum.bootstrap.servers` naming other controllers. It finds the leader
    through them and becomes a voter when `kafka-metadata-quorum add-controller` adds it, as Kafka's
    combined nodes do. A node whose bootstrap servers name only itself is a quorum of itself (kbroker
    formats such a node on first start)."""
    if config["controller.quorum.voters"] or not _bootstrap_servers_name_others(config):
        return False
    voter_set = read_bootstrap_voter_set(config.metadata_log_dir)
    return voter_set is None or not voter_set.voters


def combined_voters(config: KafkaConfig) -> list[str]:
    """The voter set a combined node runs with, as `id@host:port` entries: `controller.quorum.voters` when
    given; else the initial voters `kafka-storage format --standalone / --initial-controllers` wrote into the
    bootstrap snapshot (`__cluster_metadata-0/00000000000000000000-0000000000.checkpoint`'s VotersRecord,
    KIP-853), the voter set the Raft client starts from (it then follows the log's VotersRecords:
    add-controller / remove-controller / UpdateRaftVoter); else, on a node never formatted for a dynamic
    quorum, a quorum of this node alone (what `--standalone` would write). Empty for an observer
    (`combined_node_is_observer`)."""
    if combined_node_is_observer(config):
        return []
    if config["controller.quorum.voters"]:
        return list(config["controller.quorum.voters"])
    from kbroker.raft.metadata_log import CLUSTER_METADATA_DIR
    from kbroker.snapshot.records_snapshot import read_snapshot_header_file

    header = config.metadata_log_dir / CLUSTER_METADATA_DIR / f"{0:020d}-{0:010d}.checkpoint"
    if header.exists():
        names = [n.strip().upper() for n in str(config["controller.listener.names"] or "").split(",") if n.strip()]
        voters = read_snapshot_header_file(header).voters
        if voters is not None and voters.voters:
            out = []
            for v in voters.voters:
                endpoints = sorted(v.endpoints, key=lambda ep: (ep.name.upper() not in names[:1], ep.name))
                if endpoints:
                    out.append(f"{v.voter_id}@{endpoints[0].host}:{endpoints[0].port}")
            if out:
                return out
    return [_self_voter(config)]


def _metadata_directory_id(config: KafkaConfig, log_manager: LogManager) -> uuid.UUID:
    """The directory id of `metadata.log.dir` (from its meta.properties), else of the first log dir."""
    ids = log_manager.directory_ids
    return ids.get(config.metadata_log_dir) or next(iter(ids.values()), uuid.uuid4())


def kraft_broker_settings(config: KafkaConfig, cluster_id: str, log_manager: LogManager,
                          voters: Sequence[str] | None = None) -> KRaftBrokerSettings:
    """The cluster-link settings of a process.roles=broker node, read from its config (`voters`: a combined
    node's `combined_voters`)."""
    ids = log_manager.directory_ids
    listener_names = sorted(config.controller_listener_names)
    raw_names = [n.strip().upper() for n in str(config["controller.listener.names"] or "").split(",") if n.strip()]
    return KRaftBrokerSettings(
        node_id=config.node_id,
        cluster_id=cluster_id,
        voters=parse_voters(config["controller.quorum.voters"] if voters is None else voters),
        bootstrap_servers=parse_bootstrap_servers(config["controller.quorum.bootstrap.servers"]),
        controller_listener_name=(raw_names or listener_names)[0],
        rack=config["broker.rack"],
        log_dir_ids=tuple(ids[d] for d in config.log_dirs if d in ids),
        metadata_directory_id=_metadata_directory_id(config, log_manager),
        heartbeat_interval_ms=int(config["broker.heartbeat.interval.ms"]),
        initial_registration_timeout_ms=int(config["initial.broker.registration.timeout.ms"]),
        quorum_request_timeout_ms=int(config["controller.quorum.request.timeout.ms"]),
        quorum_fetch_timeout_ms=int(config["controller.quorum.fetch.timeout.ms"]),
        quorum_retry_backoff_ms=int(config["controller.quorum.retry.backoff.ms"]),
        controller_socket_timeout_ms=int(config["controller.socket.timeout.ms"]),
        controlled_shutdown_enable=bool(config["controlled.shutdown.enable"]),
        controller_security=config.controller_security(),
        previous_broker_epoch=log_manager.read_broker_epoch_from_clean_shutdown_files(),
        metadata_retention=_metadata_retention(config),
        max_bytes_between_snapshots=int(config["metadata.log.max.record.bytes.between.snapshots"]),
        max_snapshot_interval_ms=int(config["metadata.log.max.snapshot.interval.ms"]),
    )


def _kraft_broker_role(core: _CoreServices) -> _RoleWiring:
    """process.roles=broker: the image comes from the quorum's metadata log (MetadataFetcher) and every
    change goes to the active controller (RemoteController). Only a local snapshot is loaded here:
    the rest is fetched by the broker's `KRaftBrokerLinks.catch_up()` (it needs the event loop:
    `Broker.start`), which hosts the partitions as it goes."""
    log_manager = core.log_manager

    def offline_log_dirs() -> list[uuid.UUID]:
        return [log_manager.directory_ids[d] for d in log_manager.offline_dirs if d in log_manager.directory_ids]

    links = KRaftBrokerLinks(kraft_broker_settings(core.config, core.cluster_id, log_manager),
                             metadata_log_dir=core.config.metadata_log_dir, loader=core.loader, cache=core.cache,
                             time_ms=core.time_ms, offline_log_dirs=offline_log_dirs)
    # Replication (issue 12): ISR changes go to the active controller through the controller channel;
    # the replica manager reads this broker's epoch and its leaders' endpoints from the image.
    core.replica_manager.set_alter_partition_sender(links.channel.send_alter_partition)
    return _RoleWiring(links.controller, load=links.load_local, kraft=links)


def kraft_controller_settings(config: KafkaConfig, cluster_id: str, log_manager: LogManager,
                              voters: Sequence[str] | None = None,
                              transaction_version: int = 0,
                              eligible_leader_replicas_version: int = 0) -> KRaftControllerSettings:
    """The quorum settings of a process.roles=controller node (Kafka's keys, read once here; `voters`: a
    combined node's `combined_voters`; `transaction_version`: the level bootstrapped when the metadata
    dir holds no `bootstrap.checkpoint`)."""
    keys = ("controller.quorum.election.timeout.ms", "controller.quorum.fetch.timeout.ms",
            "controller.quorum.election.backoff.max.ms", "controller.quorum.request.timeout.ms",
            "controller.quorum.retry.backoff.ms", "controller.quorum.append.linger.ms")
    props = {k: str(config[k]) for k in keys}
    props["controller.quorum.voters"] = ",".join(config["controller.quorum.voters"] if voters is None else voters)
    metadata_dir = config.metadata_log_dir
    voter_set = None
    if not config["controller.quorum.voters"]:
        # KIP-853: a controller formatted with --standalone / --initial-controllers (kraft.version 1) and
        # configured with controller.quorum.bootstrap.servers takes its voters from the bootstrap
        # checkpoint's VotersRecord.
        # A combined node never formatted for a dynamic quorum runs with the voters it was given
        # (`combined_voters`: a quorum of itself).
        names = [n.strip().upper() for n in str(config["controller.listener.names"] or "").split(",") if n.strip()]
        voter_set = read_bootstrap_voter_set(metadata_dir)
        bootstrap_servers = [str(b) for b in config["controller.quorum.bootstrap.servers"] or []]
        observer = voters is None and (voter_set is None or not voter_set.voters) and bool(bootstrap_servers)
        if observer:
            # KIP-853: formatted with --no-initial-controllers (no voter set in its checkpoint): the
            # controller runs as an observer, finding the leader through controller.quorum.bootstrap.servers,
            # until `kafka-metadata-quorum add-controller` makes it a voter (it follows the log's VotersRecord).
            props["controller.quorum.voters"] = ""
        elif voter_set is not None or voters is None:
            props["controller.quorum.voters"] = bootstrap_voters(metadata_dir, names[0] if names else "CONTROLLER")
    quorum = QuorumConfig.from_props(props)
    if not config["controller.quorum.voters"]:
        names = [n.strip().upper() for n in str(config["controller.listener.names"] or "").split(",") if n.strip()]
        listener = names[0] if names else "CONTROLLER"
        quorum = dataclasses.replace(quorum, default_listener=listener, bootstrap_servers={
            -2 - i: Endpoint(n.host, n.port, listener)
            for i, n in enumerate(parse_bootstrap_servers(config["controller.quorum.bootstrap.servers"] or []))},
            voters={i: dataclasses.replace(e, listener=listener) for i, e in quorum.voters.items()})
        if voter_set is not None and voter_set.voters:
            quorum = dataclasses.replace(quorum, voter_directory_ids={
                i: v.key.directory_id for i, v in voter_set.voters.items()})
        elif not quorum.voters:
            quorum = dataclasses.replace(quorum, kraft_version_level=1)
    return KRaftControllerSettings(
        node_id=config.node_id,
        cluster_id=cluster_id,
        quorum=quorum,
        controller=QuorumControllerConfig(
            node_id=config.node_id,
            cluster_id=cluster_id,
            session_timeout_ms=int(config["broker.session.timeout.ms"]),
            unclean_leader_election_enable=bool(config["unclean.leader.election.enable"]),
            auto_leader_rebalance_enable=bool(config["auto.leader.rebalance.enable"]),
            leader_imbalance_check_interval_ms=int(config["leader.imbalance.check.interval.seconds"]) * 1000,
            default_num_partitions=int(config["num.partitions"]),
            default_replication_factor=int(config["default.replication.factor"]),
            delete_topic_enable=bool(config["delete.topic.enable"]),
            min_insync_replicas=int(config["min.insync.replicas"]),
            delegation_tokens=delegation_token_config(config),
            bootstrap=tuple(bootstrap_records_from(metadata_dir, transaction_version,
                                                   eligible_leader_replicas_version)),
            # kbroker.max.partitions bounds what one node hosts: applied by a one-voter combined node.
            max_partitions=int(config["kbroker.max.partitions"])
            if config.is_kraft_combined and voters is not None and len(voters) == 1 else -1,
        ),
        metadata_log_dir=metadata_dir,
        directory_id=_metadata_directory_id(config, log_manager),
        max_bytes_between_snapshots=int(config["metadata.log.max.record.bytes.between.snapshots"]),
        max_snapshot_interval_ms=int(config["metadata.log.max.snapshot.interval.ms"]),
        controller_security=config.controller_security(),
        local_endpoint=_local_controller_endpoint(config, quorum.default_listener),
        metadata_retention=_metadata_retention(config),
    )


def _metadata_retention(config: KafkaConfig) -> MetadataLogRetention:
    """A controller's metadata log retention keys (validated as Kafka's `MetadataLogConfig`)."""
    c = metadata_log_config(config)
    return MetadataLogRetention(retention_bytes=c.retention_max_bytes, retention_ms=c.retention_ms,
                                segment_bytes=c.segment_bytes, segment_ms=c.segment_ms,
                                file_delete_delay_ms=c.file_delete_delay_ms)


def _local_controller_endpoint(config: KafkaConfig, listener: str) -> Endpoint | None:
    """This controller's own endpoint (an observer is in no voter set: its ControllerRegistration needs it)."""
    if not config.controller_listeners:
        return None
    voter = _self_voter(config)
    host, _, port = voter.split("@", 1)[1].rpartition(":")
    return Endpoint(host, int(port), listener)


def _kraft_controller_role(core: _CoreServices) -> _RoleWiring:
    """process.roles=controller: a voter of a kbroker controller quorum. The Raft client replicates
    `__cluster_metadata`, the QuorumController (active on the Raft leader) writes it, and the node's own
    image (cache, configs) follows the committed batches once `Broker.start` starts the links. The node
    serves only its controller listener."""
    links = KRaftControllerLinks(kraft_controller_settings(core.config, core.cluster_id, core.log_manager),
                                 loader=core.loader, config_helper=core.config_helper, time_ms=core.time_ms)
    return _RoleWiring(links.controller, load=lambda: None, hosts_coordinators=False, kraft_controller=links)


def _kraft_combined_role(core: _CoreServices) -> _RoleWiring:
    """process.roles=broker,controller (Kafka's KafkaRaftServer with a BrokerServer and a ControllerServer):
    the controller side is a voter as above; the broker side follows the same Raft log through a
    `RaftMetadataFollower` (a listener of the local Raft client, no network fetch: the node's one loader
    gets the committed batches once, hosting this node's partitions), and, like any KRaft broker, registers,
    heartbeats and forwards every change to the active controller through the controller channel (this
    node's own controller listener when it leads). The handlers' controller is that `RemoteController`;
    the controller listener serves the QuorumController (`Broker.start`)."""
    config = core.config
    log_manager = core.log_manager
    voters = combined_voters(config)
    observer = not voters
    if observer:
        log.info("Combined node %d is not a voter: it runs as an observer of the quorum until it is added "
                 "(kafka-metadata-quorum add-controller)", config.node_id)
    elif not config["controller.quorum.voters"]:
        log.info("Combined node %d: the voter set is %s (controller.quorum.voters is not set)", config.node_id,
                 ",".join(voters))
    # A lone voter formats itself on first start: it bootstraps what `kbroker storage format` (and Kafka
    # 4.3's) would write, transactions version 2 included, as kbroker's single node does.
    settings = kraft_controller_settings(config, core.cluster_id, log_manager, None if observer else voters,
                                         2 if _one_voter_quorum(config) else 0, 1 if _one_voter_quorum(config) else 0)
    # The broker side's incarnation, known to the controller side: a registration of this node id by
    # another incarnation is this node's previous process (ClusterControlManager.activate).
    incarnation_id = uuid.uuid4()
    settings = dataclasses.replace(settings, controller=dataclasses.replace(
        settings.controller, local_broker_incarnation_id=incarnation_id))
    controller_links = KRaftControllerLinks(settings, loader=core.loader, config_helper=core.config_helper,
                                            time_ms=core.time_ms)
    follower = RaftMetadataFollower(config.node_id, controller_links.settings.quorum.voters,
                                    controller_links.manager)
    controller_links.listener.register(follower)

    def offline_log_dirs() -> list[uuid.UUID]:
        return [log_manager.directory_ids[d] for d in log_manager.offline_dirs if d in log_manager.directory_ids]

    links = KRaftBrokerLinks(kraft_broker_settings(config, core.cluster_id, log_manager, voters),
                             metadata_log_dir=config.metadata_log_dir, loader=core.loader, cache=core.cache,
                             time_ms=core.time_ms, offline_log_dirs=offline_log_dirs, follower=follower,
                             incarnation_id=incarnation_id)
    core.replica_manager.set_alter_partition_sender(links.channel.send_alter_partition)
    return _RoleWiring(links.controller, load=lambda: None, kraft=links, kraft_controller=controller_links)


def build_authorizer(config: KafkaConfig) -> StandardAuthorizer | None:
    """`authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer`: Kafka's
    StandardAuthorizer over the image's ACLs, with `super.users` and `allow.everyone.if.no.acl.found`.
    None (no authorization, no cost on the request path) when the key is empty, Kafka's default."""
    if not config["authorizer.class.name"]:
        return None
    supers = [u.strip() for u in str(config["super.users"] or "").split(";") if u.strip()]
    return StandardAuthorizer(supers, bool(config["allow.everyone.if.no.acl.found"]))


def shutdown_services(services: BrokerServices) -> None:
    """Stop what `build_services` started, in reverse (the broker adds its network and cleaner steps)."""
    if services.share_partition_manager is not None \
            and isinstance(services.share_partition_manager.persister, NetworkSharePersister):
        services.share_partition_manager.persister.close()
    if services.share_partition_manager is not None:
        services.share_partition_manager.delayed_share_fetch_purgatory.shutdown()
    if services.share_coordinator is not None:
        services.share_coordinator.shutdown()
    services.transaction_coordinator.shutdown()
    services.group_coordinator.shutdown()
    services.replica_manager.shutdown()
    services.controller.close()
    if services.log_manager.started:
        services.log_manager.shutdown()


def share_partition_manager(config: KafkaConfig, replica_manager: ReplicaManager, cache: MetadataCache,
                            group_coordinator: GroupCoordinatorService, share_coordinator: ShareCoordinatorService,
                            time_ms: Clock) -> SharePartitionManager:
    """The broker's share partitions (KIP-932), their state kept by the share coordinator, told by the
    group coordinator when a share-group member leaves or is fenced and when a share group is deleted.
    On a multi-broker cluster the state goes to the share coordinator of each share-partition over the
    inter-broker listener (the network persister, Kafka's DefaultStatePersister); a single node calls
    its share coordinator in process."""
    persister: SharePersister = share_coordinator
    if in_kraft_cluster(config):
        persister = network_share_persister(config, replica_manager, cache)
    manager = SharePartitionManager(config, replica_manager, cache, time_ms, persister)
    group_coordinator.share_member_listener = manager.on_member_left
    replica_manager.delayed_share_fetch_listener = manager.on_partition_event
    replica_manager.delayed_share_fetch_watched = manager.delayed_share_fetch_purgatory.watched_keys
    group_coordinator.share_group_deleted_listener = manager.on_group_deleted
    # ShareGroupStatePartitionMetadata: the group coordinator initializes and deletes states through it.
    group_coordinator.share_state_persister = persister if isinstance(persister, NetworkSharePersister) \
        else InProcessGroupStatePersister(share_coordinator)
    return manager


def network_share_persister(config: KafkaConfig, replica_manager: ReplicaManager,
                            cache: MetadataCache) -> NetworkSharePersister:
    """Kafka's DefaultStatePersister: the share coordinator from the metadata image, the RPCs over the
    inter-broker listener."""

    def live(broker_id: int) -> bool:
        reg = cache.image.cluster.broker(broker_id)
        return reg is not None and not reg.fenced

    def endpoint_of(broker_id: int) -> tuple[str, int] | None:
        return replica_manager.endpoint_lookup(broker_id) if live(broker_id) else None

    def topic_partitions() -> int | None:
        info = cache.topic(STATE_TOPIC)
        return None if info is None else int(info.num_partitions)

    def leader(partition: int) -> int | None:
        reg = cache.image.partition(STATE_TOPIC, partition)
        return reg.leader if reg is not None and reg.leader >= 0 and live(reg.leader) else None

    transport = NodeConnectionTransport(config.node_id, endpoint_of, int(config.get("request.timeout.ms", 30000)),
                                        security=config.inter_broker_security())
    return NetworkSharePersister(config.node_id, MetadataCoordinatorLocator(topic_partitions, leader), transport)
