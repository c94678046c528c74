"""`is_awaitable_result`: the dispatcher's and the connection's test of a handler's result, with its
cache of plain response classes, answers as `inspect.isawaitable` does, whatever came first."""

from __future__ import annotations

import asyncio
import inspect
import types

from kbroker.api import context
from kbroker.api.context import NO_RESPONSE, is_awaitable_result
from kbroker.protocol.messages.produce import ProduceResponse


async def _coroutine() -> int:
    return 1


@types.coroutine
def _generator_coroutine():  # type: ignore[no-untyped-def]
    yield


def _plain_generator():  # type: ignore[no-untyped-def]
    yield 1


class _Awaitable:
    def __await__(self):  # type: ignore[no-untyped-def]
        yield


def test_answers_as_inspect_isawaitable_before_and_after_the_cache() -> None:
    loop = asyncio.new_event_loop()
    try:
        coro = _coroutine()
        generator_coroutine = _generator_coroutine()
        plain_generator = _plain_generator()
        results = [ProduceResponse(responses=[], throttle_time_ms=0), [b"parts"], NO_RESPONSE, None,
                   loop.create_future(), coro, _Awaitable(), plain_generator, generator_coroutine]
        for _ in range(2):  # the second round answers from the cache where it may
            assert [is_awaitable_result(r) for r in results] == [inspect.isawaitable(r) for r in results]
        assert [is_awaitable_result(r) for r in results] == [False, False, False, False, True, True, True,
                                                             False, True]
        # A plain generator seen first does not make a generator-based coroutine plain.
        assert types.GeneratorType not in context._PLAIN_RESULT_TYPES
        assert ProduceResponse in context._PLAIN_RESULT_TYPES
        coro.close()
        plain_generator.close()
        generator_coroutine.close()
    finally:
        loop.close()


def test_the_cache_is_bounded(monkeypatch) -> None:
    monkeypatch.setattr(context, "_PLAIN_RESULT_TYPES", set())
    monkeypatch.setattr(context, "_MAX_PLAIN_RESULT_TYPES", 3)
    kinds = [type(f"Plain{i}", (), {}) for i in range(10)]
    for kind in kinds:
        assert not is_awaitable_result(kind())
    assert len(context._PLAIN_RESULT_TYPES) == 3
    assert not is_awaitable_result(kinds[-1]())  # not remembered, still answered
