"""The one builder of the broker's services (`kbroker.services.build_services`): every service is
wired to the others it needs, the group coordinator is one typed field (no lazily built second one),
new logs take their config from the one resolver, and a rebuild over the same data dir recovers."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

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


def test_the_kept_log_config_follows_every_dynamic_change(tmp_path: Path) -> None:
    """`ConfigHelper.log_config` keeps one answer per (dynamic broker configs, topic overrides): a change
    to either is a new answer, and no caller shares an object another can change (issue 17: hosting a
    thousand partitions resolved the same config a thousand times)."""
    services = build_services(_config(tmp_path))
    try:
        tm = SyncAdmin(services.controller, services.configs)
        helper = services.configs
        first = helper.log_config({})
        assert first.retention_ms == 2 * 3_600_000 and first.segment_bytes == 1073741824
        again = helper.log_config({})
        assert again == first and again is not first  # a copy of the kept answer
        again.segment_bytes = 1
        assert helper.log_config({}).segment_bytes == 1073741824
        tm.alter_broker_configs(True, {"log.segment.bytes": "2097152"})  # cluster-wide dynamic default
        assert helper.log_config({}).segment_bytes == 2097152
        tm.alter_broker_configs(False, {"log.retention.ms": "60000"})  # this broker's dynamic config
        changed = helper.log_config({})
        assert changed.segment_bytes == 2097152 and changed.retention_ms == 60000
        assert helper.log_config({"retention.ms": "5000"}).retention_ms == 5000
        tm.create_topic("t", 3, configs={"segment.bytes": "4194304"})
        logs = [services.replica_manager.get_partition("t", p) for p in range(3)]
        assert all(p is not None and p.log.config.segment_bytes == 4194304 and p.log.config.retention_ms == 60000
                   for p in logs)
    finally:
        shutdown_services(services)


def test_a_topics_partitions_resolve_its_config_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Hosting 50 new partitions of one topic resolves the topic's LogConfig once, not 50 times."""
    from kbroker.log.config import LogConfig

    services = build_services(_config(tmp_path))
    try:
        tm = SyncAdmin(services.controller, services.configs)
        calls = []
        original = LogConfig.from_props.__func__  # type: ignore[attr-defined]

        def counted(cls: type[LogConfig], *args: object, **kwargs: object) -> LogConfig:
            calls.append(args)
            return original(cls, *args, **kwargs)  # type: ignore[no-any-return]

        monkeypatch.setattr(LogConfig, "from_props", classmethod(counted))
        tm.create_topic("many", 50, configs={"retention.ms": "7000"})
        assert all(services.replica_manager.get_partition("many", p) is not None for p in range(50))
        resolved = [a for a in calls if a and isinstance(a[-1], dict) and a[-1].get("retention.ms") == "7000"]
        assert 1 <= len(resolved) <= 2, len(resolved)  # validation may resolve it once more
    finally:
        shutdown_services(services)
