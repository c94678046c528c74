"""An in-process broker stack (real LogManager / ReplicaManager / TopicManager in a temp dir) with the
group coordinator runtime, and a way to call the group APIs through real request/response frames."""

from __future__ import annotations

import asyncio
import inspect
from pathlib import Path
from typing import Any

from kbroker.api.context import BrokerServices, RequestContext
from kbroker.api.dispatcher import ApiDispatcher
from kbroker.cluster.metadata import MetadataStore
from kbroker.cluster.topics import TopicManager
from kbroker.config import KafkaConfig
from kbroker.coord.service import GroupCoordinatorService
from kbroker.log import LogConfig, LogManager
from kbroker.protocol import (
    decode_request_frame,
    decode_response_frame,
    encode_request_frame,
    encode_response_frame,
)
from kbroker.protocol.headers import RequestHeader
from kbroker.replica import ReplicaManager


class Stack:
    def __init__(self, tmp: Path, **overrides: str) -> None:
        props = {"log.dirs": str(tmp / "data"), "node.id": "1", "listeners": "PLAINTEXT://127.0.0.1:9092",
                 "offsets.topic.num.partitions": "3", "group.initial.rebalance.delay.ms": "0"}
        props.update(overrides)
        self.config = KafkaConfig(props)
        holder: list[TopicManager] = []
        self.log_manager = LogManager(self.config.log_dirs, LogConfig.from_props(self.config.broker_props()),
                                      node_id=1, config_for_topic=lambda t: holder[0].config_for_topic(t))
        self.metadata = MetadataStore(self.config.log_dirs[0] / "__kbroker_metadata.json")
        self.metadata.load()
        self.replica_manager = ReplicaManager(self.config, self.log_manager, self.metadata)
        self.topic_manager = TopicManager(self.config, self.metadata, self.replica_manager)
        holder.append(self.topic_manager)
        self.log_manager.startup()
        self.replica_manager.startup()
        self.runtime = GroupCoordinatorService(self.config, self.replica_manager, self.topic_manager,
                                               self.metadata, self.replica_manager.time_ms)
        self.services = BrokerServices(config=self.config, log_manager=self.log_manager, metadata=self.metadata,
                                       replica_manager=self.replica_manager, topic_manager=self.topic_manager,
                                       cluster_id="test-cluster", node_id=1)
        self.services.extras["group_coordinator"] = self.runtime
        self.dispatcher = ApiDispatcher(self.services)
        self.correlation = 0

    def start(self) -> None:
        """Needs a running loop (schedules loading and timers on it)."""
        self.runtime.startup()

    async def wait_loaded(self) -> None:
        for _ in range(1000):
            if not self.runtime.loading:
                return
            await asyncio.sleep(0)
        raise AssertionError(f"partitions still loading: {self.runtime.loading}")

    @property
    def coordinator(self) -> Any:
        return self.runtime

    async def call(self, api_key: int, version: int, request: Any) -> Any:
        self.correlation += 1
        frame = encode_request_frame(RequestHeader(api_key=api_key, api_version=version,
                                                   correlation_id=self.correlation, client_id="t"), request)
        header, body = decode_request_frame(memoryview(frame)[4:])
        response = self.dispatcher.handle(RequestContext(listener_name="PLAINTEXT", client_id="t",
                                                         peer=("127.0.0.1", 5555)), header, body)
        if inspect.isawaitable(response):
            response = await asyncio.wait_for(response, 10)
        parts = encode_response_frame(api_key, version, self.correlation, response)
        data = b"".join(bytes(p) for p in parts)
        cid, decoded = decode_response_frame(api_key, version, memoryview(data)[4:])
        assert cid == self.correlation
        return decoded

    def shutdown(self) -> None:
        self.runtime.shutdown()
        self.replica_manager.shutdown()
        self.log_manager.shutdown()
