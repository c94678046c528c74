"""process.roles=broker configuration: which node kbroker runs as, Kafka's checks on the quorum keys,
and the typed settings the server/ links get (kbroker/server/settings.py, services.kraft_broker_settings)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from kbroker.config import ConfigError, KafkaConfig
from kbroker.log.config import LogConfig
from kbroker.log.manager import LogManager
from kbroker.server.settings import QuorumNode, parse_bootstrap_servers, parse_voters
from kbroker.services import kraft_broker_settings

BROKER = {"process.roles": "broker", "node.id": "3", "controller.listener.names": "CONTROLLER",
          "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT"}


def test_only_process_roles_broker_joins_a_cluster() -> None:
    assert KafkaConfig({**BROKER, "controller.quorum.voters": "1@h:9093"}).is_kraft_broker
    assert not KafkaConfig({}).is_kraft_broker
    assert not KafkaConfig({"process.roles": "broker,controller"}).is_kraft_broker


def test_a_broker_needs_a_way_to_the_quorum_and_the_controller_listener() -> None:
    with pytest.raises(ConfigError, match="controller.quorum.bootstrap.servers"):
        KafkaConfig(BROKER)
    with pytest.raises(ConfigError, match="controller.listener.names"):
        KafkaConfig({"process.roles": "broker", "controller.quorum.voters": "1@h:9093"})
    with pytest.raises(ConfigError, match="controller.quorum.voters"):
        KafkaConfig({**BROKER, "controller.quorum.voters": "h:9093"})
    with pytest.raises(ConfigError, match="controller.quorum.bootstrap.servers"):
        KafkaConfig({**BROKER, "controller.quorum.bootstrap.servers": "1@h:9093"})


def test_quorum_addresses_parse_as_kafka_writes_them() -> None:
    assert parse_voters(["1@127.0.0.1:9093", "2@[::1]:9094"]) == (QuorumNode(1, "127.0.0.1", 9093),
                                                                   QuorumNode(2, "::1", 9094))
    assert parse_bootstrap_servers(["c1:9093"]) == (QuorumNode(-1, "c1", 9093),)
    with pytest.raises(ValueError):
        parse_voters(["x@h:1"])


def test_settings_read_kafkas_keys_and_the_directory_ids(tmp_path: Path) -> None:
    config = KafkaConfig({**BROKER, "controller.quorum.bootstrap.servers": "127.0.0.1:9093",
                          "log.dirs": f"{tmp_path / 'a'},{tmp_path / 'b'}", "broker.rack": "r2",
                          "broker.heartbeat.interval.ms": "500"})
    lm = LogManager(config.log_dirs, LogConfig.from_props({}), node_id=3, cluster_id="cid")
    lm.startup()
    try:
        s = kraft_broker_settings(config, "cid", lm)
    finally:
        lm.shutdown()
    assert (s.node_id, s.cluster_id, s.rack, s.heartbeat_interval_ms) == (3, "cid", "r2", 500)
    assert s.quorum_bootstrap == (QuorumNode(-1, "127.0.0.1", 9093),)
    assert s.controller_listener_name == "CONTROLLER"
    assert len(s.log_dir_ids) == 2 and all(isinstance(d, uuid.UUID) for d in s.log_dir_ids)
    assert s.metadata_directory_id == lm.directory_ids[config.metadata_log_dir] == s.log_dir_ids[0]
