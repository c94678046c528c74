"""Incremental hosting of new partitions (issue 19, finding 4), in process on a real event loop.

A creation of many partitions is committed at once but hosted in chunks across loop turns: the
partitions not hosted yet answer NOT_LEADER_OR_FOLLOWER; a topic deleted (or re-created) while its
partitions wait is not hosted from stale state; a restart hosts its existing logs across loop turns too.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from kbroker.config import KafkaConfig
from kbroker.log.unified_log import UnifiedLog
from kbroker.metadata.delta import PartitionInfo
from kbroker.metadata.image import TopicPartition
from kbroker.protocol.errors import ErrorCode
from kbroker.replica.partition import Partition
from kbroker.replica.replica_manager import HOSTING_CHUNK_SECONDS, SYNC_HOSTING_PARTITIONS, ReplicaManager
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


RESTART_PARTITIONS = 300
HOSTING_COST_S = 0.005  # made slow on purpose: 300 partitions x 5 ms = 1.5 s of hosting


def test_a_restart_hosts_existing_logs_across_loop_turns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 12/17: a restart replays every existing partition; hosted in one pass, 10,000 of them
    blocked the loop past broker.session.timeout.ms (no heartbeats: fenced, unfenced, in a loop).
    With a per-partition cost, the loop is never blocked much longer than one hosting chunk, and
    every partition ends up hosted as leader at the image's leader epoch."""
    async def create() -> None:
        services = build_services(_config(tmp_path))
        try:
            await services.controller.create_topic("kept", RESTART_PARTITIONS, 1)
            while services.replica_manager.pending_hosting:
                await asyncio.sleep(0)
        finally:
            shutdown_services(services)

    async def restart() -> None:
        real = ReplicaManager._new_partition

        def slow(self: ReplicaManager, tp: TopicPartition, info: PartitionInfo, plog: UnifiedLog) -> Partition:
            time.sleep(HOSTING_COST_S)
            return real(self, tp, info, plog)

        monkeypatch.setattr(ReplicaManager, "_new_partition", slow)
        t0 = time.monotonic()
        services = build_services(_config(tmp_path))  # replays __cluster_metadata on the running loop
        # Start-up (loading the logs, replaying the metadata) hosts none of them in one pass.
        startup = time.monotonic() - t0
        assert startup < RESTART_PARTITIONS * HOSTING_COST_S, f"start-up took {startup:.3f}s"
        longest = 0.0
        rm = services.replica_manager
        try:
            assert rm.pending_hosting > RESTART_PARTITIONS // 2
            assert rm.missing_partition_error("kept", RESTART_PARTITIONS - 1) == ErrorCode.NOT_LEADER_OR_FOLLOWER
            turns = 0
            while rm.pending_hosting:
                t = time.monotonic()
                await asyncio.sleep(0)
                longest = max(longest, time.monotonic() - t)
                turns += 1
            assert turns > 10
            bound = HOSTING_CHUNK_SECONDS + 0.2  # one chunk, one partition past it, a busy machine
            assert longest < bound, f"the loop was blocked {longest:.3f}s"
            image = services.metadata.image
            for p in range(RESTART_PARTITIONS):
                part = rm.get_partition("kept", p)
                assert part is not None and part.is_leader
                reg = image.partition("kept", p)
                assert reg is not None and part.leader_epoch == reg.leader_epoch
        finally:
            shutdown_services(services)

    asyncio.run(create())
    asyncio.run(restart())
