"""DelayedOperationPurgatory: completion by key, by timeout, shutdown, cancellation."""

from __future__ import annotations

import asyncio

from kbroker.replica.purgatory import DelayedOperation, DelayedOperationPurgatory


class Waiter(DelayedOperation[str]):
    def __init__(self, delay_ms: int, ready: list[bool]) -> None:
        super().__init__(delay_ms)
        self.ready = ready
        self.expired_hook = False

    def try_complete(self) -> bool:
        return self.force_complete() if self.ready[0] else False

    def on_expiration(self) -> None:
        self.expired_hook = True

    def on_complete(self) -> str:
        return "expired" if self.expired else "done"


def run(coro):  # noqa: ANN001, ANN201
    return asyncio.run(coro)


def test_completes_immediately_when_condition_holds() -> None:
    async def main() -> None:
        p = DelayedOperationPurgatory("t")
        op = Waiter(1000, [True])
        assert p.try_complete_else_watch(op, ["k"])
        assert await op.future == "done"
        assert len(p) == 0

    run(main())


def test_wakes_on_check_and_complete_for_its_key_only() -> None:
    async def main() -> None:
        p = DelayedOperationPurgatory("t")
        ready = [False]
        op = Waiter(10_000, ready)
        assert not p.try_complete_else_watch(op, ["a", "b"])
        assert len(p) == 1 and p.watched("a") == 1 and p.watched("b") == 1
        assert p.check_and_complete("a") == 0  # condition not met yet
        ready[0] = True
        assert p.check_and_complete("other") == 0
        assert not op.future.done()
        assert p.check_and_complete("b") == 1
        assert await op.future == "done"
        # Completed operations are unwatched under every key.
        assert len(p) == 0 and p.watched("a") == 0 and p.watched("b") == 0

    run(main())


def test_times_out_and_runs_expiration() -> None:
    async def main() -> None:
        p = DelayedOperationPurgatory("t")
        op = Waiter(30, [False])
        loop = asyncio.get_running_loop()
        start = loop.time()
        assert not p.try_complete_else_watch(op, ["k"])
        assert await op.future == "expired"
        elapsed = loop.time() - start
        assert 0.025 <= elapsed < 1.0
        assert op.expired_hook and op.expired
        assert len(p) == 0 and p.watched("k") == 0

    run(main())


def test_zero_delay_expires_at_once() -> None:
    async def main() -> None:
        p = DelayedOperationPurgatory("t")
        op = Waiter(0, [False])
        assert p.try_complete_else_watch(op, ["k"])
        assert await op.future == "expired"

    run(main())


def test_shutdown_completes_waiting_operations() -> None:
    async def main() -> None:
        p = DelayedOperationPurgatory("t")
        ops = [Waiter(60_000, [False]) for _ in range(3)]
        for op in ops:
            p.try_complete_else_watch(op, ["k"])
        assert len(p) == 3
        p.shutdown()
        assert [await op.future for op in ops] == ["done"] * 3
        assert len(p) == 0

    run(main())


def test_cancelled_future_is_unwatched_without_computing_a_response() -> None:
    async def main() -> None:
        p = DelayedOperationPurgatory("t")
        ready = [False]
        op = Waiter(60_000, ready)
        p.try_complete_else_watch(op, ["k"])
        op.future.cancel()
        await asyncio.sleep(0)  # done callbacks run on the next loop iteration
        assert len(p) == 0 and p.watched("k") == 0
        ready[0] = True
        assert p.check_and_complete("k") == 0

    run(main())


def test_on_complete_exception_reaches_the_awaiting_side() -> None:
    class Failing(Waiter):
        def on_complete(self) -> str:
            raise RuntimeError("boom")

    async def main() -> None:
        p = DelayedOperationPurgatory("t")
        op = Failing(10, [False])
        p.try_complete_else_watch(op, ["k"])
        try:
            await op.future
        except RuntimeError as exc:
            assert str(exc) == "boom"
        else:
            raise AssertionError("expected the error")

    run(main())
