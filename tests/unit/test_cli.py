"""The `kbroker` command line, run as a real process (`python -m kbroker`)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import kbroker

REPO_ROOT = Path(__file__).resolve().parents[2]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kbroker", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=_env(),
        timeout=60,
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_version() -> None:
    r = _run("--version")
    assert r.returncode == 0
    assert r.stdout.strip() == f"kbroker {kbroker.__version__}"


def test_console_script_version() -> None:
    script = Path(sys.executable).parent / "kbroker"
    if not script.exists():
        pytest.skip(
            f"the kbroker console script is not installed next to {sys.executable} (pip install -e .)"
        )
    r = subprocess.run([str(script), "--version"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == f"kbroker {kbroker.__version__}"


def test_help_lists_subcommands() -> None:
    r = _run("--help")
    assert r.returncode == 0
    assert "serve" in r.stdout and "--version" in r.stdout
    r = _run("serve", "--help")
    assert r.returncode == 0 and "--override" in r.stdout and "CONFIG_FILE" in r.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--override", "num.partitions=zero"], "Invalid value zero for configuration num.partitions"),
        (["--override", "listeners=SSL://127.0.0.1:9093"], "listener needs a keystore"),
        (["--override", "novalue"], "--override expects KEY=VALUE"),
        (["/nonexistent/server.properties"], "Cannot read config file"),
    ],
)
def test_bad_config_exits_1_with_a_clear_message(args: list[str], message: str, tmp_path: Path) -> None:
    r = _run("serve", *args, cwd=tmp_path)
    assert r.returncode == 1
    assert message in r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "data").exists()


def _wait_started(proc: subprocess.Popen[str], log: Path, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if "kbroker started" in log.read_text():
            return
        if proc.poll() is not None:
            pytest.fail(f"kbroker exited with {proc.returncode}:\n{log.read_text()}")
        time.sleep(0.05)
    proc.kill()
    pytest.fail(f"kbroker did not start:\n{log.read_text()}")


def test_no_config_serves_on_9092_with_data_in_cwd(tmp_path: Path) -> None:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", 9092))
        except OSError:
            pytest.skip("port 9092 is busy on this machine; the no-config default listener needs it")
    log = tmp_path / "stderr.log"
    with open(log, "w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "kbroker", "serve"],
            cwd=tmp_path,
            stdout=err,
            stderr=err,
            text=True,
            env=_env(),
        )
    try:
        _wait_started(proc, log)
        text = log.read_text()
        assert "listening on PLAINTEXT://127.0.0.1:9092" in text
        assert f"data in {tmp_path / 'data'}" in text and "Ctrl-C" in text
        assert "cluster.id=" in (tmp_path / "data" / "meta.properties").read_text()
        with socket.create_connection(("127.0.0.1", 9092), timeout=5):
            pass
        # Kafka's log4j layout: "[yyyy-MM-dd HH:mm:ss,SSS] LEVEL message (logger)"
        first = text.splitlines()[0]
        assert first.startswith("[20") and "] INFO " in first and first.endswith("(kbroker.broker)")
        proc.send_signal(signal.SIGINT)  # Ctrl-C
        assert proc.wait(30) == 0
        assert "shut down cleanly" in log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_second_broker_on_the_same_data_is_refused(tmp_path: Path) -> None:
    port, port2 = _free_port(), _free_port()
    log = tmp_path / "stderr.log"
    args = [sys.executable, "-m", "kbroker", "serve", "--override", f"log.dirs={tmp_path / 'data'}"]
    with open(log, "w") as err:
        proc = subprocess.Popen(
            [*args, "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}"],
            stdout=err,
            stderr=err,
            text=True,
            env=_env(),
        )
    try:
        _wait_started(proc, log)
        second = subprocess.run(
            [*args, "--override", f"listeners=PLAINTEXT://127.0.0.1:{port2}"],
            capture_output=True,
            text=True,
            env=_env(),
            timeout=60,
        )
        assert second.returncode == 1
        assert "Failed to acquire lock on file .lock" in second.stderr
        assert "Traceback" not in second.stderr
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_port_in_use_exits_1(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        r = _run(
            "serve",
            "--override",
            f"listeners=PLAINTEXT://127.0.0.1:{port}",
            "--override",
            f"log.dirs={tmp_path / 'data'}",
        )
    assert r.returncode == 1
    assert "Cannot listen on" in r.stderr and "Traceback" not in r.stderr


def test_port_zero_listens_and_advertises_the_bound_port(tmp_path: Path) -> None:
    pytest.importorskip("confluent_kafka", reason="confluent-kafka is a test dependency")
    log = tmp_path / "stderr.log"
    with open(log, "w") as err:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "kbroker",
                "serve",
                "--override",
                "listeners=PLAINTEXT://127.0.0.1:0",
                "--override",
                f"log.dirs={tmp_path / 'data'}",
            ],
            stdout=err,
            stderr=err,
            text=True,
            env=_env(),
        )
    try:
        _wait_started(proc, log)
        m = re.search(r"listening on PLAINTEXT://127\.0\.0\.1:(\d+)", log.read_text())
        assert m and int(m.group(1)) > 0
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{m.group(1)}"})
        md = admin.list_topics(timeout=20)
        assert [(b.host, b.port) for b in md.brokers.values()] == [("127.0.0.1", int(m.group(1)))]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_kafkas_sample_config_file_runs(tmp_path: Path) -> None:
    from tests.support.broker import KAFKA_SAMPLE_SERVER_PROPERTIES

    config = tmp_path / "server.properties"
    config.write_text(KAFKA_SAMPLE_SERVER_PROPERTIES)
    port, controller_port = _free_port(), _free_port()
    log = tmp_path / "stderr.log"
    cmd = [sys.executable, "-m", "kbroker", "serve", str(config),
           "--override", f"listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
           "--override", f"advertised.listeners=PLAINTEXT://127.0.0.1:{port}",
           # The sample's bootstrap server is its own CONTROLLER listener (localhost:9093): moved with it, as
           # a combined node naming other controllers is not formatted on first start (docs/cluster.md).
           "--override", f"controller.quorum.bootstrap.servers=127.0.0.1:{controller_port}",
           "--override", f"log.dirs={tmp_path / 'data'}"]  # fmt: skip
    with open(log, "w") as err:
        proc = subprocess.Popen(cmd, stdout=err, stderr=err, text=True, env=_env())
    try:
        _wait_started(proc, log)
        text = log.read_text()
        assert f"listening on PLAINTEXT://127.0.0.1:{port}," in text
        # Every key of Kafka's sample file is known (the share coordinator's since KIP-932 share groups).
        assert "were supplied but are not used" not in text
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
        # A combined node (docs/cluster.md): a one-voter quorum of this node on its CONTROLLER listener,
        # formatted on first start; the broker registered with its own controller.
        with socket.create_connection(("127.0.0.1", controller_port), timeout=5):
            pass
        assert f"the voter set is 1@127.0.0.1:{controller_port}" in text
        assert "The controller unfenced broker 1" in text
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_data_of_another_node_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "meta.properties").write_text("version=1\ncluster.id=AAAAAAAAAAAAAAAAAAAAAA\nnode.id=7\n")
    r = _run(
        "serve",
        "--override",
        f"log.dirs={data}",
        "--override",
        f"listeners=PLAINTEXT://127.0.0.1:{_free_port()}",
    )
    assert r.returncode == 1
    assert "Stored node id 7 doesn't match previous node id 1" in r.stderr
    assert "Traceback" not in r.stderr
