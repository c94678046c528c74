"""The clusters of the eligible-leader-replicas tests (KIP-966): kbroker brokers under one controller,
either a kbroker controller (formatted by `kbroker storage format`) or Apache Kafka 4.3.1's
(`kafka-storage format`). Both finalize eligible.leader.replicas.version=1 by default.

Users: tests/cluster/test_elr_kbroker_cluster.py, test_elr_feature_toggle_cluster.py (both through the
`elr_cluster` fixture factory below: a kbroker controller by default, Kafka's under @slow) and
test_elr_differential_cluster.py (both controllers in one test).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.cluster.test_kbroker_quorum import Quorum, _common, _format, running_quorum
from tests.support.broker import KBroker
from tests.support.java import java_unavailable_reason
from tests.support.kafka_cluster import KafkaCluster, new_cluster_id

BROKER_OVERRIDES = {"broker.heartbeat.interval.ms": "500", "offsets.topic.replication.factor": "1"}

Brokers = Callable[[Path, tuple[int, ...], dict[str, str], dict[str, str]],
                   AbstractContextManager[dict[int, KBroker]]]


@dataclass
class ElrCluster:
    """Three kbroker brokers (ids 2, 3, 4) under one controller."""

    brokers: dict[int, KBroker]

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values())


@contextmanager
def kbroker_controller_brokers(tmp_path: Path, broker_ids: tuple[int, ...], controller_overrides: dict[str, str],
                               broker_overrides: dict[str, str]) -> Iterator[dict[int, KBroker]]:
    """A kbroker controller (node 1) and kbroker brokers `broker_ids`, started; stopped on the way out."""
    q = Quorum(new_cluster_id(), tmp_path)
    c = q.controllers[1] = KBroker(tmp_path / "controller-1")
    for i in broker_ids:
        q.brokers[i] = KBroker(tmp_path / f"broker-{i}")
    c.overrides = {**_common(q), "process.roles": "controller", "node.id": "1",
                   "listeners": f"CONTROLLER://127.0.0.1:{c.port}", "log.dirs": str(c.log_dir),
                   **controller_overrides}
    _format(q, c, c.overrides)
    for i, b in q.brokers.items():
        b.overrides = {**_common(q), "process.roles": "broker", "node.id": str(i),
                       "listeners": f"PLAINTEXT://127.0.0.1:{b.port}", "log.dirs": str(b.log_dir),
                       **broker_overrides}
        _format(q, b, b.overrides)
    with running_quorum(q):
        yield dict(q.brokers)


@contextmanager
def kafka_controller_brokers(tmp_path: Path, broker_ids: tuple[int, ...], controller_overrides: dict[str, str],
                             broker_overrides: dict[str, str]) -> Iterator[dict[int, KBroker]]:
    """Apache Kafka 4.3.1's controller and kbroker brokers `broker_ids`, started; stopped on the way out."""
    k = KafkaCluster(tmp_path, controller_overrides=controller_overrides)
    try:
        k.start_controllers()
        brokers = {i: k.kbroker(i, broker_overrides) for i in broker_ids}
        for b in brokers.values():
            b.start(timeout=90)
        yield brokers
    finally:
        k.stop_all()


def elr_cluster_fixture(controller_overrides: dict[str, str]) -> Callable[..., Iterator[ElrCluster]]:
    """A function-scoped `cluster` fixture: brokers 2, 3, 4 under a kbroker controller, or (slow) under
    Kafka's, the controller started with `controller_overrides`."""

    @pytest.fixture(params=["kbroker", pytest.param("kafka", marks=pytest.mark.slow)])
    def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ElrCluster]:
        reason = java_unavailable_reason()
        if reason:
            pytest.skip(f"Kafka tools unavailable: {reason}")
        make: Brokers = kbroker_controller_brokers if request.param == "kbroker" else kafka_controller_brokers
        with make(tmp_path, (2, 3, 4), controller_overrides, BROKER_OVERRIDES) as brokers:
            yield ElrCluster(brokers)

    return cluster
