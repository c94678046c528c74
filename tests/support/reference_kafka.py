"""The reference Apache Kafka 4.3.1 broker for differential tests (marker ``reference``).

Owns: starting and stopping ``benchmarks/reference/kafka.sh`` (a single-node KRaft Kafka whose
server.properties mirrors kbroker's defaults) in a test's temporary directory. Tests skip, saying
why, when Java or the jars are missing. Use::

    @pytest.fixture
    def reference_kafka(tmp_path):
        reason = reference_unavailable_reason()
        if reason:
            pytest.skip(reason)
        bootstrap, stop = start_reference_kafka(tmp_path)
        yield bootstrap
        stop()
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path

from tests.support.java import REPO_ROOT, java_unavailable_reason

KAFKA_SH = REPO_ROOT / "benchmarks" / "reference" / "kafka.sh"


def reference_unavailable_reason() -> str | None:
    """None when the reference Kafka can start here, else why not (for pytest.skip)."""
    reason = java_unavailable_reason()
    if reason is not None:
        return f"reference Kafka unavailable: {reason}"
    return None


def _run(args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(KAFKA_SH), *args], capture_output=True, text=True, timeout=timeout)


def start_reference_kafka(
    tmp_path: Path,
    *,
    port: int | None = None,
    advertised_port: int | None = None,
    overrides: Mapping[str, str] | None = None,
    timeout: float = 180.0,
) -> tuple[str, Callable[[], None]]:
    """Start Kafka with its data and logs under tmp_path/reference-kafka.

    Returns ("127.0.0.1:PORT", stop). `stop` is idempotent. Raises RuntimeError with the script's
    output (which includes the broker's last log lines) if the broker does not come up.
    """
    directory = tmp_path / "reference-kafka"
    args = ["start", "--dir", str(directory), "--timeout", str(int(timeout))]
    if port is not None:
        args += ["--port", str(port)]
    if advertised_port is not None:
        args += ["--advertised-port", str(advertised_port)]
    for key, value in (overrides or {}).items():
        args += ["--override", f"{key}={value}"]
    proc = _run(args, timeout + 60)
    bootstrap = next(
        (line.split("=", 1)[1] for line in proc.stdout.splitlines() if line.startswith("bootstrap=")), None
    )
    if proc.returncode != 0 or bootstrap is None:
        _run(["stop", "--dir", str(directory)], 90)
        raise RuntimeError(f"reference Kafka did not start (exit {proc.returncode}):\n{proc.stderr}{proc.stdout}")

    stopped = False

    def stop() -> None:
        nonlocal stopped
        if not stopped:
            stopped = True
            _run(["stop", "--dir", str(directory)], 90)

    return bootstrap, stop
