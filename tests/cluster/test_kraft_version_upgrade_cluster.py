"""kraft.version 0 -> 1 on real kbroker controllers, driven by Kafka 4.3.1's own tools (KIP-853).

Three kbroker controllers start as a static quorum (`controller.quorum.voters`, kraft.version 0). Kafka's
`kafka-features --bootstrap-controller ... describe` lists kraft.version as supported 0-1 and finalized 0;
`kafka-features upgrade --feature kraft.version=1` makes the Raft leader append KRaftVersionRecord +
VotersRecord (the static voters with the directory ids their UpdateRaftVoter told it); describe then says
finalized 1 and `kafka-metadata-quorum describe --status` lists the voters with their directory ids.
A downgrade back to 0 is refused with Kafka's message. The formerly static quorum then takes
`kafka-metadata-quorum add-controller`: a fourth kbroker controller, formatted with
`--no-initial-controllers`, joins as an observer and becomes a voter.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from tests.support.broker import KBroker
from tests.support.java import java_unavailable_reason, run_java_main
from tests.support.mixed_quorum import COMMON, MixedQuorum, kbroker_format, metadata_quorum

pytestmark = [pytest.mark.interop, pytest.mark.java]

ZERO_DIRECTORY = "AAAAAAAAAAAAAAAAAAAAAA"


@pytest.fixture
def skip_without_java() -> None:
    reason = java_unavailable_reason()
    if reason:
        pytest.skip(f"Kafka tools unavailable: {reason}")


def _features(bootstrap: str, *args: str) -> tuple[int, str]:
    proc = run_java_main("kafka-features", ["--bootstrap-controller", bootstrap, *args], timeout=120)
    return proc.returncode, proc.stdout + proc.stderr


def _described(bootstrap: str) -> dict[str, dict[str, str]]:
    """`kafka-features describe`: {feature: {SupportedMinVersion: .., FinalizedVersionLevel: .., ...}}."""
    code, out = _features(bootstrap, "describe")
    assert code == 0, out
    features: dict[str, dict[str, str]] = {}
    for line in out.splitlines():
        fields = dict(re.findall(r"(\w+): (\S+)", line))
        if "Feature" in fields:
            features[fields["Feature"]] = fields
    return features


def _voters(bootstrap: str) -> dict[int, dict[str, object]]:
    out = metadata_quorum("--bootstrap-controller", bootstrap, "describe", "--status")
    status = {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in out.splitlines()) if v}
    return {int(v["id"]): v for v in json.loads(status["CurrentVoters"])}


def _until(what: str, fn: object, timeout: float = 60.0) -> object:
    assert callable(fn)
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            return fn()
        except AssertionError as e:
            last = e
            time.sleep(1)
    raise AssertionError(f"{what}: {last}")


def test_upgrade_a_static_quorum_to_kraft_version_1_then_add_a_controller(
        tmp_path: Path, skip_without_java: None) -> None:
    q = MixedQuorum(tmp_path, "kkk")
    joiner = KBroker(tmp_path / "controller-4")
    try:
        q.start_controllers()
        q.wait_leader()
        bootstrap = q.bootstrap_controllers()
        before = _described(bootstrap)
        assert "kraft.version" in before, before
        assert before["kraft.version"]["SupportedMinVersion"] == "0"
        assert before["kraft.version"]["SupportedMaxVersion"] == "1"
        assert before["kraft.version"]["FinalizedVersionLevel"] == "0"
        joiner.overrides = {**COMMON, "process.roles": "controller", "node.id": "4",
                            "listeners": f"CONTROLLER://127.0.0.1:{joiner.port}", "log.dirs": str(joiner.log_dir),
                            "controller.quorum.bootstrap.servers": bootstrap, "broker.session.timeout.ms": "4000"}

        def upgrade() -> str:
            code, out = _features(bootstrap, "upgrade", "--feature", "kraft.version=1")
            assert code == 0 and "kraft.version was upgraded to 1." in out, out
            return out

        _until("kafka-features upgrade --feature kraft.version=1", upgrade)
        after = _until("describe after the upgrade", lambda: _check_finalized(bootstrap, "1"))
        assert isinstance(after, dict)
        voters = _until("voters with directory ids", lambda: _check_directories(bootstrap))
        assert isinstance(voters, dict) and sorted(voters) == [1, 2, 3]

        code, out = _features(bootstrap, "downgrade", "--feature", "kraft.version=0")
        assert code != 0, out
        assert "Can't downgrade the version of this feature." in out, out

        kbroker_format(joiner, q.cluster_id, joiner.overrides, "--no-initial-controllers")
        joiner.start(timeout=60)
        props = joiner.workdir / "add-controller.properties"
        props.write_text("".join(f"{k}={v}\n" for k, v in joiner.overrides.items()))
        out = _until("add-controller 4", lambda: metadata_quorum(
            "--bootstrap-controller", bootstrap, "--command-config", str(props), "add-controller"), timeout=90)
        assert "Added controller 4" in str(out), out
        assert sorted(_voters(bootstrap)) == [1, 2, 3, 4]
    finally:
        joiner.kill()
        q.stop_all()


def _check_finalized(bootstrap: str, level: str) -> dict[str, str]:
    kraft = _described(bootstrap)["kraft.version"]
    assert kraft["FinalizedVersionLevel"] == level, kraft
    return kraft


def _check_directories(bootstrap: str) -> dict[int, dict[str, object]]:
    voters = _voters(bootstrap)
    assert all(v.get("directoryId") not in (None, ZERO_DIRECTORY) for v in voters.values()), voters
    return voters


def _upgrade_transcript(q: MixedQuorum) -> list[object]:
    """What Kafka's tools say about kraft.version on `q`, a one-voter static quorum, through the upgrade."""
    q.start_controllers()
    bootstrap = q.bootstrap_controllers()
    _until("the controller answers", lambda: _described(bootstrap))  # a lone Kafka voter logs no "new epoch"
    fields = ("SupportedMinVersion", "SupportedMaxVersion", "FinalizedVersionLevel")
    seen: list[object] = [{k: _described(bootstrap)["kraft.version"][k] for k in fields}]
    code, out = _features(bootstrap, "upgrade", "--feature", "kraft.version=1", "--dry-run")
    seen.append((code, out.strip()))
    seen.append({k: _described(bootstrap)["kraft.version"][k] for k in fields})  # a dry run changes nothing
    code, out = _features(bootstrap, "upgrade", "--feature", "kraft.version=1")
    seen.append((code, out.strip()))
    seen.append(_check_finalized(bootstrap, "1") and {k: _described(bootstrap)["kraft.version"][k] for k in fields})
    code, out = _features(bootstrap, "downgrade", "--feature", "kraft.version=0")
    seen.append((code != 0, out.strip().splitlines()[0] if out.strip() else ""))
    seen.append(sorted(_voters(bootstrap)))
    return seen


