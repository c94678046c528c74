"""`ReplicaCluster`: N in-process kbroker brokers replicating to each other, for replication tests.

Each broker is the real stack (`kbroker.services.build_services` with its own log dir, the
`ApiDispatcher`, a `KafkaServer` listening on its own loopback port), all on one asyncio loop that
runs in a background thread, so a test drives them with ordinary blocking clients (kafka-python,
confluent-kafka) from the main thread.

A stand-in for the controller quorum, until the KRaft broker/controller work (issues 10, 13) is
merged: the harness is the controller. It keeps its own metadata image (a `MetadataLoader` it
feeds) and hands every live broker's `MetadataLoader` the *same* records -- RegisterBrokerRecord +
UnfenceBrokerRecord for each broker, TopicRecord / ConfigRecord / PartitionRecord for a topic,
PartitionChangeRecord for ISR and leader changes, FenceBrokerRecord for a failed broker -- as a
broker replaying `__cluster_metadata` from the quorum would. Each broker's own `LocalController`
wrote its bootstrap feature levels; the harness appends the records to that broker's copy of
`__cluster_metadata` and replays them through its loader. The one thing each broker still decides
alone is the producer-id block (its LocalController answers AllocateProducerIds): each broker is
given its own range (a ProducerIdsRecord fed to it alone, from 10^9 x its node id) so two brokers
never hand out the same producer id. AlterPartition requests from
leaders go to `ReplicaCluster.alter_partition`, a small controller function that checks them as
Kafka's `ReplicationControlManager.alterPartition` does (leader, leader epoch, partition epoch,
eligible replicas) and publishes the PartitionChangeRecord to every broker before answering.

"Failing" a broker isolates it: its listener closes (clients and followers lose it), its fetchers stop,
the controller fences it, removes it from every ISR and elects for the partitions it led the first live
ISR replica in assignment order (Kafka's election). Its process state and log stay as they were --
a leader cut off, not a clean shutdown -- so restoring it shows the old leader truncating what it
had written alone. Records published while a broker is failed are replayed to it when it comes back,
followed by its re-registration with a new broker epoch.

    with ReplicaCluster(tmp_path, 3, {"replica.lag.time.max.ms": "1000"}) as cluster:
        cluster.create_topic("t", replicas=[1, 2, 3], configs={"min.insync.replicas": "2"})
        ... cluster.bootstrap ...
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from kbroker.api.context import BrokerServices
from kbroker.api.dispatcher import ApiDispatcher
from kbroker.broker import socket_server_config
from kbroker.config import KafkaConfig
from kbroker.metadata.image import MetadataImage, PartitionRegistration
from kbroker.metadata.loader import MetadataBatch, MetadataLoader
from kbroker.net import KafkaServer
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages.alter_partition import AlterPartitionRequest, AlterPartitionResponse
from kbroker.protocol.metadata_records.config_record import ConfigRecord
from kbroker.protocol.metadata_records.fence_broker_record import FenceBrokerRecord
from kbroker.protocol.metadata_records.partition_change_record import PartitionChangeRecord
from kbroker.protocol.metadata_records.partition_record import PartitionRecord
from kbroker.protocol.metadata_records.producer_ids_record import ProducerIdsRecord
from kbroker.protocol.metadata_records.register_broker_record import RegisterBrokerRecord
from kbroker.protocol.metadata_records.topic_record import TopicRecord
from kbroker.protocol.metadata_records.unfence_broker_record import UnfenceBrokerRecord
from kbroker.replica.partition import Partition
from kbroker.services import build_services, shutdown_services
from tests.support.broker import free_port

T = TypeVar("T")
TOPIC_RESOURCE = 2
PRODUCER_ID_RANGE = 10**9


@dataclass
class Node:
    node_id: int
    port: int
    config: KafkaConfig
    services: BrokerServices
    server: KafkaServer | None = None
    epoch: int = 0
    alive: bool = True
    backlog: list[list[Any]] = field(default_factory=list)  # record batches missed while failed

    @property
    def loader(self) -> MetadataLoader:
        return self.services.controller.loader  # type: ignore[attr-defined, no-any-return]


class ReplicaCluster:
    """N in-process brokers and a stand-in controller (see the module docstring)."""

    def __init__(self, root: Path, n: int = 3, overrides: Mapping[str, str] | None = None, *,
                 racks: Mapping[int, str] | None = None) -> None:
        self.root = Path(root)
        self.n = n
        self.overrides = dict(overrides or {})
        self.racks = dict(racks or {})
        self.nodes: dict[int, Node] = {}
        self.controller = MetadataLoader()  # the controller's own image of what it published
        self.alter_partition_requests: list[AlterPartitionRequest] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="replica-cluster", daemon=True)
        self._next_epoch = 100

    # -- running things on the cluster's loop ------------------------------------------------------

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def call(self, fn: Callable[[], T], timeout: float = 30.0) -> T:
        """Run `fn` on the cluster's loop (at once when already there) and return its result."""
        if threading.current_thread() is self._thread:
            return fn()

        async def wrapper() -> T:
            return fn()

        return self.run(wrapper(), timeout)

    # -- lifecycle -----------------------------------------------------------------------------------

    def start(self) -> ReplicaCluster:
        self._thread.start()
        self.run(self._start())
        return self

    async def _start(self) -> None:
        for i in range(1, self.n + 1):
            port = free_port()
            props = {
                "node.id": str(i),
                "log.dirs": str(self.root / f"broker-{i}"),
                "listeners": f"PLAINTEXT://127.0.0.1:{port}",
                "auto.create.topics.enable": "false",
                "replica.fetch.wait.max.ms": "200",
                "replica.fetch.backoff.ms": "100",
                "log.initial.task.delay.ms": "0",
            }
            if i in self.racks:
                props["broker.rack"] = self.racks[i]
            props.update(self.overrides)
            config = KafkaConfig(props)
            services = build_services(config)
            node = Node(i, port, config, services)
            services.replica_manager.set_alter_partition_sender(self._sender(i))
            self.nodes[i] = node
            await self._listen(node)
        self.publish([r for i in self.nodes for r in self._registration(i)])
        for node in self.nodes.values():
            # Disjoint producer-id ranges: each broker's LocalController still allocates its own blocks
            # (AllocateProducerIds has no shared controller here), from 10^9 * node id on.
            self._feed(node, [ProducerIdsRecord(broker_id=node.node_id, broker_epoch=node.epoch,
                                                next_producer_id=PRODUCER_ID_RANGE * node.node_id)])

    def _registration(self, node_id: int) -> list[Any]:
        node = self.nodes[node_id]
        self._next_epoch += 1
        node.epoch = self._next_epoch
        endpoint = RegisterBrokerRecord.BrokerEndpoint(name="PLAINTEXT", host="127.0.0.1", port=node.port,
                                                       security_protocol=0)
        features = [RegisterBrokerRecord.BrokerFeature(name="metadata.version", min_supported_version=7,
                                                       max_supported_version=27)]
        return [
            RegisterBrokerRecord(broker_id=node_id, incarnation_id=uuid.uuid4(), broker_epoch=node.epoch,
                                 end_points=[endpoint], features=features, rack=self.racks.get(node_id),
                                 fenced=True),
            UnfenceBrokerRecord(id=node_id, epoch=node.epoch),
        ]

    async def _listen(self, node: Node) -> None:
        server = KafkaServer(socket_server_config(node.config), ApiDispatcher(node.services))
        await server.start()
        node.server = server

    def close(self) -> None:
        if not self._thread.is_alive():
            return
        try:
            self.run(self._close())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop.close()

    async def _close(self) -> None:
        for node in self.nodes.values():
            await node.services.replica_manager.replica_fetcher_manager.shutdown()
        for node in self.nodes.values():
            if node.server is not None:
                await node.server.stop(2)
                node.server = None
        for node in self.nodes.values():
            shutdown_services(node.services)

    def __enter__(self) -> ReplicaCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{n.port}" for n in self.nodes.values() if n.alive)

    # -- the stand-in controller -------------------------------------------------------------------

    def publish(self, records: list[Any]) -> None:
        """Commit `records` as one batch: the controller's image, then every live broker's loader (a
        failed broker gets them when restored). Must run on the cluster's loop or with it idle."""
        if self._loop_thread_is_current():
            self._publish(records)
        else:
            self.call(lambda: self._publish(records))

    def _loop_thread_is_current(self) -> bool:
        return threading.current_thread() is self._thread

    def _publish(self, records: list[Any]) -> None:
        now = int(time.time() * 1000)
        self.controller.handle_commit([MetadataBatch(self.controller.last_applied_offset + 1, 1, now, records)])
        for node in self.nodes.values():
            if node.alive:
                self._feed(node, records)
            else:
                node.backlog.append(records)

    @staticmethod
    def _feed(node: Node, records: list[Any]) -> None:
        """Append to the broker's own copy of `__cluster_metadata` and replay it, as a broker that
        fetched the batch from the quorum would (its LocalController's later writes, producer-id
        blocks, then follow at the right offsets)."""
        controller = node.services.controller
        controller.loader.handle_commit([controller.metadata_log.append(records)])  # type: ignore[attr-defined]

    @property
    def image(self) -> MetadataImage:
        return self.controller.image

    def registration(self, topic: str, partition: int = 0) -> PartitionRegistration:
        reg = self.image.partition(topic, partition)
        assert reg is not None, f"no partition {topic}-{partition}"
        return reg

    def create_topic(self, name: str, replicas: list[int], configs: Mapping[str, str] | None = None,
                     partitions: int = 1) -> uuid.UUID:
        """TopicRecord, ConfigRecords, and one PartitionRecord per partition (leader: the first replica)."""
        topic_id = uuid.uuid4()
        records: list[Any] = [TopicRecord(name=name, topic_id=topic_id)]
        for k, v in (configs or {}).items():
            records.append(ConfigRecord(resource_type=TOPIC_RESOURCE, resource_name=name, name=k, value=v))
        for p in range(partitions):
            reps = replicas[p % len(replicas):] + replicas[:p % len(replicas)]
            records.append(PartitionRecord(partition_id=p, topic_id=topic_id, replicas=list(reps), isr=list(reps),
                                           leader=reps[0], leader_epoch=0, partition_epoch=0))
        self.publish(records)
        return topic_id

    def _sender(self, node_id: int) -> Callable[[AlterPartitionRequest], Coroutine[Any, Any, AlterPartitionResponse]]:
        async def send(request: AlterPartitionRequest) -> AlterPartitionResponse:
            if not self.nodes[node_id].alive:
                raise ConnectionError(f"broker {node_id} is cut off from the controller")
            return self.alter_partition(request)

        return send

    def alter_partition(self, request: AlterPartitionRequest) -> AlterPartitionResponse:
        """Kafka's `ReplicationControlManager.alterPartition`, reduced to what the harness needs."""
        self.alter_partition_requests.append(request)
        image = self.image
        broker = image.cluster.broker(request.broker_id)
        if broker is None or broker.epoch != request.broker_epoch:
            return AlterPartitionResponse(error_code=ErrorCode.STALE_BROKER_EPOCH, topics=[])
        topics = []
        changes: list[Any] = []
        for t in request.topics:
            parts = []
            for p in t.partitions:
                reg = image.topics.get_partition(t.topic_id, p.partition_index)
                data = AlterPartitionResponse.PartitionData(partition_index=p.partition_index)
                new_isr = [s.broker_id for s in p.new_isr_with_epochs] or list(p.new_isr)
                epochs = {s.broker_id: s.broker_epoch for s in p.new_isr_with_epochs}
                if reg is None:
                    data.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                elif request.broker_id != reg.leader:
                    data.error_code = ErrorCode.INVALID_REQUEST
                elif p.leader_epoch < reg.leader_epoch:
                    data.error_code = ErrorCode.FENCED_LEADER_EPOCH
                elif p.leader_epoch > reg.leader_epoch:
                    data.error_code = ErrorCode.NOT_CONTROLLER
                elif p.partition_epoch != reg.partition_epoch:
                    data.error_code = ErrorCode.INVALID_UPDATE_VERSION
                elif not set(new_isr) <= set(reg.replicas) or reg.leader not in new_isr:
                    data.error_code = ErrorCode.INVALID_REQUEST
                elif any(not self._eligible(b, epochs.get(b, -1)) for b in new_isr if b not in reg.isr):
                    data.error_code = ErrorCode.INELIGIBLE_REPLICA
                else:
                    changes.append(PartitionChangeRecord(partition_id=p.partition_index, topic_id=t.topic_id,
                                                         isr=sorted(new_isr, key=list(reg.replicas).index)))
                    new = reg.merge(changes[-1])
                    data.leader_id, data.leader_epoch = new.leader, new.leader_epoch
                    data.isr, data.partition_epoch = list(new.isr), new.partition_epoch
                parts.append(data)
            topics.append(AlterPartitionResponse.TopicData(topic_id=t.topic_id, partitions=parts))
        if changes:
            self.publish(changes)
        return AlterPartitionResponse(error_code=ErrorCode.NONE, topics=topics)

    def _eligible(self, broker_id: int, broker_epoch: int) -> bool:
        reg = self.image.cluster.broker(broker_id)
        return (reg is not None and not reg.fenced and not reg.in_controlled_shutdown
                and (broker_epoch < 0 or broker_epoch == reg.epoch))

    def elect_leader(self, topic: str, partition: int, leader: int, isr: list[int] | None = None) -> None:
        reg = self.registration(topic, partition)
        topic_image = self.image.topic(topic)
        assert topic_image is not None
        self.publish([PartitionChangeRecord(partition_id=partition, topic_id=topic_image.id, leader=leader,
                                            isr=isr if isr is not None else list(reg.isr))])

    # -- failures --------------------------------------------------------------------------------

    def fail_broker(self, node_id: int, *, keep_listener: bool = False) -> None:
        """Cut `node_id` off (listener closed, fetchers stopped) and let the controller react: fence it,
        drop it from every ISR, elect the first live ISR replica (assignment order) where it led.

        `keep_listener`: cut it off from the controller only -- a zombie leader that clients can still
        reach but that no longer gets metadata or reaches the controller (its fetchers keep running)."""
        self.run(self._fail(node_id, keep_listener))

    async def _fail(self, node_id: int, keep_listener: bool = False) -> None:
        node = self.nodes[node_id]
        node.alive = False
        if not keep_listener:
            node.services.replica_manager.replica_fetcher_manager.pause()
            if node.server is not None:
                await node.server.stop(1)
                node.server = None
        records: list[Any] = [FenceBrokerRecord(id=node_id, epoch=node.epoch)]
        live = {i for i, n in self.nodes.items() if n.alive}
        for topic in self.image.topics:
            for index, reg in topic.partitions.items():
                if node_id not in reg.isr and reg.leader != node_id:
                    continue
                isr = [r for r in reg.isr if r != node_id]
                change = PartitionChangeRecord(partition_id=index, topic_id=topic.id, isr=isr or [node_id])
                if reg.leader == node_id:
                    candidates = [r for r in reg.replicas if r in isr and r in live]
                    change.leader = candidates[0] if candidates else -1
                    if not isr:
                        change.isr = [node_id]  # Kafka keeps the last ISR member when no leader is left
                records.append(change)
        self._publish(records)

    def restore_broker(self, node_id: int) -> None:
        """Bring a failed broker back: listener reopened, the metadata it missed replayed, fetchers
        resumed, and a re-registration (new broker epoch) published to everyone."""
        self.run(self._restore(node_id))

    async def _restore(self, node_id: int) -> None:
        node = self.nodes[node_id]
        if node.server is None:
            await self._listen(node)
        node.alive = True
        for records in node.backlog:
            self._feed(node, records)
        node.backlog.clear()
        node.services.replica_manager.replica_fetcher_manager.resume()
        self._publish(self._registration(node_id))

    def stop_broker(self, node_id: int) -> None:
        """A clean shutdown of `node_id` (listener, fetchers, then every log flushed and closed); the
        controller fences it and moves leadership as for a failure."""
        self.run(self._stop(node_id))

    async def _stop(self, node_id: int) -> None:
        node = self.nodes[node_id]
        await self._fail(node_id)
        await node.services.replica_manager.replica_fetcher_manager.shutdown()
        shutdown_services(node.services)

    def start_broker(self, node_id: int) -> None:
        """Start a stopped broker again on its data: its services replay its copy of `__cluster_metadata`
        (hosting its partitions as followers of the current leaders), then it gets what it missed and
        re-registers with a new broker epoch."""
        self.run(self._start_again(node_id))

    async def _start_again(self, node_id: int) -> None:
        node = self.nodes[node_id]
        node.services = build_services(node.config)
        node.services.replica_manager.set_alter_partition_sender(self._sender(node_id))
        await self._restore(node_id)

    def pause_fetchers(self, node_id: int) -> None:
        """A follower that stops fetching (SIGSTOP in-process); its listener stays up. Returns once a
        fetch already waiting at the leader (replica.fetch.wait.max.ms) has had time to come back, so
        nothing written after this call reaches the follower."""
        self.call(self.nodes[node_id].services.replica_manager.replica_fetcher_manager.pause)
        time.sleep(int(self.nodes[node_id].config["replica.fetch.wait.max.ms"]) / 1000 + 0.2)

    def resume_fetchers(self, node_id: int) -> None:
        self.call(self.nodes[node_id].services.replica_manager.replica_fetcher_manager.resume)

    # -- looking inside ----------------------------------------------------------------------------

    def partition(self, node_id: int, topic: str, index: int = 0) -> Partition | None:
        rm = self.nodes[node_id].services.replica_manager
        return rm.get_partition(topic, index) or rm.follower_partition(topic, index)

    def log_state(self, node_id: int, topic: str, index: int = 0) -> tuple[int, int, list[tuple[int, int]]]:
        """(LEO, HW, epoch cache entries) of a broker's replica, read on the loop."""
        def read() -> tuple[int, int, list[tuple[int, int]]]:
            p = self.partition(node_id, topic, index)
            assert p is not None
            return p.log_end_offset, p.high_watermark, p.log.leader_epoch_cache.entries()

        return self.call(read)

    def wait_for(self, condition: Callable[[], bool], timeout: float = 20.0, what: str = "condition") -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.call(condition):
                return
            time.sleep(0.05)
        raise AssertionError(f"timed out after {timeout}s waiting for {what}")
