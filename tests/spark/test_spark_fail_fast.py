"""`kbroker spark` fails fast, in one line, where users make mistakes (issue 18): no broker at the
bootstrap address, no Java, no client library for the generators; `--print-command` runs when pasted.

These run the real CLI in a subprocess (no Spark JVM is started: that is the point)."""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kbroker.spark.preflight import PreflightError, check_bootstrap, probe
from tests.support.broker import KBroker

REPO = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _kbroker(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> tuple[int, str, str, float]:
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "kbroker", *args], capture_output=True, text=True,
                          cwd=REPO, env=env, timeout=timeout)
    return proc.returncode, proc.stdout, proc.stderr, time.monotonic() - start


def test_submit_without_broker_is_one_line_in_seconds() -> None:
    port = _free_port()
    code, out, err, took = _kbroker("spark", "submit", "--bootstrap", f"127.0.0.1:{port}", "pipeline",
                                    "--topic", "t")
    assert code == 1
    assert err.strip() == (
        f"kbroker spark: error: no Kafka broker answers at 127.0.0.1:{port} (connection refused): start one "
        "with `kbroker serve` or pass --bootstrap host:port (--skip-broker-check to submit anyway)")
    assert took < 15, took  # the interpreter start plus one refused connect, no JVM


def test_the_jobs_own_bootstrap_is_the_one_checked() -> None:
    port = _free_port()
    code, _, err, _ = _kbroker("spark", "submit", "pipeline", "--bootstrap", f"127.0.0.1:{port}")
    assert code == 1 and f"127.0.0.1:{port} (connection refused)" in err


def test_a_silent_listener_times_out_quickly() -> None:
    with socket.socket() as listener:  # accepts (the kernel's backlog) but never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        address = f"127.0.0.1:{listener.getsockname()[1]}"
        start = time.monotonic()
        assert probe(address, timeout_s=0.5) == "no answer within 0.5 s"
        assert time.monotonic() - start < 3


def test_a_non_kafka_service_is_named_as_such() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        address = f"127.0.0.1:{listener.getsockname()[1]}"
        import threading

        def answer() -> None:
            conn, _ = listener.accept()
            with conn:
                conn.recv(100)
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")

        t = threading.Thread(target=answer)
        t.start()
        assert probe(address) == "answered, but not as a Kafka broker"
        t.join()


def test_a_live_broker_passes(tmp_path: Path) -> None:
    broker = KBroker(tmp_path)
    broker.start()
    try:
        dead = f"127.0.0.1:{_free_port()}"
        check_bootstrap(f"{dead},{broker.bootstrap}")  # one live address is enough, as for a client
        with pytest.raises(PreflightError):
            check_bootstrap(dead)
    finally:
        broker.stop()


def test_no_java_is_said(tmp_path: Path) -> None:
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent)  # python, but no java
    env.pop("JAVA_HOME", None)
    code, _, err, took = _kbroker("spark", "submit", "pipeline", "--topic", "t", env=env)
    assert code == 1
    assert err.strip() == ("kbroker spark: error: Java not found: Spark needs a Java 17 or 21 runtime; "
                           "install one and put `java` on PATH or set JAVA_HOME")
    assert took < 15


def test_generate_without_confluent_kafka_is_a_hint(tmp_path: Path) -> None:
    shadow = tmp_path / "shadow"
    (shadow / "confluent_kafka").mkdir(parents=True)
    (shadow / "confluent_kafka" / "__init__.py").write_text("raise ImportError('simulated: not installed')\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(shadow), str(REPO)])
    code, _, err, _ = _kbroker("spark", "generate", "clickstream", "--topic", "x", env=env)
    assert code == 1
    assert err.strip() == ("kbroker spark: error: the generators need confluent-kafka: pip install "
                           "'kbroker[spark]' (or pip install confluent-kafka==2.16.1)")
    assert "Traceback" not in err


def test_generate_without_broker_is_one_line() -> None:
    port = _free_port()
    code, _, err, took = _kbroker("spark", "generate", "--bootstrap", f"127.0.0.1:{port}", "clickstream",
                                  "--topic", "x")
    assert code == 1 and err.startswith("kbroker spark: error: no Kafka broker answers at") and took < 15


def test_print_command_is_shell_quoted_and_runs_when_pasted(tmp_path: Path) -> None:
    code, out, err, _ = _kbroker("spark", "submit", "--print-command", "--conf", "spark.app.name=a name 'q'",
                                 "pipeline", "--topic", "t")
    assert code == 0, err
    argv = shlex.split(out.strip())
    assert argv[0].endswith("spark-submit")
    assert "spark.app.name=a name 'q'" in argv  # survived the shell round trip as one argument