@pytest.mark.slow  # one Apache Kafka 4.3.1 controller; the kbroker-only test above runs by default
def test_the_upgrade_reads_as_on_apache_kafka(tmp_path: Path, skip_without_java: None) -> None:
    """The same steps on a one-voter static quorum of each kind: Kafka's tools print the same."""
    transcripts = []
    for kind in ("k", "j"):
        q = MixedQuorum(tmp_path / kind, kind)
        try:
            transcripts.append(_upgrade_transcript(q))
        finally:
            q.stop_all()
    ours, kafkas = transcripts
    assert ours == kafkas


@pytest.mark.slow  # one Apache Kafka 4.3.1 controller among two kbroker voters
def test_upgrade_a_mixed_static_quorum(tmp_path: Path, skip_without_java: None) -> None:
    """Voters 1, 2 kbroker and 3 Apache Kafka, static: whoever leads learns every voter's directory id and
    range from their UpdateRaftVoter (kbroker's and Kafka's alike), and the upgrade succeeds."""
    q = MixedQuorum(tmp_path, "kkj")
    try:
        q.start_controllers()
        q.wait_leader()
        broker = q.add_kbroker_broker(11)  # a process.roles=broker node reads kraft.version from its log
        q.start_brokers()
        bootstrap = q.bootstrap_controllers()

        def upgrade() -> str:
            code, out = _features(bootstrap, "upgrade", "--feature", "kraft.version=1")
            assert code == 0 and "kraft.version was upgraded to 1." in out, out
            return out

        _until("kafka-features upgrade --feature kraft.version=1", upgrade, timeout=90)
        _until("describe after the upgrade", lambda: _check_finalized(bootstrap, "1"))
        voters = _until("voters with directory ids", lambda: _check_directories(bootstrap))
        assert isinstance(voters, dict) and sorted(voters) == [1, 2, 3]

        def broker_says(level: str) -> None:
            proc = run_java_main("kafka-features", ["--bootstrap-server", broker.bootstrap, "describe"], timeout=120)
            assert proc.returncode == 0, proc.stdout + proc.stderr
            line = next(x for x in proc.stdout.splitlines() if "Feature: kraft.version" in x)
            assert dict(re.findall(r"(\w+): (\S+)", line))["FinalizedVersionLevel"] == level, line

        _until("the broker reports kraft.version 1", lambda: broker_says("1"))
    finally:
        q.stop_all()


