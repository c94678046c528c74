"""Fixtures for the Spark suite (marker `spark`): one kbroker shared by every test, spark-submit runs.

Every test here spark-submits a job with master local[2] through `kbroker spark submit` (the user's
path). A JVM start costs tens of seconds on a shared 2-core machine, so the suite shares one broker
(session scope), uses distinct topic names per test, and keeps data small. Tests skip, saying why,
when pyspark 4.2.0, Java or the Kafka connector (Maven, or an already-resolved .cache/spark/jars)
is missing.

`KBROKER_SPARK_TEST_BOOTSTRAP=host:port` runs the suite against an already-running broker instead
(e.g. the reference Kafka from `benchmarks/reference/kafka.sh start`), to compare behaviour.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from collections.abc import Iterator

import pytest

from tests.support.broker import KBroker


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "spark: spark-submits PySpark jobs against a real kbroker (slow)")


def spark_unavailable_reason() -> str | None:
    if importlib.util.find_spec("pyspark") is None:
        return "pyspark is not installed (pip install -e '.[spark]', pyspark==4.2.0)"
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return "Java (17+) is not on PATH: spark-submit needs a JVM"
    from kbroker.spark import submit

    jars = submit.cache_dir() / "jars.stamp"
    if not jars.is_file() and shutil.which("mvn") is None:
        return "the Kafka connector is not resolved and Maven (mvn) is not on PATH"
    return None


@pytest.fixture(scope="session")
def spark_ready() -> None:
    reason = spark_unavailable_reason()
    if reason:
        pytest.skip(reason)
    from kbroker.spark import submit

    submit.connector_jars()  # resolve once, outside any job's timing


@pytest.fixture(scope="session")
def spark_bootstrap(spark_ready: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    external = os.environ.get("KBROKER_SPARK_TEST_BOOTSTRAP")
    if external:
        yield external
        return
    broker = KBroker(tmp_path_factory.mktemp("spark-kbroker"), {"num.partitions": "3"})
    broker.start()
    try:
        yield broker.bootstrap
    finally:
        code = broker.stop() if broker.is_running() else 0
        broker.kill()
        assert code == 0, f"kbroker exited with {code}:\n{broker.log_text()[-5000:]}"
