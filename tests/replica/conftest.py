"""A ReplicaManager over the real storage engine (C's LogManager) in a temp dir, without sockets."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kbroker.cluster.metadata import MetadataStore, TopicInfo
from kbroker.log import LogConfig, LogManager
from kbroker.replica.replica_manager import ReplicaManager


class Env:
    def __init__(self, root: Path, config: dict[str, Any]) -> None:
        self.root = root
        self.config = config
        self.log_manager = LogManager([root / "logs"], LogConfig(), node_id=1)
        self.log_manager.startup()
        self.metadata = MetadataStore(root / "logs" / "__kbroker_metadata.json")
        self.metadata.load()
        self.rm = ReplicaManager(config, self.log_manager, self.metadata)
        self.rm.startup()

    def create_topic(self, name: str, partitions: int = 1, configs: dict[str, str] | None = None,
                     internal: bool = False) -> TopicInfo:
        info = TopicInfo(name, uuid.uuid4(), partitions, 1, dict(configs or {}), internal)
        self.metadata.put_topic(info)
        self.rm.add_partitions(info, range(partitions))
        return info

    def close(self) -> None:
        self.rm.shutdown()
        self.log_manager.shutdown()


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    e = Env(tmp_path, {"node.id": 1, "max.incremental.fetch.session.cache.slots": 1000})
    yield e
    e.close()
