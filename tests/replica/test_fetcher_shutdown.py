"""Replica fetchers after shutdown: nothing reaches a follower log once the fetchers are closed.

A broker stopped right after it started once appended a late Fetch response to a follower log that its
shutdown had already closed: the write failed (EBADF), the log directory went offline and the broker
exited FATAL instead of cleanly. The broker now awaits its fetchers before the logs close; these tests
pin the fetchers' half: a closed fetcher never appends, never starts again, and a closed manager adds
no fetcher.
"""

from __future__ import annotations

import asyncio
import uuid

from kbroker.protocol.messages.fetch import FetchResponse
from kbroker.replica.replica_fetcher import (
    FetchState,
    InitialFetchState,
    PartitionFetchState,
    ReplicaFetcher,
    ReplicaFetcherConfig,
    ReplicaFetcherManager,
)


class ClosedLogHost:
    """A fetcher host whose follower logs are closed: any use of them fails the test."""

    node_id = 2

    def __init__(self) -> None:
        self.lookups = 0

    def follower_partition(self, topic: str, partition: int) -> object:
        self.lookups += 1
        raise AssertionError(f"a closed fetcher touched follower {topic}-{partition}")


def _fetcher(host: ClosedLogHost) -> ReplicaFetcher:
    return ReplicaFetcher(1, host, lambda _broker: ("127.0.0.1", 1), ReplicaFetcherConfig())  # type: ignore[arg-type]


def test_a_response_arriving_after_close_is_not_appended() -> None:
    async def run() -> None:
        host = ClosedLogHost()
        fetcher = _fetcher(host)
        state = PartitionFetchState(uuid.uuid4(), 0, 0, FetchState.FETCHING)
        fetcher.close_now()
        data = FetchResponse.PartitionData(partition_index=0, high_watermark=3, records=b"")
        fetcher._process_partition_data(("t", 0), state, data)
        assert host.lookups == 0

    asyncio.run(run())


def test_a_closed_fetcher_does_not_start_again() -> None:
    async def run() -> None:
        fetcher = _fetcher(ClosedLogHost())
        await fetcher.shutdown()
        fetcher.add_partitions({("t", 0): PartitionFetchState(uuid.uuid4(), 0, 0, FetchState.FETCHING)})
        assert fetcher._task is None

    asyncio.run(run())


def test_a_closed_manager_adds_no_fetcher() -> None:
    async def run() -> None:
        manager = ReplicaFetcherManager(ClosedLogHost(), lambda _broker: ("127.0.0.1", 1),  # type: ignore[arg-type]
                                        ReplicaFetcherConfig())
        await manager.shutdown()
        manager.add_fetcher_for_partitions({("t", 0): InitialFetchState(uuid.uuid4(), 1, 0, 0)})
        assert manager.fetchers == {}
        manager.close_now()  # and closing twice is harmless
        manager.add_fetcher_for_partitions({("t", 1): InitialFetchState(uuid.uuid4(), 1, 0, 0)})
        assert manager.fetchers == {}

    asyncio.run(run())
