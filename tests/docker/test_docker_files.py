"""docker/ without a container engine: the entrypoint and its KBROKER_ -> server.properties mapping run on
the host (with a stand-in `kbroker` that records what it was given, then with the real one), the
healthcheck against a stub HTTP server, the compose files parse and reference only files that exist,
and the Dockerfile and entrypoint pass hadolint and shellcheck (pinned binaries from PyPI wheels)."""

from __future__ import annotations

import http.server
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCKER = REPO_ROOT / "docker"
ENTRYPOINT = DOCKER / "entrypoint.sh"
BIN = Path(sys.executable).parent

# What the entrypoint writes a key as, from the apache/kafka image's documented rule (its
# utility.go ConvertKey): `_` -> `.`, `__` -> `_`, `___` -> `-`, lower-cased, prefix dropped.
MAPPING = {
    "KBROKER_LOG_DIRS": "log.dirs",
    "KBROKER_LOG_RETENTION_MS": "log.retention.ms",
    "KBROKER_NUM_PARTITIONS": "num.partitions",
    "KBROKER_LISTENER_NAME_PLAINTEXT_SOME__KEY": "listener.name.plaintext.some_key",
    "KBROKER_CONFLUENT_SUPPORT___CUSTOMER_ID": "confluent.support-customer.id",
    "KBROKER_KBROKER_METRICS_LISTENER": "kbroker.metrics.listener",
}


def _fake_kbroker(tmp_path: Path) -> Path:
    """A `kbroker` that records its arguments and the config file it was given, then exits."""
    bin_dir = tmp_path / "fakebin"
    bin_dir.mkdir()
    script = bin_dir / "kbroker"
    script.write_text('#!/usr/bin/env bash\nprintf "%s\\n" "$@" > "$RECORD.args"\ncp "$2" "$RECORD.props"\n')
    script.chmod(0o755)
    return bin_dir


def _run_entrypoint(tmp_path: Path, env: dict[str, str], *, mounted: str | None = None) -> tuple[list[str], str]:
    bin_dir = _fake_kbroker(tmp_path)
    mounted_dir = tmp_path / "mnt"
    mounted_dir.mkdir(exist_ok=True)
    if mounted is not None:
        (mounted_dir / "server.properties").write_text(mounted)
    base = {k: v for k, v in os.environ.items() if not k.startswith("KBROKER_")}
    full = {**base, "PATH": f"{bin_dir}{os.pathsep}{base['PATH']}", "RECORD": str(tmp_path / "rec"),
            "KBROKER_CONFIG_DIR": str(tmp_path / "conf"), "KBROKER_MOUNTED_CONFIG_DIR": str(mounted_dir),
            "KBROKER_DEFAULT_CONFIG": str(DOCKER / "server.properties"), **env}
    r = subprocess.run(["bash", str(ENTRYPOINT)], env=full, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    args = (tmp_path / "rec.args").read_text().splitlines()
    return args, (tmp_path / "rec.props").read_text()


def _props(text: str) -> dict[str, str]:
    """Properties-file semantics: the last line for a key wins."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and not key.strip().startswith("#"):
            out[key.strip()] = value
    return out


def test_environment_maps_to_keys_like_the_apache_kafka_image(tmp_path: Path) -> None:
    env = {name: f"value-{i}" for i, name in enumerate(MAPPING)}
    env.update({"KBROKER_OPTS": "--log-format json --log-level WARN", "KBROKER_EVENT_LOOP": "asyncio"})
    args, text = _run_entrypoint(tmp_path, env)
    props = _props(text)
    for i, (name, key) in enumerate(MAPPING.items()):
        assert props[key] == f"value-{i}", (name, key, text)
    # Settings of the entrypoint and kbroker itself are not broker keys.
    assert not any(k in props for k in ("opts", "event.loop", "config.dir", "mounted.config.dir", "default.config"))
    assert args == ["serve", str(tmp_path / "conf" / "server.properties"), "--log-format", "json", "--log-level", "WARN"]
    # The image's defaults stay underneath.
    assert props["node.id"] == "1" and props["listeners"] == "PLAINTEXT://0.0.0.0:9092"


def test_listeners_derived_from_advertised_listeners(tmp_path: Path) -> None:
    _, text = _run_entrypoint(tmp_path, {"KBROKER_ADVERTISED_LISTENERS": "PLAINTEXT://broker.example:19092"})
    props = _props(text)
    assert props["advertised.listeners"] == "PLAINTEXT://broker.example:19092"
    assert props["listeners"] == "PLAINTEXT://0.0.0.0:19092"


def test_mounted_file_first_then_environment(tmp_path: Path) -> None:
    _, text = _run_entrypoint(tmp_path, {"KBROKER_NUM_PARTITIONS": "7"},
                              mounted="num.partitions=2\nlog.retention.hours=1\n")
    props = _props(text)
    assert props["num.partitions"] == "7" and props["log.retention.hours"] == "1"
    assert "node.id" not in props  # a mounted file replaces the image's defaults, as in apache/kafka


def test_no_environment_uses_the_image_defaults(tmp_path: Path) -> None:
    _, text = _run_entrypoint(tmp_path, {})
    assert text == (DOCKER / "server.properties").read_text()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_entrypoint_runs_the_real_broker_as_pid_of_the_script(tmp_path: Path) -> None:
    """The real kbroker behind the entrypoint: starts from the rendered file, SIGTERM is a clean stop."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "kbroker").write_text(f'#!/usr/bin/env bash\nexec "{sys.executable}" -m kbroker "$@"\n')
    (bin_dir / "kbroker").chmod(0o755)
    port, http_port = _free_port(), _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("KBROKER_")}
    env.update({"PATH": f"{bin_dir}{os.pathsep}{env['PATH']}", "PYTHONPATH": str(REPO_ROOT),
                "KBROKER_CONFIG_DIR": str(tmp_path / "conf"), "KBROKER_MOUNTED_CONFIG_DIR": str(tmp_path / "none"),
                "KBROKER_DEFAULT_CONFIG": str(DOCKER / "server.properties"),
                "KBROKER_LISTENERS": f"PLAINTEXT://127.0.0.1:{port}",
                "KBROKER_ADVERTISED_LISTENERS": f"PLAINTEXT://127.0.0.1:{port}",
                "KBROKER_LOG_DIRS": str(tmp_path / "data"),
                "KBROKER_KBROKER_METRICS_LISTENER": f"http://127.0.0.1:{http_port}"})
    log = tmp_path / "stderr"
    with open(log, "w") as err:
        proc = subprocess.Popen(["bash", str(ENTRYPOINT)], env=env, stdout=err, stderr=err)
    try:
        deadline = time.monotonic() + 30
        while "kbroker started" not in log.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        assert f"listening on PLAINTEXT://127.0.0.1:{port}" in log.read_text()
        assert (tmp_path / "data" / "meta.properties").exists()
        proc.send_signal(signal.SIGTERM)  # exec'd: the signal reaches kbroker itself
        assert proc.wait(30) == 0, log.read_text()
        assert "shut down cleanly" in log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


