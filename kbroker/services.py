"""The one place the broker's services are built and wired: `build_services(config) -> BrokerServices`.

Owns the construction order (metadata image -> LogManager -> ReplicaManager -> TopicManager ->
storage start-up and recovery -> hosted partitions -> topic log configs -> group coordinator) and the
hooks between the services (a new log asks the topic manager for its config). `kbroker.broker.Broker`
and the in-process test stacks both call it, so a test runs exactly the wiring a broker runs.

It sits in the wiring layer, beside broker.py and config.py, because it imports every domain package
and the broker config; nothing below it may import it. It does not touch the event loop, sockets,
the data-directory lock or the periodic tasks (retention, flush, cleaning rounds): those belong to
`Broker`. The group coordinator is
built here but started by the caller (`services.group_coordinator.startup()` needs a running loop).
"""

from __future__ import annotations

from collections.abc import Callable

from kbroker.api.context import BrokerServices
from kbroker.clock import Clock, wall_clock_ms
from kbroker.cluster.metadata import METADATA_FILE_NAME, MetadataStore
from kbroker.cluster.topics import TopicManager
from kbroker.config import KafkaConfig
from kbroker.coord.runtime import GroupCoordinatorRuntime
from kbroker.log.cleaner_manager import LogCleaner
from kbroker.log.config import LogConfig
from kbroker.log.manager import LogManager
from kbroker.replica.replica_manager import ReplicaManager


def build_services(
    config: KafkaConfig,
    *,
    time_ms: Clock = wall_clock_ms,
    background_executor: Callable[[Callable[[], None]], object] | None = None,
) -> BrokerServices:
    """Build every service from `config`, recover the logs on disk and host their partitions.

    Raises ValueError for a broker config that gives no valid log config, and the storage layer's
    `InconsistentMetaPropertiesError` / `KafkaStorageError` for unusable log dirs (the broker turns
    them into a one-line start-up error).
    """
    log_dirs = config.log_dirs
    # The single-node metadata image in the first log dir (the controller issue replaces it).
    metadata = MetadataStore(log_dirs[0] / METADATA_FILE_NAME)
    metadata.load()
    topic_manager: TopicManager | None = None

    def config_for_topic(topic: str) -> LogConfig | None:
        # A log opened at start-up or created for a new partition: its topic's overrides over the
        # broker's static and dynamic configs (the one resolver, ConfigurationControlManager.log_config).
        return None if topic_manager is None else topic_manager.config_for_topic(topic)

    log_manager = LogManager(
        log_dirs,
        # Logs of a topic missing from the image (strays) open with the static broker config.
        LogConfig.from_props(config.broker_props()),
        node_id=config.node_id,
        time_ms=time_ms,
        config_for_topic=config_for_topic,
        background_executor=background_executor,
        producer_id_expiration_ms=config["producer.id.expiration.ms"],
    )
    replica_manager = ReplicaManager(config, log_manager, metadata, time_ms)
    topic_manager = TopicManager(config, metadata, replica_manager)
    # Formats empty log dirs (meta.properties with a new cluster id, as `kafka-storage.sh format`
    # would), then recovers every partition log found on disk.
    log_manager.startup()
    try:
        return _host_partitions(config, time_ms, metadata, log_manager, replica_manager, topic_manager)
    except BaseException:
        # Nothing is served yet: close the recovered logs (flushed, checkpointed) before giving up.
        replica_manager.shutdown()
        log_manager.shutdown()
        raise


def _host_partitions(
    config: KafkaConfig,
    time_ms: Clock,
    metadata: MetadataStore,
    log_manager: LogManager,
    replica_manager: ReplicaManager,
    topic_manager: TopicManager,
) -> BrokerServices:
    assert log_manager.cluster_id is not None
    # The compaction planner (log.cleaner.*); the broker runs its rounds on a worker thread. It exists
    # before partitions are hosted, so a stray log deleted below also leaves its cleaner checkpoint.
    log_manager.cleaner = LogCleaner(
        log_manager,
        enabled=bool(config["log.cleaner.enable"]),
        dedupe_buffer_size=int(config["log.cleaner.dedupe.buffer.size"]),
        threads=int(config["log.cleaner.threads"]),
        time_ms=time_ms,
    )
    replica_manager.startup()
    # Logs reopened at start-up get their topic overrides plus the persisted dynamic broker configs.
    topic_manager.apply_log_configs()
    group_coordinator = GroupCoordinatorRuntime(config, replica_manager, topic_manager, metadata, time_ms)
    return BrokerServices(
        config=config,
        log_manager=log_manager,
        metadata=metadata,
        replica_manager=replica_manager,
        topic_manager=topic_manager,
        group_coordinator=group_coordinator,
        cluster_id=log_manager.cluster_id,
        node_id=config.node_id,
        time_ms=time_ms,
    )


def shutdown_services(services: BrokerServices) -> None:
    """Stop what `build_services` started, in reverse (the broker adds its network and cleaner steps)."""
    services.group_coordinator.shutdown()
    services.replica_manager.shutdown()
    if services.log_manager.started:
        services.log_manager.shutdown()
