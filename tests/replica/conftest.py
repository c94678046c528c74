"""A ReplicaManager over the real storage engine (C's LogManager) in a temp dir, without sockets, wired
by the broker's own builder (`kbroker.services.build_services`)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from kbroker.cluster.metadata import TopicInfo
from kbroker.config import KafkaConfig
from kbroker.services import build_services, shutdown_services


class Env:
    def __init__(self, root: Path, props: dict[str, str]) -> None:
        self.root = root
        self.props = props
        self.config = KafkaConfig({"log.dirs": str(root / "logs"), **props})
        self.services = build_services(self.config)
        self.log_manager = self.services.log_manager
        self.metadata = self.services.metadata
        self.rm = self.services.replica_manager

    def create_topic(self, name: str, partitions: int = 1, configs: dict[str, str] | None = None,
                     internal: bool = False) -> TopicInfo:
        info = TopicInfo(name, uuid.uuid4(), partitions, 1, dict(configs or {}), internal)
        self.metadata.put_topic(info)
        self.rm.add_partitions(info, range(partitions))
        return info

    def close(self) -> None:
        shutdown_services(self.services)


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    e = Env(tmp_path, {"node.id": "1", "max.incremental.fetch.session.cache.slots": "1000"})
    yield e
    e.close()
