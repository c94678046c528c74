"""`DynamicConfigPublisher`: changed topic and broker configs reach the live logs (Kafka's
`DynamicConfigPublisher` with its `TopicConfigHandler` and dynamic broker config reload).

Told of every new image after the replica manager (so partitions created by the same delta exist):
a topic whose overrides changed, or every hosted topic when a dynamic broker config changed, gets
its effective `LogConfig` (overrides, then dynamic and static broker synonyms, then Kafka's defaults)
handed to each hosted log whose config differs. Newly created partitions open with the right config
already (the log manager asks `ConfigHelper.config_for_topic`), so they are skipped here.

Must not import net/ or api/.
"""

from __future__ import annotations

import asyncio

from kbroker.cluster.configs import ConfigHelper
from kbroker.metadata.delta import MetadataDelta
from kbroker.metadata.image import ConfigResourceType, MetadataImage
from kbroker.metadata.loader import LoaderManifest
from kbroker.metadata.views import TopicInfo
from kbroker.replica.replica_manager import ReplicaManager


class DynamicConfigPublisher:
    name = "DynamicConfigPublisher"

    def __init__(self, helper: ConfigHelper, replica_manager: ReplicaManager) -> None:
        self.helper = helper
        self.replica_manager = replica_manager

    def on_metadata_update(self, delta: MetadataDelta, image: MetadataImage, manifest: LoaderManifest) -> None:
        changed = delta.changed_configs()
        if any(r.type == ConfigResourceType.BROKER for r in changed):
            names = [t.name for t in self.helper.metadata.topics()]
            self.reconfigure_replica_fetchers()
        else:
            names = sorted(r.name for r in changed if r.type == ConfigResourceType.TOPIC)
            # A partition that becomes leader here may have a log opened at startup, before the image
            # was known, with the broker's defaults (a process.roles=broker node restarted, then elected:
            # min.insync.replicas must be the topic's, issue 12): give it the topic's config now.
            if delta.topics_delta is not None:
                local = delta.topics_delta.local_changes(self.helper.metadata.node_id)
                names = sorted(set(names) | {tp.topic for tp in (*local.leaders, *local.followers)})
        for name in names:
            info = self.helper.metadata.topic(name)
            if info is not None:
                self.apply_log_config(info)

    def reconfigure_replica_fetchers(self) -> None:
        """Kafka's `DynamicThreadPool` for num.replica.fetchers: a changed effective value resizes the
        replica fetcher pool (`ReplicaFetcherManager.resize`, on the loop)."""
        levels = self.helper.broker_levels("num.replica.fetchers")
        try:
            wanted = int(str(levels[0].value)) if levels and levels[0].value is not None else 1
        except ValueError:
            return
        manager = self.replica_manager.replica_fetcher_manager
        if wanted == manager.num_fetchers:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            manager.num_fetchers = max(1, wanted)  # nothing runs yet: new fetchers use the new count
            return
        loop.create_task(manager.resize(wanted))

    def apply_log_config(self, info: TopicInfo) -> None:
        """Hand the topic's effective config to every live log of the topic."""
        cfg = self.helper.log_config(info.configs)
        for p in range(info.num_partitions):
            partition = self.replica_manager.get_partition(info.name, p)
            if partition is not None and partition.log.config != cfg:
                partition.log.update_config(cfg)