class _Health(http.server.BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.send_response(self.status if self.path == "/health/ready" else 404)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.parametrize(("status", "code"), [(200, 0), (503, 1)])
def test_healthcheck_asks_health_ready(tmp_path: Path, status: int, code: int) -> None:
    handler = type("H", (_Health,), {"status": status})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        conf = tmp_path / "conf"
        conf.mkdir()
        (conf / "server.properties").write_text(
            f"kbroker.metrics.listener=http://0.0.0.0:1\n# later lines win\n"
            f"kbroker.metrics.listener=http://0.0.0.0:{server.server_address[1]}\n")
        r = subprocess.run([sys.executable, str(DOCKER / "healthcheck.py")], capture_output=True, text=True,
                           env={**os.environ, "KBROKER_CONFIG_DIR": str(conf)}, timeout=30)
        assert r.returncode == code, r.stderr
    finally:
        server.shutdown()
        server.server_close()


def _dockerfile_copies(dockerfile: Path) -> list[str]:
    sources: list[str] = []
    for line in dockerfile.read_text().splitlines():
        m = re.match(r"\s*COPY\s+(?!--from)(.+)", line)
        if m:
            sources += m.group(1).split()[:-1]
    return sources


def test_compose_files_parse_and_reference_existing_files() -> None:
    stages = set(re.findall(r"^FROM \S+ AS (\S+)", (DOCKER / "Dockerfile").read_text(), re.M))
    assert stages == {"base", "spark"}
    for source in _dockerfile_copies(DOCKER / "Dockerfile"):  # the build context is the repository root
        assert (REPO_ROOT / source).exists(), source
    for name in ("compose.yaml", "compose.cluster.yaml"):
        doc = yaml.safe_load((DOCKER / name).read_text())
        services = doc["services"]
        built = {s["image"] for s in services.values() if "build" in s}
        for svc_name, svc in services.items():
            if "build" in svc:
                context = (DOCKER / svc["build"]["context"]).resolve()
                assert context == REPO_ROOT and (context / svc["build"]["dockerfile"]).is_file()
                assert svc["build"]["target"] in stages
            else:
                assert svc["image"] in built, f"{name}: {svc_name} uses an image no service builds"
            for dep in svc.get("depends_on", {}):
                assert dep in services, f"{name}: {svc_name} depends on unknown {dep}"
            for volume in svc.get("volumes", []):
                source = volume.split(":")[0]
                assert source in doc.get("volumes", {}) or (DOCKER / source).exists(), (name, volume)
            for key in svc.get("environment", {}):
                assert key.startswith("KBROKER_"), key
    single = yaml.safe_load((DOCKER / "compose.yaml").read_text())["services"]
    assert single["generate"]["depends_on"]["kbroker"]["condition"] == "service_healthy"
    assert "clickstream" in single["clickstream"]["command"]
    assert "WAITING ON REPLICATION" in (DOCKER / "compose.cluster.yaml").read_text()


def test_cluster_nodes_render_distinct_configs(tmp_path: Path) -> None:
    """Each node of the three-node file renders its own node.id and advertised listener."""
    services = yaml.safe_load((DOCKER / "compose.cluster.yaml").read_text())["services"]
    seen = set()
    for i, svc in enumerate(services.values()):
        node_dir = tmp_path / str(i)
        node_dir.mkdir()
        _, text = _run_entrypoint(node_dir, {k: str(v) for k, v in svc["environment"].items()})
        props = _props(text)
        seen.add((props["node.id"], props["advertised.listeners"]))
        assert props["controller.quorum.voters"].count("@") == 3
    assert len(seen) == 3


@pytest.mark.parametrize(("tool", "target"), [("hadolint", "Dockerfile"), ("shellcheck", "entrypoint.sh")])
def test_lint(tool: str, target: str) -> None:
    exe = BIN / tool
    if not exe.exists():
        pytest.skip(f"{tool} is not installed next to {sys.executable} (pip install -e '.[test]')")
    r = subprocess.run([str(exe), str(DOCKER / target)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
