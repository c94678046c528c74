"""The one builder of the broker's services (`kbroker.services.build_services`): every service is
wired to the others it needs, the group coordinator is one typed field (no lazily built second one),
new logs take their config from the one resolver, and a rebuild over the same data dir recovers."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from kbroker.api import _groups
from kbroker.api.context import BrokerServices
from kbroker.config import KafkaConfig
from kbroker.services import build_services, shutdown_services
from tests.support.sync import SyncAdmin, run_now


def _config(tmp_path: Path) -> KafkaConfig:
    return KafkaConfig({"log.dirs": str(tmp_path / "data"), "node.id": "3", "log.retention.hours": "2"})


def test_services_are_wired_to_each_other(tmp_path: Path) -> None:
    services = build_services(_config(tmp_path))
    try:
        rm, lm = services.replica_manager, services.log_manager
        assert rm.log_manager is lm and rm.metadata is services.metadata
        assert services.configs.metadata is services.metadata
        gc = services.group_coordinator
        assert gc.replica_manager is rm and gc.controller is services.controller
        assert gc.metadata is services.metadata
        assert services.producer_id_manager.controller is services.controller
        # The group handlers reach the coordinator the builder made, never one of their own.
        assert _groups.runtime(services) is gc
        assert lm.cleaner is not None and lm.cleaner.log_manager is lm
        assert services.node_id == rm.node_id == 3
        meta = (tmp_path / "data" / "meta.properties").read_text()
        assert services.cluster_id and f"cluster.id={services.cluster_id}" in meta
        # No string-keyed bag of extra services.
        assert "extras" not in {f.name for f in dataclasses.fields(BrokerServices)}
    finally:
        shutdown_services(services)


def test_new_logs_use_the_one_config_resolver(tmp_path: Path) -> None:
    services = build_services(_config(tmp_path))
    try:
        tm = SyncAdmin(services.controller, services.configs)
        tm.alter_broker_configs(True, {"log.segment.bytes": "2097152"})  # cluster-wide dynamic default
        tm.create_topic("t", 1, configs={"cleanup.policy": "compact"})
        partition = services.replica_manager.get_partition("t", 0)
        assert partition is not None
        cfg = partition.log.config
        # Topic override, dynamic default and static broker synonym (hours -> ms) all applied.
        assert cfg.compact and cfg.segment_bytes == 2097152 and cfg.retention_ms == 2 * 3_600_000
        assert cfg == tm.log_config({"cleanup.policy": "compact"})
    finally:
        shutdown_services(services)


def test_rebuild_recovers_topics_and_their_configs(tmp_path: Path) -> None:
    services = build_services(_config(tmp_path))
    info = run_now(services.controller.create_topic("keep", 2, configs={"retention.ms": "5000"}))
    cluster_id = services.cluster_id
    shutdown_services(services)

    again = build_services(_config(tmp_path))
    try:
        assert again.cluster_id == cluster_id
        assert again.metadata.topic("keep") == info
        for p in (0, 1):
            partition = again.replica_manager.get_partition("keep", p)
            assert partition is not None and partition.topic_id == info.topic_id
            assert partition.log.config.retention_ms == 5000
    finally:
        shutdown_services(again)
