"""The first run, as a newcomer meets it (issue 16): every friction point has a check here.

CLI error texts (a port in use, an unwritable data dir, the wrong interpreter), Kafka's log-level
spellings, JSON log lines, the nearest-key hint for a typo, the sample config file, `make run ARGS=`,
the recovery line after a crash, DEBUG lines for connection closes, a TLS client on the plaintext
port, and SaslHandshake answered as Kafka 4.3.1 answers it on a PLAINTEXT listener.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kbroker.config import KafkaConfig, suggest_keys
from tests.support.broker import KBroker, free_port
from tests.support.raw_client import RawKafkaClient, request_class

REPO_ROOT = Path(__file__).resolve().parents[2]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _serve(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kbroker", "serve", *args], capture_output=True, text=True,
                          cwd=cwd, env=_env(), timeout=60)


class Served:
    """`kbroker serve ARGS` running in the background until stopped; its stderr in a file."""

    def __init__(self, tmp_path: Path, *args: str) -> None:
        self.log = tmp_path / "serve.log"
        self.port = free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        with open(self.log, "w") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "kbroker", "serve", "--override", f"listeners=PLAINTEXT://{self.bootstrap}",
                 "--override", f"log.dirs={tmp_path / 'data'}", *args],
                stdout=err, stderr=err, cwd=tmp_path, env=_env())
        deadline = time.monotonic() + 30
        while not self._accepts():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.proc.kill()
                pytest.fail(f"kbroker did not start:\n{self.text()}")
            time.sleep(0.05)

    def _accepts(self) -> bool:
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
        except OSError:
            return False
        return True

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, pattern: str, timeout: float = 10) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = re.search(pattern, self.text())
            if m:
                return m.group(0)
            time.sleep(0.05)
        pytest.fail(f"{pattern!r} not in the broker log:\n{self.text()}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def test_port_in_use_is_one_line_with_what_to_do_and_leaves_no_data_dir(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = _serve("--override", f"listeners=PLAINTEXT://127.0.0.1:{port}", cwd=tmp_path)
    assert r.returncode == 1
    assert "Traceback" not in r.stderr
    (line,) = [x for x in r.stderr.splitlines() if x.startswith("kbroker: error:")]
    assert f"port {port} is already in use" in line
    assert f"--override listeners=PLAINTEXT://127.0.0.1:{port + 1}" in line and "make run ARGS=" in line
    assert not (tmp_path / "data").exists()  # nothing formatted before the bind failed


@pytest.mark.parametrize("case", ["lock-is-a-directory", "under-a-file"])
def test_unusable_data_dir_is_one_line(tmp_path: Path, case: str) -> None:
    if case == "lock-is-a-directory":  # os.open of .lock fails even for root (who ignores permissions)
        data = tmp_path / "data"
        (data / ".lock").mkdir(parents=True)
        expected = f"Cannot write to log directory {data}"
    else:
        (tmp_path / "file").write_text("x")
        data = tmp_path / "file" / "data"
        expected = "Cannot create log directory"
    r = _serve("--override", "listeners=PLAINTEXT://127.0.0.1:0", "--override", f"log.dirs={data}", cwd=tmp_path)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    (line,) = [x for x in r.stderr.splitlines() if x.startswith("kbroker: error:")]
    assert expected in line and "--override log.dirs=" in line


def test_wrong_interpreter_gets_a_hint_not_a_traceback(tmp_path: Path) -> None:
    # A bare interpreter (no kbroker dependencies) run from the repository root, like `python3 -m kbroker`.
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "bare")], check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    r = subprocess.run([str(tmp_path / "bare" / "bin" / "python"), "-m", "kbroker", "serve"], cwd=REPO_ROOT,
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 1
    assert "Traceback" not in r.stderr
    assert "is missing from" in r.stderr and ".venv/bin/python -m kbroker" in r.stderr


def test_log_level_accepts_kafka_spellings(tmp_path: Path) -> None:
    broker = Served(tmp_path, "--log-level", "WARN", "--override", "num.partition=2")
    broker.stop()
    assert broker.proc.returncode == 0
    text = broker.text()
    assert "WARN Unknown configuration 'num.partition'" in text  # log4j's level name in the log line
    assert " INFO " not in text and "kbroker started" not in text  # INFO is below WARN


def test_bad_log_level_is_refused(tmp_path: Path) -> None:
    r = _serve("--log-level", "LOUD", cwd=tmp_path)
    assert r.returncode == 2 and "unknown log level 'LOUD'" in r.stderr and "WARN" in r.stderr


def test_json_log_lines(tmp_path: Path) -> None:
    broker = Served(tmp_path, "--log-format", "json", "--override", "log.retention.hour=1")
    broker.stop()
    lines = [json.loads(x) for x in broker.text().splitlines() if x.strip()]
    assert lines and all({"@timestamp", "log.level", "message", "log.logger"} <= set(x) for x in lines)
    assert any(x["message"].startswith("kbroker started") and x["log.level"] == "INFO" for x in lines)
    assert any(x["log.level"] == "WARN" and "did you mean 'log.retention.hours'" in x["message"] for x in lines)


def test_unknown_key_warning_suggests_the_nearest_key(caplog: pytest.LogCaptureFixture) -> None:
    assert suggest_keys(["log.retention.hour", "num.partition", "listener", "my.own.key"]) == {
        "log.retention.hour": "log.retention.hours", "num.partition": "num.partitions", "listener": "listeners"}
    with caplog.at_level(logging.WARNING, logger="kbroker.config"):
        KafkaConfig.load(None, {"auto.create.topic.enable": "false"})
    assert "Unknown configuration 'auto.create.topic.enable': did you mean 'auto.create.topics.enable'?" in caplog.text


def test_sample_config_file_has_only_known_keys(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="kbroker.config"):
        config = KafkaConfig.load(REPO_ROOT / "config" / "server.properties")
    assert config.unknown_keys == [] and "not used" not in caplog.text
    assert [str(e) for e in config.listeners] == ["PLAINTEXT://127.0.0.1:9092"]


def test_make_run_passes_args_through() -> None:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    r = subprocess.run(["make", "-n", "run", 'ARGS=--override listeners=PLAINTEXT://127.0.0.1:9093'],
                       cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert ".venv/bin/kbroker serve --override listeners=PLAINTEXT://127.0.0.1:9093" in r.stdout.splitlines()
    # Long steps say what they are doing.
    makefile = (REPO_ROOT / "Makefile").read_text()
    assert "==> Installing kbroker" in makefile and "==> Resolving Apache Kafka" in makefile


def test_restart_after_a_crash_logs_the_recovery(tmp_path: Path) -> None:
    from confluent_kafka import Producer

    broker = KBroker(tmp_path, {"log.segment.bytes": str(1024 * 1024)})
    broker.start()
    try:
        p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
        for i in range(1300):  # 1.3 MB: two segments
            p.produce("recovered", b"x" * 1000, key=str(i).encode())
        assert p.flush(30) == 0
        broker.kill()
        broker.start()
        m = re.search(r"Recovered (\d+) logs \((\d+) segments scanned\) in .* after an unclean shutdown .* in (\d+) ms",
                      broker.log_text())
        assert m, broker.log_text()
        assert int(m.group(1)) >= 1 and int(m.group(2)) >= 2
    finally:
        broker.stop()
    broker.start()  # after a clean shutdown: no recovery line
    try:
        assert "Recovered" not in broker.log_text()
    finally:
        broker.stop()


def test_connection_closes_tls_clients_and_sasl_on_plaintext(tmp_path: Path) -> None:
    broker = Served(tmp_path, "--log-level", "DEBUG")
    try:
        # A client that closes: DEBUG line with the reason.
        socket.create_connection(("127.0.0.1", broker.port)).close()
        broker.wait_for(r"Connection \S+ closed by the client")
        # A TLS client on the plaintext port: recognised, logged, closed.
        ctx = ssl.create_default_context()
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as raw:
            with pytest.raises((ssl.SSLError, OSError)):
                ctx.wrap_socket(raw, server_hostname="localhost")
        broker.wait_for(r"WARN Closing connection \S+ on listener PLAINTEXT: it sent a TLS ClientHello")
        broker.wait_for(r"closed by the broker: it sent a TLS ClientHello")
        # An HTTP client on the Kafka port (a browser, curl): recognised too.
        with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as raw:
            raw.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
            try:
                assert raw.recv(100) == b""  # closed, no bytes back
            except ConnectionResetError:
                pass  # aborted: reset, as for any foreign protocol
        broker.wait_for(r"WARN Closing connection \S+ on listener PLAINTEXT: it sent an HTTP request")
        # SaslHandshake / SaslAuthenticate: Kafka 4.3.1's answers on a PLAINTEXT listener.
        with RawKafkaClient(broker.bootstrap) as c:
            for v in (0, 1):
                r = c.request(17, v, request_class(17)(mechanism="PLAIN"))
                assert (r.error_code, list(r.mechanisms)) == (34, [])  # ILLEGAL_SASL_STATE
            r = c.request(36, 2, request_class(36)(auth_bytes=b"\0u\0p"))
            assert r.error_code == 34
            assert r.error_message == "SaslAuthenticate request received after successful authentication"
        # A SASL-configured client gets a clear error at once (librdkafka's words, as against Kafka),
        # not a silent close it would retry without saying why.
        from confluent_kafka.admin import AdminClient

        class Collect(logging.Handler):
            def __init__(self) -> None:
                super().__init__()
                self.lines: list[str] = []

            def emit(self, record: logging.LogRecord) -> None:
                self.lines.append(record.getMessage())

        collect = Collect()
        rdkafka_log = logging.getLogger("test-first-run-rdkafka")
        rdkafka_log.addHandler(collect)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                             "sasl.mechanism": "PLAIN", "sasl.username": "u", "sasl.password": "p",
                             "logger": rdkafka_log})
        from confluent_kafka import KafkaException

        with pytest.raises(KafkaException):
            admin.list_topics(timeout=3)
        admin.poll(1)  # librdkafka hands its log lines to the logger from poll()
        assert any("SASL PLAIN mechanism handshake failed: Broker: Request not valid in current SASL state" in x
                   for x in collect.lines), collect.lines
    finally:
        broker.stop()


def test_bind_lost_after_the_check_removes_the_new_data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The port is free when checked but taken when bound (a race): the data dir this start created
    and formatted is removed again, so nothing of a failed first start stays behind."""
    import asyncio

    import kbroker.broker as broker_mod

    monkeypatch.setattr(broker_mod, "check_listeners_free", lambda config: None)  # lose the race on purpose
    data = tmp_path / "data"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = KafkaConfig.load(None, {"listeners": f"PLAINTEXT://127.0.0.1:{port}", "log.dirs": str(data)})

        async def start() -> str:
            b = broker_mod.Broker(config)
            try:
                await b.start()
            except broker_mod.StartupError as e:
                await b.shutdown()
                return str(e)
            await b.shutdown()
            return ""

        message = asyncio.run(start())
    assert f"port {port} is already in use" in message
    assert not data.exists()
