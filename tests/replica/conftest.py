"""A ReplicaManager over the real storage engine (C's LogManager) in a temp dir, without sockets, wired
by the broker's own builder (`kbroker.services.build_services`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kbroker.config import KafkaConfig
from kbroker.metadata.views import TopicInfo
from kbroker.services import build_services, shutdown_services
from tests.support.sync import run_now


class Env:
    def __init__(self, root: Path, props: dict[str, str]) -> None:
        self.root = root
        self.props = props
        self.config = KafkaConfig({"log.dirs": str(root / "logs"), **props})
        self.services = build_services(self.config)
        self.log_manager = self.services.log_manager
        self.metadata = self.services.metadata
        self.rm = self.services.replica_manager

    def create_topic(self, name: str, partitions: int = 1, configs: dict[str, str] | None = None) -> TopicInfo:
        """Through the controller, as CreateTopics does (internal topics included)."""
        return run_now(self.services.controller.create_topic(name, partitions, 1, configs or {}))

    def close(self) -> None:
        shutdown_services(self.services)


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    e = Env(tmp_path, {"node.id": "1", "max.incremental.fetch.session.cache.slots": "1000"})
    yield e
    e.close()
