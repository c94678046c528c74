"""Incremental hosting of new partitions (issue 19, finding 4), in process on a real event loop.

A creation of many partitions is committed at once but hosted in chunks across loop turns: the
partitions not hosted yet answer NOT_LEADER_OR_FOLLOWER; a topic deleted (or re-created) while its
partitions wait is not hosted from stale state; a restart hosts existing logs at once.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from kbroker.config import KafkaConfig
from kbroker.protocol.errors import ErrorCode
from kbroker.replica.replica_manager import SYNC_HOSTING_PARTITIONS
from kbroker.services import build_services, shutdown_services


def _config(root: Path) -> KafkaConfig:
    return KafkaConfig({"log.dirs": str(root / "logs"), "node.id": "1"})


def test_large_creation_is_hosted_across_loop_turns(tmp_path: Path) -> None:
    async def body() -> None:
        services = build_services(_config(tmp_path))
        rm = services.replica_manager
        try:
            await services.controller.create_topic("big", 200, 1)
            assert rm.pending_hosting == 200 - SYNC_HOSTING_PARTITIONS
            assert rm.get_partition("big", 0) is not None
            assert rm.get_partition("big", 199) is None
            assert rm.missing_partition_error("big", 199) == ErrorCode.NOT_LEADER_OR_FOLLOWER
            turns = 0
            while rm.pending_hosting:
                await asyncio.sleep(0)
                turns += 1
            assert turns > 1  # not in one go
            assert all(rm.get_partition("big", p) is not None for p in range(200))
        finally:
            shutdown_services(services)

    asyncio.run(body())


def test_a_topic_deleted_while_waiting_is_not_hosted(tmp_path: Path) -> None:
    async def body() -> None:
        services = build_services(_config(tmp_path))
        rm = services.replica_manager
        try:
            await services.controller.create_topic("gone", 100, 1)
            assert rm.pending_hosting > 0
            await services.controller.delete_topic("gone")
            assert rm.pending_hosting == 0
            for _ in range(20):
                await asyncio.sleep(0)
            assert not [p for p in rm.partitions() if p.topic == "gone"]
            assert services.log_manager.get_log("gone", 99) is None
        finally:
            shutdown_services(services)

    asyncio.run(body())


def test_a_restart_hosts_existing_logs_at_once(tmp_path: Path) -> None:
    async def create() -> None:
        services = build_services(_config(tmp_path))
        try:
            await services.controller.create_topic("kept", 60, 1)
            while services.replica_manager.pending_hosting:
                await asyncio.sleep(0)
        finally:
            shutdown_services(services)

    async def restart() -> None:
        services = build_services(_config(tmp_path))  # replays __cluster_metadata on the running loop
        try:
            assert services.replica_manager.pending_hosting == 0
            assert all(services.replica_manager.get_partition("kept", p) is not None for p in range(60))
        finally:
            shutdown_services(services)

    asyncio.run(create())
    asyncio.run(restart())
