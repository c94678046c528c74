"""The pytest plugin's fixtures, run in an inner pytest session (pytester) with the plugin loaded by name."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]
REPO_ROOT = Path(__file__).resolve().parents[2]


def _plugin_args() -> list[str]:
    """Load the plugin by name unless an installed kbroker already registers it (entry point `pytest11`):
    pytest refuses the same module registered twice."""
    from importlib.metadata import entry_points

    if any(ep.value == "kbroker.testing.pytest_plugin" for ep in entry_points(group="pytest11")):
        return []
    return ["-p", "kbroker.testing.pytest_plugin"]


@pytest.fixture(autouse=True)
def _this_checkout(monkeypatch: pytest.MonkeyPatch) -> None:
    """The inner session imports this checkout's kbroker."""
    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))


def test_fixtures(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest
        from confluent_kafka.admin import AdminClient

        def partitions(bootstrap):
            md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
            return {n: len(t.partitions) for n, t in md.topics.items()}

        seen = []

        def test_session_broker_and_topic(kafka_broker, kafka_bootstrap_servers, kafka_topic):
            assert kafka_bootstrap_servers == kafka_broker.bootstrap_servers
            assert partitions(kafka_bootstrap_servers)[kafka_topic] == 1
            seen.append((kafka_broker.bootstrap_servers, kafka_topic))

        @pytest.mark.kafka_topic(partitions=3)
        def test_topic_marker_and_same_session_broker(kafka_broker, kafka_topic, kafka_topic_factory):
            assert seen[0][0] == kafka_broker.bootstrap_servers and seen[0][1] != kafka_topic
            extra = kafka_topic_factory(partitions=2)
            got = partitions(kafka_broker.bootstrap_servers)
            assert got[kafka_topic] == 3 and got[extra] == 2

        @pytest.mark.kafka_broker(topics=["audit"], num_partitions=5)
        def test_fresh_broker(fresh_kafka_broker, kafka_broker):
            assert fresh_kafka_broker.bootstrap_servers != kafka_broker.bootstrap_servers
            assert partitions(fresh_kafka_broker.bootstrap_servers)["audit"] == 5

        def test_factory(kafka_broker_factory):
            a, b = kafka_broker_factory(), kafka_broker_factory(["x"])
            assert a.bootstrap_servers != b.bootstrap_servers and "x" in partitions(b.bootstrap_servers)
        """
    )
    result = pytester.runpytest_subprocess(*_plugin_args(), "-q")
    result.assert_outcomes(passed=4)


def test_failing_test_shows_its_broker_log(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        def test_fails(fresh_kafka_broker):
            assert False
        """
    )
    result = pytester.runpytest_subprocess(*_plugin_args(), "-q")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*--- kbroker log*", "*kbroker started*"])


def test_plugin_is_registered_in_pyproject() -> None:
    import tomllib

    meta = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    assert meta["project"]["entry-points"]["pytest11"] == {"kbroker": "kbroker.testing.pytest_plugin"}
