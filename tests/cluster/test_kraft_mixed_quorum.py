"""A mixed controller quorum: kbroker and Apache Kafka 4.3.1 controllers as voters of one static quorum.

Real processes. Voters 1 and 2 are kbroker controllers (`process.roles=controller`), voter 3 is Kafka's
own (`kafka.Kafka`), all named in one `controller.quorum.voters`; each is formatted by its own kind's
tool. A kbroker broker (11) and an Apache Kafka broker (12) are served by the quorum. The test moves
leadership between the kinds with `kill -9` of the active controller (a kbroker leader is killed until
the Kafka voter wins an election, then the Kafka leader is killed so a kbroker voter takes over) and
checks, under each kind of leader: both brokers registered and listed, a topic created through the
brokers, every topic created under the other kind still there, Kafka's `kafka-metadata-quorum
describe --status / --replication` naming the leader and the three voters, and at the end that
`kafka-dump-log --cluster-metadata-decoder` prints the same records at the same offsets from a kbroker
voter's log and from the Kafka voter's log.

The slow test runs the other split (1 kbroker + 2 Kafka voters) through a longer kill -9 loop.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.java import java_unavailable_reason
from tests.support.mixed_quorum import MixedQuorum

pytestmark = [pytest.mark.interop, pytest.mark.java]

KBROKER_BROKER, KAFKA_BROKER = 11, 12


@pytest.fixture
def skip_without_java() -> None:
    reason = java_unavailable_reason()
    if reason:
        pytest.skip(f"Kafka tools unavailable: {reason}")


def _quorum(tmp_path: Path, kinds: str, kafka_broker: bool = True) -> Iterator[MixedQuorum]:
    q = MixedQuorum(tmp_path, kinds)
    try:
        q.start_controllers()
        q.wait_leader()
        q.add_kbroker_broker(KBROKER_BROKER)
        if kafka_broker:
            q.add_kafka_broker(KAFKA_BROKER)
        q.start_brokers()
        yield q
    finally:
        q.stop_all()


def _admin(bootstrap: str):  # type: ignore[no-untyped-def]
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap})


def _create_topic(q: MixedQuorum, name: str, partitions: int) -> None:
    """CreateTopics through the kbroker broker (forwarded to whichever controller leads); retried while
    the brokers find a new leader (NOT_CONTROLLER, a lost connection)."""
    from confluent_kafka.admin import NewTopic

    admin = _admin(q.brokers[KBROKER_BROKER].bootstrap)
    deadline = time.monotonic() + 60
    while True:
        fut = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=min(2, len(q.brokers)))])
        try:
            fut[name].result(timeout=30)
            return
        except Exception as e:  # noqa: BLE001
            if "already exists" in str(e):
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"create {name} failed: {e}") from e
            time.sleep(0.5)


def _wait_served(q: MixedQuorum, topics: dict[str, int], timeout: float = 60.0) -> None:
    """Each broker's Metadata lists both brokers and every topic with its partition count."""
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        ok = True
        for b in q.brokers.values():
            try:
                md = _admin(b.bootstrap).list_topics(timeout=10)
            except Exception as e:  # noqa: BLE001
                last, ok = e, False
                break
            seen = {name: len(t.partitions) for name, t in md.topics.items()}
            last = (b.bootstrap, sorted(md.brokers), seen)
            if set(md.brokers) != set(q.brokers) or any(seen.get(t) != n for t, n in topics.items()):
                ok = False
                break
        if ok:
            return
        time.sleep(0.5)
    raise AssertionError(f"brokers do not serve {topics}: {last}")


def _status(q: MixedQuorum, bootstrap: str | None = None) -> dict[str, str]:
    proc = q.describe("--status", bootstrap)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = {}
    for line in proc.stdout.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out[key.strip()] = value.strip()
    return out


def _replication(q: MixedQuorum) -> dict[int, list[str]]:
    """`describe --replication`: NodeId -> [DirectoryId, LogEndOffset, Lag, LastFetchTimestamp,
    LastCaughtUpTimestamp, Status]."""
    proc = q.describe("--replication")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {}
    for line in proc.stdout.splitlines()[1:]:
        cols = line.split()
        if cols and cols[0].isdigit():
            rows[int(cols[0])] = cols[1:]
    return rows


def _check_quorum_tools(q: MixedQuorum, leader: int, epoch: int) -> None:
    status = _status(q)
    assert status["ClusterId"] == q.cluster_id
    assert int(status["LeaderId"]) == leader, status
    assert int(status["LeaderEpoch"]) >= epoch, status
    for i in q.controllers:
        assert f'"id": {i}' in status["CurrentVoters"], status
    # Through each kind alone: an Apache Kafka controller answers DescribeCluster from the controller
    # registrations (KIP-919), so it names a kbroker leader only because the kbroker voters registered.
    for kind in ("kbroker", "kafka"):
        node = next((n for i, n in q.controllers.items() if q.kind(i) == kind and q.is_running(n)), None)
        if node is not None:
            alone = _status(q, node.bootstrap)
            assert int(alone["LeaderId"]) == leader, (kind, alone)
            assert alone["HighWatermark"] and alone["CurrentVoters"] == status["CurrentVoters"], (kind, alone)
    rows = _replication(q)
    assert rows[leader][-1] == "Leader", rows
    assert {i for i, r in rows.items() if r[-1] in ("Leader", "Follower")} == set(q.controllers), rows
    assert set(q.brokers) <= {i for i, r in rows.items() if r[-1] == "Observer"}, rows


