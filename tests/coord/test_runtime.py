"""The runtime on a real event loop: keyed loop timers, the periodic offset expiry, and shutdown
answering waiting JoinGroup requests with NOT_COORDINATOR."""

from __future__ import annotations

import asyncio
from pathlib import Path

from kbroker.coord.offset_metadata_manager import CommitRequestPartition as CP
from kbroker.coord.runtime import LoopScheduler
from kbroker.protocol.errors import ErrorCode
from tests.coord.stack import Stack
from tests.coord.support import Box, subscription
from tests.support.sync import run_now


def test_loop_scheduler_replaces_and_cancels() -> None:
    async def run() -> list[str]:
        fired: list[str] = []
        s = LoopScheduler(asyncio.get_running_loop())
        s.schedule("a", 10, lambda: fired.append("a1"))
        s.schedule("a", 20, lambda: fired.append("a2"))  # replaces a1
        s.schedule("b", 5, lambda: fired.append("b"))
        s.schedule("c", 5, lambda: fired.append("c"))
        s.cancel("c")
        def boom() -> None:
            raise ZeroDivisionError

        s.schedule("boom", 1, boom)  # a failing timer is logged, the others still run
        await asyncio.sleep(0.06)
        assert len(s) == 0
        return fired

    assert asyncio.run(run()) == ["b", "a2"]


def test_shutdown_answers_waiting_joins(tmp_path: Path) -> None:
    async def run() -> None:
        stack = Stack(tmp_path, **{"group.initial.rebalance.delay.ms": "60000"})
        stack.start()
        assert run_now(stack.runtime.create_offsets_topic()) == ErrorCode.NONE
        first, second = Box(), Box()
        coord = stack.coordinator
        coord.join_group("g", "", None, "consumer", [("range", subscription("t"))], 10000, 30000, "c", "/h",
                         True, first)
        coord.join_group("g", first.result.member_id, None, "consumer", [("range", subscription("t"))], 10000,
                         30000, "c", "/h", True, second)
        assert not second.done  # waiting for the initial rebalance delay
        stack.shutdown()
        assert second.result.error == ErrorCode.NOT_COORDINATOR
        assert coord.heartbeat("g", 0, first.result.member_id, None) == ErrorCode.NOT_COORDINATOR
        assert stack.runtime.scheduler is not None and len(stack.runtime.scheduler) == 0

    asyncio.run(run())


def test_periodic_offset_expiry(tmp_path: Path) -> None:
    async def run() -> None:
        stack = Stack(tmp_path, **{"offsets.retention.check.interval.ms": "20", "offsets.retention.minutes": "1"})
        clock = [1_000_000]
        stack.runtime.time_ms = lambda: clock[0]
        stack.start()
        assert run_now(stack.runtime.create_offsets_topic()) == ErrorCode.NONE
        coord = stack.coordinator
        assert coord.commit_offsets("s", -1, "", None, -1, [CP("t", 0, 1)]) == [ErrorCode.NONE]
        await asyncio.sleep(0.05)
        assert coord.fetch_offsets("s", [("t", 0)])[1][0].offset == 1
        clock[0] += 60_000
        await asyncio.sleep(0.05)
        assert coord.fetch_offsets("s", [("t", 0)])[1][0].offset == -1 and "s" not in coord.shard_for("s").groups
        stack.shutdown()

    asyncio.run(run())


def test_replica_writer_reports_the_commit_when_the_purgatory_completes() -> None:
    """acks=-1 with the high watermark behind the write: the replica manager returns a future (the
    delayed produce); the writer reports the commit, or the failure, when it completes."""
    from types import SimpleNamespace

    from kbroker.coord.runtime import ReplicaPartitionWriter
    from kbroker.replica.replica_manager import ProducePartitionResult

    async def run() -> None:
        loop = asyncio.get_running_loop()
        futures: list[asyncio.Future[dict]] = []

        class SlowReplicas:
            def append_records(self, timeout_ms: int, acks: int, internal: bool, entries: dict) -> object:
                assert acks == -1 and internal
                f: asyncio.Future[dict] = loop.create_future()
                futures.append(f)
                return f

            def get_partition(self, topic: str, partition: int) -> object:
                return SimpleNamespace(log_end_offset=3)

        committed: list[tuple[int, int]] = []
        failed: list[tuple[int, int, ErrorCode]] = []
        writer = ReplicaPartitionWriter(SlowReplicas(), "__consumer_offsets", lambda: 0, 5000,
                                        lambda p, o: committed.append((p, o)), lambda p, o, e: failed.append((p, o, e)))
        assert writer.append(1, [(b"k", b"v")]).next_offset == 3
        assert committed == []
        futures[0].set_result({("__consumer_offsets", 1): ProducePartitionResult(ErrorCode.NONE)})
        await asyncio.sleep(0)
        assert committed == [(1, 3)]
        writer.append(1, [(b"k", b"v")])
        futures[1].set_result({("__consumer_offsets", 1): ProducePartitionResult(ErrorCode.REQUEST_TIMED_OUT)})
        await asyncio.sleep(0)
        assert failed == [(1, 3, ErrorCode.REQUEST_TIMED_OUT)]

    asyncio.run(run())


def test_answers_are_values_when_committed_and_futures_otherwise() -> None:
    """The service's answers: `then` / `gather` build the response at once from values, and from
    futures when they complete (in request order)."""
    from kbroker.coord.service import gather, then

    assert then(3, lambda v: v + 1) == 4
    assert gather([1, 2]) == [1, 2]

    async def run() -> None:
        loop = asyncio.get_running_loop()
        first: asyncio.Future[int] = loop.create_future()
        combined = then(gather([first, 2]), lambda values: sum(values))
        assert isinstance(combined, asyncio.Future) and not combined.done()
        first.set_result(40)
        assert await combined == 42

    asyncio.run(run())
