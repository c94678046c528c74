"""Fixtures for interop tests: real kbroker processes (see tests/support/broker.py).

- `kbroker`: a started broker with default settings (function scope), stopped cleanly afterwards;
  its stderr is printed when the test fails.
- `producers` / `members`: lists a consumer-group test appends its background producers and
  VerifiableConsumer members to, stopped at teardown (tests/support/groups_verifiable.py).
- `kbroker_factory(**overrides)`: start brokers with config overrides; keyword names use `_` for `.`
  (`kbroker_factory(num_partitions=3)`) or pass a dict: `kbroker_factory({"num.partitions": "3"})`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.broker import KBroker, stop_cleanly
from tests.support.groups_verifiable import BackgroundProducer, VerifiableMember


def _override_key(key: str) -> str:
    return key.replace("_", ".")


@pytest.fixture
def kbroker_factory(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Callable[..., KBroker]]:
    brokers: list[KBroker] = []

    def make(props: dict[str, Any] | None = None, /, *, start: bool = True, **overrides: Any) -> KBroker:
        merged = {k: str(v) for k, v in (props or {}).items()}
        merged.update(
            {
                _override_key(k): str(v).lower() if isinstance(v, bool) else str(v)
                for k, v in overrides.items()
            }
        )
        broker = KBroker(tmp_path / f"kbroker{len(brokers)}", merged)
        brokers.append(broker)
        if start:
            broker.start()
        return broker

    yield make
    failed = getattr(request.node, "rep_call", None)
    for broker in brokers:
        try:
            stop_cleanly(broker)
        finally:
            if failed is not None and failed.failed:
                print(f"--- kbroker log ({broker.workdir}) ---\n{broker.log_text()}")


@pytest.fixture
def kbroker(kbroker_factory: Callable[..., KBroker]) -> KBroker:
    return kbroker_factory()


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    # Lets the fixtures see whether the test body failed, to print the broker's log.
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.when == "call":
        item.rep_call = report  # type: ignore[attr-defined]


@pytest.fixture
def producers() -> Iterator[list[BackgroundProducer]]:
    """Background producers a group test started; halted at teardown even when the test failed."""
    started: list[BackgroundProducer] = []
    yield started
    for p in started:
        p.halt()


@pytest.fixture
def members() -> Iterator[list[VerifiableMember]]:
    """VerifiableConsumer members a group test started; killed at teardown if still alive."""
    started: list[VerifiableMember] = []
    yield started
    for m in started:
        if m.alive():
            m.proc.kill()
            m.proc.wait(30)