def _fail_over_to(q: MixedQuorum, want_kind: str, epoch: int, leader: int, tries: int = 10) -> tuple[int, int]:
    """kill -9 the leader (restarting it once another voter leads) until a voter of `want_kind` leads."""
    for _ in range(tries):
        if q.kind(leader) == want_kind:
            return epoch, leader
        killed = leader
        started = time.monotonic()
        q.kill(killed)
        epoch, leader = q.wait_leader(after_epoch=epoch, timeout=60)
        print(f"kill -9 {q.kind(killed)} leader {killed}: {q.kind(leader)} controller {leader} leads epoch "
              f"{epoch} after {time.monotonic() - started:.2f}s")
        q.start(killed)
    raise AssertionError(f"no {want_kind} leader after {tries} failovers")


def _compare_logs(q: MixedQuorum, a: int, b: int) -> int:
    """The common prefix of two voters' metadata logs, as `kafka-dump-log` decodes them, is identical;
    returns its length (records)."""
    da, db = q.dump_log(a), q.dump_log(b)
    n = min(len(da), len(db))
    assert n > 0
    assert da[:n] == db[:n]
    return n


def test_mixed_quorum_two_kbroker_one_kafka(tmp_path: Path, skip_without_java: None) -> None:
    gen = _quorum(tmp_path, "kkj")
    q = next(gen)
    try:
        topics: dict[str, int] = {}
        epoch, leader = q.wait_leader()
        # Under a kbroker leader (the kbroker voters start first and form the majority of the first epoch).
        epoch, leader = _fail_over_to(q, "kbroker", epoch, leader)
        _create_topic(q, "under-kbroker-1", 2)
        topics["under-kbroker-1"] = 2
        _wait_served(q, topics)

        # Leadership moves to the Apache Kafka voter.
        epoch, leader = _fail_over_to(q, "kafka", epoch, leader)
        _create_topic(q, "under-kafka", 3)
        topics["under-kafka"] = 3
        _wait_served(q, topics)
        _check_quorum_tools(q, leader, epoch)

        # And back to a kbroker voter.
        epoch, leader = _fail_over_to(q, "kbroker", epoch, leader)
        _create_topic(q, "under-kbroker-2", 1)
        topics["under-kbroker-2"] = 1
        _wait_served(q, topics)
        _check_quorum_tools(q, leader, epoch)

        # Both kinds' logs hold the same records: the Kafka voter (3) was killed above and restarted; it
        # follows the kbroker leader. Stop the quorum, then compare the files.
        time.sleep(2)
    finally:
        try:
            next(gen)
        except StopIteration:
            pass
    # The Kafka voter found every controller API it sends to a kbroker leader (ControllerRegistration,
    # UpdateRaftVoter): no "The node does not support CONTROLLER_REGISTRATION / UPDATE_RAFT_VOTER".
    kafka_log = q.controllers[3].server_log()  # type: ignore[union-attr]
    assert "does not support" not in kafka_log, [ln for ln in kafka_log.splitlines() if "does not support" in ln][:3]
    assert "Our registration has been persisted to the metadata log" in kafka_log
    n = _compare_logs(q, 1, 3)
    assert n >= 10, n
    n2 = _compare_logs(q, 2, 3)
    assert n2 >= 10, n2


@pytest.mark.slow
def test_mixed_quorum_one_kbroker_two_kafka_kill_loop(tmp_path: Path, skip_without_java: None) -> None:
    """1 kbroker + 2 Kafka voters (Kafka holds the majority), a kbroker broker: eight rounds of kill -9
    of whichever controller leads (restarted after the next leader is known), a topic created in each
    round; both kinds lead at least once, every topic survives, the tools agree, and the kbroker voter's
    log equals each Kafka voter's."""
    gen = _quorum(tmp_path, "kjj", kafka_broker=False)
    q = next(gen)
    try:
        topics: dict[str, int] = {}
        kinds_led: set[str] = set()
        epoch, leader = q.wait_leader()
        for round_ in range(8):
            kinds_led.add(q.kind(leader))
            name = f"round-{round_}-under-{q.kind(leader)}-{leader}"
            _create_topic(q, name, 1 + round_ % 3)
            topics[name] = 1 + round_ % 3
            _wait_served(q, topics)
            killed = leader
            q.kill(killed)
            epoch, leader = q.wait_leader(after_epoch=epoch, timeout=60)
            q.start(killed)
        if "kbroker" not in kinds_led:
            epoch, leader = _fail_over_to(q, "kbroker", epoch, leader)
            _create_topic(q, "under-kbroker", 1)
            topics["under-kbroker"] = 1
        kinds_led.add(q.kind(leader))
        assert kinds_led == {"kbroker", "kafka"}
        _wait_served(q, topics)
        _check_quorum_tools(q, leader, epoch)
        time.sleep(2)
    finally:
        try:
            next(gen)
        except StopIteration:
            pass
    assert _compare_logs(q, 1, 2) >= 10
    assert _compare_logs(q, 1, 3) >= 10
