"""`build_services` for each `process.roles`: one construction path, so every role gets the same
common services; what differs is the role's controller and links (kbroker/services.py, `_RoleWiring`)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from kbroker.api.context import BrokerServices
from kbroker.config import KafkaConfig
from kbroker.controller.local_controller import LocalController
from kbroker.controller.quorum_controller import QuorumController
from kbroker.log.config import LogConfig
from kbroker.log.manager import LogManager
from kbroker.server.remote_controller import RemoteController
from kbroker.services import build_services, shutdown_services

LISTENERS = {"controller.listener.names": "CONTROLLER",
             "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT"}


def _formatted(tmp_path: Path, props: dict[str, str]) -> KafkaConfig:
    """A config whose log dir is formatted with a cluster id (as `kafka-storage format` would)."""
    config = KafkaConfig({**props, "log.dirs": str(tmp_path / "data"), "kbroker.metrics.enable": "true"})
    lm = LogManager(config.log_dirs, LogConfig.from_props({}), node_id=config.node_id, cluster_id="cid")
    lm.startup()
    lm.shutdown()
    return config


def _stop(services: BrokerServices) -> None:
    shutdown_services(services)
    if services.kraft is not None:
        asyncio.run(services.kraft.close())
    if services.kraft_controller is not None:
        services.kraft_controller.metadata_log.close()


def _check_common(services: BrokerServices) -> None:
    # The meters the network layer records into are the replica manager's, on every role (a KRaft
    # node's /metrics shows its request, socket-server and replica metrics, as a single node's does).
    assert services.metrics is not None and services.metrics is services.replica_manager.metrics
    gc = services.group_coordinator
    assert gc.controller is services.controller and services.producer_id_manager.controller is services.controller
    assert services.transaction_coordinator.controller is services.controller


def test_single_node(tmp_path: Path) -> None:
    services = build_services(KafkaConfig({"log.dirs": str(tmp_path / "data"), "node.id": "1",
                                           "kbroker.metrics.enable": "true"}))
    try:
        _check_common(services)
        assert isinstance(services.controller, LocalController)
        assert services.kraft is None and services.kraft_controller is None
    finally:
        _stop(services)


def test_kraft_broker(tmp_path: Path) -> None:
    config = _formatted(tmp_path, {"process.roles": "broker", "node.id": "3", **LISTENERS,
                                   "controller.quorum.bootstrap.servers": "127.0.0.1:9093"})
    services = build_services(config)
    try:
        _check_common(services)
        assert services.kraft is not None and services.kraft_controller is None
        assert isinstance(services.controller, RemoteController) and services.controller is services.kraft.controller
        # Its coordinators follow their state topics as publishers of the image the fetcher loads.
        assert services.group_coordinator in services.kraft.fetcher.loader.publishers
    finally:
        _stop(services)


def test_kraft_controller(tmp_path: Path) -> None:
    config = _formatted(tmp_path, {"process.roles": "controller", "node.id": "1", **LISTENERS,
                                   "listeners": "CONTROLLER://127.0.0.1:0",
                                   "controller.quorum.voters": "1@127.0.0.1:9093"})
    services = build_services(config)
    try:
        _check_common(services)
        assert services.kraft is None and services.kraft_controller is not None
        assert isinstance(services.controller, QuorumController)
        assert services.authorizer is None  # the controller listener authorizes nothing yet
    finally:
        _stop(services)
