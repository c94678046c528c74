"""KIP-853 membership changes on real kbroker controllers, driven by Kafka 4.3.1's `kafka-metadata-quorum`.

Controller 1 is formatted `--standalone` (a quorum of itself), controllers 2 and 3 with
`--no-initial-controllers`: they start as observers that find the leader through
`controller.quorum.bootstrap.servers`. `kafka-metadata-quorum --bootstrap-controller ... add-controller
--command-config <the controller's properties>` adds each (AddRaftVoter, API 80, answered once the
VotersRecord commits); `describe --status` then lists three voters. The leader is killed (-9) and the
two others elect a leader and keep serving a kbroker broker; `remove-controller` (RemoveRaftVoter,
API 81) removes the dead one, and topics are still created through the broker.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.support.broker import KBroker
from tests.support.java import java_unavailable_reason, run_java_main
from tests.support.kafka_cluster import new_cluster_id
from tests.support.mixed_quorum import COMMON, KBROKER_LEADER, kbroker_format, metadata_quorum

pytestmark = [pytest.mark.interop, pytest.mark.java]


@pytest.fixture
def skip_without_java() -> None:
    reason = java_unavailable_reason()
    if reason:
        pytest.skip(f"Kafka tools unavailable: {reason}")


def _quorum_tool(bootstrap: str, *args: str) -> str:
    return metadata_quorum("--bootstrap-controller", bootstrap, *args)


def _status(bootstrap: str) -> dict[str, str]:
    out = _quorum_tool(bootstrap, "describe", "--status")
    return {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in out.splitlines()) if v}


def _voter_ids(status: dict[str, str]) -> list[int]:
    return sorted(int(v["id"]) for v in json.loads(status["CurrentVoters"]))


def _leader(nodes: dict[int, KBroker], after_epoch: int = 0, timeout: float = 60.0) -> tuple[int, int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen: set[tuple[int, int]] = set()
        for _i, n in nodes.items():
            if n.proc is None or n.proc.poll() is not None:
                continue
            text = "".join(p.read_text(errors="replace") for p in sorted(n.workdir.glob("kbroker-*.log")))
            seen.update((int(m.group(2)), int(m.group(1))) for m in KBROKER_LEADER.finditer(text))
        alive = [x for x in sorted(seen) if x[0] > after_epoch and nodes[x[1]].proc is not None
                 and nodes[x[1]].proc.poll() is None]  # type: ignore[union-attr]
        if alive:
            return alive[-1]
        time.sleep(0.1)
    raise AssertionError(f"no leader after epoch {after_epoch}")


def _retry(what: str, fn: object, timeout: float = 90.0) -> str:
    """AddRaftVoter answers REQUEST_TIMED_OUT until the observer has caught up (as Kafka's): retry."""
    assert callable(fn)
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        try:
            return str(fn())
        except AssertionError as e:
            last = str(e)
            time.sleep(1)
    raise AssertionError(f"{what} never succeeded: {last}")


def _create_topic(broker: KBroker, name: str) -> None:
    proc = run_java_main("kafka-topics", ["--bootstrap-server", broker.bootstrap, "--create", "--topic", name,
                                          "--partitions", "2", "--replication-factor", "1"], timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _list_topics(broker: KBroker) -> list[str]:
    proc = run_java_main("kafka-topics", ["--bootstrap-server", broker.bootstrap, "--list"], timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout.split()


def test_add_and_remove_controllers(tmp_path: Path, skip_without_java: None) -> None:
    cluster_id = new_cluster_id()
    controllers = {i: KBroker(tmp_path / f"controller-{i}") for i in (1, 2, 3)}
    bootstrap = ",".join(n.bootstrap for n in controllers.values())
    broker = KBroker(tmp_path / "broker-11")
    try:
        for i, n in controllers.items():
            n.overrides = {**COMMON, "process.roles": "controller", "node.id": str(i),
                           "listeners": f"CONTROLLER://127.0.0.1:{n.port}", "log.dirs": str(n.log_dir),
                           "controller.quorum.bootstrap.servers": bootstrap, "broker.session.timeout.ms": "4000"}
            kbroker_format(n, cluster_id, n.overrides, "--standalone" if i == 1 else "--no-initial-controllers")
        controllers[1].start(timeout=60)
        epoch, leader = _leader(controllers)
        assert leader == 1
        for i in (2, 3):
            controllers[i].start(timeout=60)
        broker.overrides = {**COMMON, "process.roles": "broker", "node.id": "11",
                            "listeners": f"PLAINTEXT://127.0.0.1:{broker.port}", "log.dirs": str(broker.log_dir),
                            "controller.quorum.bootstrap.servers": bootstrap, "broker.heartbeat.interval.ms": "500",
                            "offsets.topic.replication.factor": "1"}
        kbroker_format(broker, cluster_id, broker.overrides)
        broker.start(timeout=90)
        assert _voter_ids(_status(controllers[1].bootstrap)) == [1]

        for i in (2, 3):
            props = controllers[i].workdir / "add-controller.properties"
            props.write_text("".join(f"{k}={v}\n" for k, v in controllers[i].overrides.items()))
            out = _retry(f"add-controller {i}", lambda props=props: _quorum_tool(  # type: ignore[misc]
                bootstrap, "--command-config", str(props), "add-controller"))
            assert f"Added controller {i}" in out, out
        status = _status(bootstrap)
        assert _voter_ids(status) == [1, 2, 3], status
        _create_topic(broker, "before-failover")

        controllers[1].kill()
        epoch, leader = _leader(controllers, after_epoch=epoch)
        assert leader in (2, 3)
        survivors = ",".join(controllers[i].bootstrap for i in (2, 3))
        status = _retry("describe after failover", lambda: _status(survivors))  # type: ignore[arg-type]
        assert status  # the two survivors answer
        _retry("create a topic after failover", lambda: _create_topic(broker, "after-failover"))

        voters = {int(v["id"]): v for v in json.loads(_status(survivors)["CurrentVoters"])}
        directory = voters[1]["directoryId"]
        out = _quorum_tool(survivors, "remove-controller", "--controller-id", "1",
                           "--controller-directory-id", directory)
        assert " ".join(out.split()).startswith("Removed KRaft controller 1"), out  # Kafka prints two spaces
        assert _voter_ids(_status(survivors)) == [2, 3]
        _create_topic(broker, "after-removal")
        topics = _list_topics(broker)
        assert {"before-failover", "after-failover", "after-removal"} <= set(topics), topics
    finally:
        broker.kill()
        for n in controllers.values():
            n.kill()


@pytest.mark.slow  # one JVM controller; the kbroker-only test above runs by default
def test_add_a_kafka_controller_to_a_kbroker_quorum(tmp_path: Path, skip_without_java: None) -> None:
    """Mixed step: an Apache Kafka 4.3.1 controller formatted with --no-initial-controllers follows a
    kbroker leader as an observer and is added with `add-controller`; the quorum then has two voters
    of two kinds, and a topic is created through a kbroker broker."""
    from types import SimpleNamespace

    from tests.support.kafka_cluster import KafkaNode

    cluster_id = new_cluster_id()
    kb = KBroker(tmp_path / "controller-1")
    cluster = SimpleNamespace(workdir=tmp_path, cluster_id=cluster_id, voters="")
    kafka = KafkaNode(cluster, 2, "controller")  # type: ignore[arg-type]
    bootstrap = f"{kb.bootstrap},{kafka.bootstrap}"
    kafka.overrides = {"controller.quorum.bootstrap.servers": bootstrap}
    broker = KBroker(tmp_path / "broker-11")
    try:
        kb.overrides = {**COMMON, "process.roles": "controller", "node.id": "1",
                        "listeners": f"CONTROLLER://127.0.0.1:{kb.port}", "log.dirs": str(kb.log_dir),
                        "controller.quorum.bootstrap.servers": bootstrap, "broker.session.timeout.ms": "4000"}
        kbroker_format(kb, cluster_id, kb.overrides, "--standalone")
        kb.start(timeout=60)
        kafka.config_file.write_text("".join(f"{k}={v}\n" for k, v in kafka.properties().items()
                                             if k != "controller.quorum.voters"))
        proc = run_java_main("kafka-storage", ["format", "-t", cluster_id, "-c", str(kafka.config_file),
                                               "--no-initial-controllers"], timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        kafka.start(150)
        out = _retry("add-controller (Kafka)", lambda: _quorum_tool(
            kb.bootstrap, "--command-config", str(kafka.config_file), "add-controller"), timeout=150)
        assert "Added controller 2" in out, out
        assert _voter_ids(_status(kb.bootstrap)) == [1, 2]
        broker.overrides = {**COMMON, "process.roles": "broker", "node.id": "11",
                            "listeners": f"PLAINTEXT://127.0.0.1:{broker.port}", "log.dirs": str(broker.log_dir),
                            "controller.quorum.bootstrap.servers": bootstrap, "broker.heartbeat.interval.ms": "500",
                            "offsets.topic.replication.factor": "1"}
        kbroker_format(broker, cluster_id, broker.overrides)
        broker.start(timeout=90)
        _create_topic(broker, "mixed-added")
        assert "mixed-added" in _list_topics(broker)
    finally:
        broker.kill()
        kafka.kill()
        kb.kill()