@pytest.mark.slow  # one Apache Kafka 4.3.1 controller, kbroker leaders killed until it leads
def test_an_apache_kafka_leader_upgrades_a_quorum_with_kbroker_followers(
        tmp_path: Path, skip_without_java: None) -> None:
    """Voter 1 Apache Kafka, 2 and 3 kbroker, static. A kbroker leader is killed and restarted until the
    Kafka voter leads; the kbroker followers' UpdateRaftVoter (sent once per leader at kraft.version 0)
    tell it their directory ids and ranges, so Kafka's own upgrade succeeds and they follow it."""
    q = MixedQuorum(tmp_path, "jkk")
    try:
        q.start_controllers()
        epoch, leader = q.wait_leader()
        for _ in range(8):
            if leader == 1:
                break
            q.kill(leader)
            epoch, leader = q.wait_leader(after_epoch=epoch, timeout=90)
            q.start(2 if q.controllers[2].proc is None or q.controllers[2].proc.poll() is not None else 3)
        assert leader == 1, "the Apache Kafka voter never led"
        bootstrap = q.bootstrap_controllers()

        def upgrade() -> str:
            code, out = _features(bootstrap, "upgrade", "--feature", "kraft.version=1")
            assert code == 0 and "kraft.version was upgraded to 1." in out, out
            return out

        _until("kafka-features upgrade --feature kraft.version=1", upgrade, timeout=90)
        for i in (2, 3):
            node = q.controllers[i]
            _until(f"kbroker voter {i} at kraft.version 1",
                   lambda node=node: _check_finalized(node.bootstrap, "1"))  # type: ignore[misc]
        voters = _until("voters with directory ids", lambda: _check_directories(bootstrap))
        assert isinstance(voters, dict) and sorted(voters) == [1, 2, 3]
    finally:
        q.stop_all()


def test_the_default_node_upgrades_and_restarts_on_a_new_controller_port(
        tmp_path: Path, skip_without_java: None) -> None:
    """`kbroker serve` (a one-voter static quorum on an implicit CONTROLLER port picked at each start):
    `kafka-features --bootstrap-server` upgrades kraft.version to 1 (forwarded to its controller); after a
    restart on a new implicit port the node elects itself again, writes its new endpoint into the voter
    set and still reports kraft.version 1."""
    node = KBroker(tmp_path / "default")
    try:
        node.start(timeout=60)

        def features(*args: str) -> str:
            proc = run_java_main("kafka-features", ["--bootstrap-server", node.bootstrap, *args], timeout=120)
            assert proc.returncode == 0, proc.stdout + proc.stderr
            return proc.stdout

        def finalized() -> str:
            line = next(x for x in features("describe").splitlines() if "Feature: kraft.version" in x)
            return dict(re.findall(r"(\w+): (\S+)", line))["FinalizedVersionLevel"]

        assert finalized() == "0"
        assert "kraft.version was upgraded to 1." in features("upgrade", "--feature", "kraft.version=1")
        assert finalized() == "1"
        node.stop()
        node.start(timeout=60)
        assert finalized() == "1"
        topic = run_java_main("kafka-topics", ["--bootstrap-server", node.bootstrap, "--create", "--topic", "after",
                                               "--partitions", "1", "--replication-factor", "1"], timeout=120)
        assert topic.returncode == 0, topic.stdout + topic.stderr
    finally:
        node.kill()
