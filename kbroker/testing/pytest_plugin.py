"""The kbroker pytest plugin: Kafka fixtures for any project that installs kbroker (entry point `pytest11`).

Fixtures (every broker is a real kbroker process on a free loopback port, see kbroker.testing):

- `kafka_broker` (session): one broker shared by the whole test session; a `KafkaBroker`.
- `kafka_bootstrap_servers` (session): its `"host:port"`, for client configs.
- `kafka_topic` (function): the name of a new topic on the session broker, unique to the test
  (1 partition unless the test is marked `@pytest.mark.kafka_topic(partitions=3, configs={...})`).
- `kafka_topic_factory` (function): `kafka_topic_factory(partitions=3, configs=None, name=None)` makes
  more such topics and returns each name.
- `fresh_kafka_broker` (function): a broker of the test's own, started for it and stopped after; config
  from `@pytest.mark.kafka_broker(topics=[...], num_partitions=3, ...)` (the `KafkaBroker` arguments).
- `kafka_broker_factory` (function): `kafka_broker_factory(topics=..., **overrides)` starts as many
  brokers as the test wants; all are stopped after it.

Options: `--kbroker-log-level LEVEL` (the brokers' log level, INFO by default). A broker's log is in
`broker.log_file` and printed when a test that used it fails.

The module imports no broker code (that runs in the broker processes), so having kbroker installed
costs a test session nothing until a fixture is used.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator

import pytest

from kbroker.testing.embedded import KafkaBroker, TopicSpec


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("kbroker", "kbroker embedded Kafka broker")
    group.addoption("--kbroker-log-level", default="INFO", help="log level of kbroker test brokers (INFO)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "kafka_topic(partitions=1, configs=None): the `kafka_topic` fixture's partitions and configs"
    )
    config.addinivalue_line(
        "markers", "kafka_broker(**kwargs): KafkaBroker arguments for the `fresh_kafka_broker` fixture"
    )


def _topic_name(node: pytest.Item) -> str:
    base = re.sub(r"[^a-zA-Z0-9._-]+", "-", node.name).strip("-")[:180] or "topic"
    return f"{base}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def kafka_broker(request: pytest.FixtureRequest) -> Iterator[KafkaBroker]:
    broker = KafkaBroker(log_level=request.config.getoption("--kbroker-log-level"))
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def kafka_bootstrap_servers(kafka_broker: KafkaBroker) -> str:
    return kafka_broker.bootstrap_servers


@pytest.fixture
def kafka_topic_factory(kafka_broker: KafkaBroker, request: pytest.FixtureRequest) -> Callable[..., str]:
    def make(partitions: int = 1, configs: dict[str, str] | None = None, name: str | None = None) -> str:
        topic = name or _topic_name(request.node)
        kafka_broker.create_topics(TopicSpec(topic, partitions, configs or {}))
        return topic

    return make


@pytest.fixture
def kafka_topic(kafka_topic_factory: Callable[..., str], request: pytest.FixtureRequest) -> str:
    marker = request.node.get_closest_marker("kafka_topic")
    kwargs = dict(marker.kwargs) if marker else {}
    return kafka_topic_factory(**kwargs)


@pytest.fixture
def kafka_broker_factory(request: pytest.FixtureRequest) -> Iterator[Callable[..., KafkaBroker]]:
    brokers: list[KafkaBroker] = []
    level = request.config.getoption("--kbroker-log-level")

    def make(*args: object, **kwargs: object) -> KafkaBroker:
        kwargs.setdefault("log_level", level)
        broker = KafkaBroker(*args, **kwargs)  # type: ignore[arg-type]
        brokers.append(broker)
        return broker.start()

    yield make
    report = getattr(request.node, "_kbroker_call_report", None)
    for broker in brokers:
        if report is not None and report.failed:
            print(f"--- kbroker log ({broker.log_file}) ---\n{broker.log_text()}")
        broker.stop()


@pytest.fixture
def fresh_kafka_broker(
    kafka_broker_factory: Callable[..., KafkaBroker], request: pytest.FixtureRequest
) -> KafkaBroker:
    marker = request.node.get_closest_marker("kafka_broker")
    kwargs = dict(marker.kwargs) if marker else {}
    return kafka_broker_factory(**kwargs)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    report = yield
    if call.when == "call":
        item._kbroker_call_report = report  # type: ignore[attr-defined]
    return report
