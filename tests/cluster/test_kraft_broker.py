"""A kbroker broker (process.roles=broker) joins a KRaft cluster run by an Apache Kafka 4.3.1 controller.

Real processes: one `kafka.Kafka` controller (static quorum, node 1) and one `kbroker serve` broker
(node 3), both formatted by `kafka-storage format` with one cluster id. Kafka's own tools check what
the controller sees: `kafka-metadata-quorum describe` lists kbroker as an observer of the metadata
log; `kafka-dump-log --cluster-metadata-decoder` on the controller's log shows the registration and
the fencing. Admin requests sent to kbroker are forwarded to the controller (kafka-topics, the
confluent-kafka admin client), and produce / consume work on the partitions the controller gave kbroker.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from tests.support.java import run_java_main
from tests.support.kafka_cluster import KafkaCluster, cluster_unavailable_reason

pytestmark = [pytest.mark.interop, pytest.mark.java]

KB_ID = 3


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    reason = cluster_unavailable_reason()
    if reason:
        pytest.skip(reason)
    c = KafkaCluster(tmp_path_factory.mktemp("kraft"))
    try:
        c.start_controllers()
        # num.partitions differs from the controller's (1): auto-created topics must take the broker's.
        c.kbroker(KB_ID, {"num.partitions": "2"}).start(timeout=90)
        yield c
    finally:
        c.stop_all()


def controller_records(cluster: KafkaCluster) -> list[dict[str, object]]:
    """Every metadata record in the controller's `__cluster_metadata-0`, decoded by kafka-dump-log."""
    log_dir = cluster.controllers[0].data / "__cluster_metadata-0"
    files = sorted(str(p) for p in log_dir.glob("*.log"))
    proc = run_java_main("kafka-dump-log", ["--cluster-metadata-decoder", "--files", ",".join(files)], timeout=90)
    assert proc.returncode == 0, proc.stderr
    out = []
    for line in proc.stdout.splitlines():
        _, sep, payload = line.partition("payload: ")
        if sep and payload.startswith("{"):
            out.append(json.loads(payload))
    return out


def fencings(records: list[dict[str, object]], broker_id: int, epoch: int) -> int:
    """How many records fenced broker `broker_id` in registration `epoch` (FenceBrokerRecord, or a
    BrokerRegistrationChangeRecord with fenced=1, as Kafka 4.3 writes)."""
    count = 0
    for r in records:
        data = r["data"]
        assert isinstance(data, dict)
        if r["type"] == "FENCE_BROKER_RECORD" and data.get("id") == broker_id and data.get("epoch") == epoch:
            count += 1
        if (r["type"] == "BROKER_REGISTRATION_CHANGE_RECORD" and data.get("brokerId") == broker_id
                and data.get("brokerEpoch") == epoch and data.get("fenced") == 1):
            count += 1
    return count


def broker_fenced_after(records: list[dict[str, object]], broker_id: int, epoch: int) -> bool:
    return fencings(records, broker_id, epoch) > 0


def registrations(records: list[dict[str, object]], broker_id: int) -> list[int]:
    epochs = []
    for r in records:
        data = r["data"]
        assert isinstance(data, dict)
        if r["type"] == "REGISTER_BROKER_RECORD" and data.get("brokerId") == broker_id:
            epochs.append(int(data["brokerEpoch"]))  # type: ignore[call-overload]
    return epochs


def test_kbroker_registers_is_unfenced_and_observes_the_metadata_log(cluster: KafkaCluster) -> None:
    from confluent_kafka.admin import AdminClient

    kb = cluster.kbrokers[0]
    status = cluster.metadata_quorum("describe", "--status")
    assert status.returncode == 0, status.stderr
    observers_line = next(line for line in status.stdout.splitlines() if line.startswith("CurrentObservers"))
    observers = json.loads(observers_line.split(":", 1)[1])
    assert [o["id"] for o in observers] == [KB_ID]
    replication = cluster.metadata_quorum("describe", "--replication")
    rows = [line.split() for line in replication.stdout.splitlines()[1:] if line.strip()]
    observer_rows = [r for r in rows if r[-1] == "Observer"]
    assert [int(r[0]) for r in observer_rows] == [KB_ID]
    # The observer is caught up: its log end offset is within a few records of the leader's.
    leader_row = next(r for r in rows if r[-1] == "Leader")
    assert int(leader_row[2]) - int(observer_rows[0][2]) < 50

    # Registered with its listener and features, and unfenced (an UnfenceBrokerRecord, or Kafka 4.3's
    # BrokerRegistrationChangeRecord fenced=-1, for its epoch).
    records = controller_records(cluster)
    epochs = registrations(records, KB_ID)
    assert epochs, "no RegisterBrokerRecord for kbroker"
    reg = [r for r in records if r["type"] == "REGISTER_BROKER_RECORD"][-1]["data"]
    assert isinstance(reg, dict)
    assert reg["endPoints"] == [{"name": "PLAINTEXT", "host": "127.0.0.1", "port": kb.port, "securityProtocol": 0}]
    assert {f["name"] for f in reg["features"]} >= {"metadata.version", "kraft.version", "group.version"}
    assert len(reg["logDirs"]) == 1
    meta = (kb.log_dir / "meta.properties").read_text()
    assert f"directory.id={reg['logDirs'][0]}" in meta

    # Clients see it through Metadata, as the one live broker.
    md = AdminClient({"bootstrap.servers": kb.bootstrap}).list_topics(timeout=20)
    assert sorted(md.brokers) == [KB_ID]
    assert md.cluster_id == cluster.cluster_id
    assert md.controller_id == KB_ID


def test_kafka_topics_creates_through_kbroker_and_clients_produce_and_consume(cluster: KafkaCluster) -> None:
    from confluent_kafka import Consumer, Producer

    kb = cluster.kbrokers[0]
    created = run_java_main("kafka-topics", ["--bootstrap-server", kb.bootstrap, "--create", "--topic", "orders",
                                             "--partitions", "2", "--replication-factor", "1"], timeout=90)
    assert created.returncode == 0, created.stdout + created.stderr
    assert "Created topic orders." in created.stdout
    described = run_java_main("kafka-topics", ["--bootstrap-server", kb.bootstrap, "--describe", "--topic", "orders"],
                              timeout=90)
    assert described.returncode == 0, described.stderr
    leaders = [line for line in described.stdout.splitlines() if "Partition:" in line]
    assert len(leaders) == 2
    assert all(f"Leader: {KB_ID}" in line and f"Isr: {KB_ID}" in line for line in leaders), described.stdout
    # The controller's log has the topic: it was created by the controller, not by kbroker.
    assert any(r["type"] == "TOPIC_RECORD" and r["data"]["name"] == "orders"  # type: ignore[index]
               for r in controller_records(cluster))

    producer = Producer({"bootstrap.servers": kb.bootstrap, "enable.idempotence": True, "acks": "all"})
    sent = [f"order-{i}".encode() for i in range(200)]
    for i, value in enumerate(sent):
        producer.produce("orders", value=value, partition=i % 2)
    assert producer.flush(30) == 0

    consumer = Consumer({"bootstrap.servers": kb.bootstrap, "group.id": "orders-reader",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe(["orders"])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(got) < len(sent) and time.monotonic() < deadline:
        msg = consumer.poll(1.0)
        if msg is not None and msg.error() is None:
            got.append(msg.value())
    consumer.close()
    assert sorted(got) == sorted(sent)


def test_auto_created_topics_take_the_brokers_defaults(cluster: KafkaCluster) -> None:
    from confluent_kafka import Producer

    kb = cluster.kbrokers[0]
    producer = Producer({"bootstrap.servers": kb.bootstrap})
    producer.produce("auto-made", value=b"x")
    assert producer.flush(30) == 0
    described = run_java_main("kafka-topics", ["--bootstrap-server", kb.bootstrap, "--describe",
                                               "--topic", "auto-made"], timeout=90)
    assert "PartitionCount: 2" in described.stdout, described.stdout + described.stderr


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")
def test_config_and_partition_changes_are_forwarded_and_visible_at_once(cluster: KafkaCluster) -> None:
    from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic

    kb = cluster.kbrokers[0]
    admin = AdminClient({"bootstrap.servers": kb.bootstrap})
    for f in admin.create_topics([NewTopic("events", num_partitions=1, replication_factor=1,
                                           config={"cleanup.policy": "compact"})]).values():
        f.result(30)
    # The next Metadata on kbroker sees the new topic (RemoteController waits for its image).
    assert "events" in admin.list_topics(timeout=20).topics
    for f in admin.create_partitions([NewPartitions("events", 3)]).values():
        f.result(30)
    assert len(admin.list_topics("events", timeout=20).topics["events"].partitions) == 3
    resource = ConfigResource("TOPIC", "events", set_config={"retention.ms": "123456"})
    for f in admin.alter_configs([resource]).values():
        f.result(30)
    desc = admin.describe_configs([ConfigResource("TOPIC", "events")])
    configs = next(iter(desc.values())).result(30)
    assert configs["retention.ms"].value == "123456"
    # IncrementalAlterConfigs (KIP-339), also forwarded.
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry

    incremental = ConfigResource("TOPIC", "events", incremental_configs=[
        ConfigEntry("segment.ms", "600000", incremental_operation=AlterConfigOpType.SET)])
    for f in admin.incremental_alter_configs([incremental]).values():
        f.result(30)
    configs = next(iter(admin.describe_configs([ConfigResource("TOPIC", "events")]).values())).result(30)
    assert (configs["segment.ms"].value, configs["retention.ms"].value) == ("600000", "123456")
    # Errors come back as the controller gives them.
    bad = admin.create_topics([NewTopic("events", num_partitions=1, replication_factor=1)])
    with pytest.raises(Exception, match="TOPIC_ALREADY_EXISTS|already exists"):
        next(iter(bad.values())).result(30)
    too_many = admin.create_topics([NewTopic("wide", num_partitions=1, replication_factor=3)])
    with pytest.raises(Exception, match="INVALID_REPLICATION_FACTOR|replication factor"):
        next(iter(too_many.values())).result(30)
    for f in admin.delete_topics(["events"]).values():
        f.result(30)
    assert "events" not in admin.list_topics(timeout=20).topics


def test_kbroker_follows_a_restarted_controller_into_its_new_epoch(cluster: KafkaCluster) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    kb = cluster.kbrokers[0]
    controller = cluster.controllers[0]
    controller.stop()
    controller.start()
    # The restarted voter elects itself in a new epoch; kbroker finds it, keeps heartbeating, and
    # forwards to it again.
    admin = AdminClient({"bootstrap.servers": kb.bootstrap})
    deadline = time.monotonic() + 60
    while True:
        futures = admin.create_topics([NewTopic("after-restart", num_partitions=1, replication_factor=1)])
        try:
            next(iter(futures.values())).result(30)
            break
        except Exception as exc:  # noqa: BLE001 - retried until the quorum is back
            if "TOPIC_ALREADY_EXISTS" in str(exc) or "already exists" in str(exc):
                break
            assert time.monotonic() < deadline, f"no topic creation after the controller restart: {exc}"
            time.sleep(1)
    assert "after-restart" in admin.list_topics(timeout=20).topics
    assert "in epoch 2" in kb.log_text()
    assert sorted(admin.list_topics(timeout=20).brokers) == [KB_ID]


def broker_unfenced_after_fence(records: list[dict[str, object]], broker_id: int, epoch: int) -> bool:
    """Whether, after a fencing of (broker_id, epoch), a record unfenced it again in the same epoch."""
    fenced = False
    for r in records:
        data = r["data"]
        assert isinstance(data, dict)
        mine = data.get("brokerId", data.get("id")) == broker_id and data.get("brokerEpoch", data.get("epoch")) == epoch
        if not mine:
            continue
        if r["type"] == "FENCE_BROKER_RECORD" or (r["type"] == "BROKER_REGISTRATION_CHANGE_RECORD"
                                                  and data.get("fenced") == 1):
            fenced = True
        elif fenced and (r["type"] == "UNFENCE_BROKER_RECORD" or (r["type"] == "BROKER_REGISTRATION_CHANGE_RECORD"
                                                                  and data.get("fenced") == -1)):
            return True
    return False


def test_a_paused_broker_loses_its_session_and_is_unfenced_when_it_resumes(cluster: KafkaCluster) -> None:
    import os
    import signal

    kb = cluster.kbrokers[0]
    epoch = registrations(controller_records(cluster), KB_ID)[-1]
    os.kill(kb.pid, signal.SIGSTOP)  # no heartbeats past the controller's broker.session.timeout.ms (4 s)
    try:
        deadline = time.monotonic() + 30
        while not broker_fenced_after(controller_records(cluster), KB_ID, epoch):
            assert time.monotonic() < deadline, "the controller did not fence the paused kbroker"
            time.sleep(1)
    finally:
        os.kill(kb.pid, signal.SIGCONT)
    # Resumed: its heartbeats (same epoch, not wanting to be fenced) get it unfenced again.
    deadline = time.monotonic() + 30
    while not broker_unfenced_after_fence(controller_records(cluster), KB_ID, epoch):
        assert time.monotonic() < deadline, "the controller did not unfence the resumed kbroker"
        time.sleep(1)
    assert registrations(controller_records(cluster), KB_ID)[-1] == epoch  # no new registration needed


def test_a_broker_of_another_cluster_or_unformatted_is_refused(cluster: KafkaCluster) -> None:
    from tests.support.broker import KBrokerError
    from tests.support.kafka_cluster import new_cluster_id

    stranger = cluster.kbroker(5, cluster_id=new_cluster_id())
    with pytest.raises(KBrokerError, match="INCONSISTENT_CLUSTER_ID"):
        stranger.start(timeout=60)
    unformatted = cluster.kbroker(6, format_dirs=False)
    with pytest.raises(KBrokerError, match="No meta.properties found"):
        unformatted.start(timeout=60)
    assert not (unformatted.log_dir / "meta.properties").exists()  # it invented no cluster id


def test_stopping_kbroker_fences_it_and_it_rejoins(cluster: KafkaCluster) -> None:
    kb = cluster.kbrokers[0]
    before = controller_records(cluster)
    first = registrations(before, KB_ID)[-1]
    assert kb.stop() == 0
    assert "The controller completed the controlled shutdown" in kb.log_text()
    assert fencings(controller_records(cluster), KB_ID, first) == fencings(before, KB_ID, first) + 1

    # Restart on the same data: it replays its local metadata log, registers again (new epoch), and
    # the data written before is still there.
    kb.start(timeout=90)
    second = registrations(controller_records(cluster), KB_ID)[-1]
    assert second > first
    from confluent_kafka.admin import AdminClient

    assert sorted(AdminClient({"bootstrap.servers": kb.bootstrap}).list_topics(timeout=20).brokers) == [KB_ID]

    # A crash (no controlled shutdown): the controller fences it once broker.session.timeout.ms passes.
    kb.kill()
    deadline = time.monotonic() + 30
    while not broker_fenced_after(controller_records(cluster), KB_ID, second):
        assert time.monotonic() < deadline, "the controller did not fence the killed kbroker"
        time.sleep(1)
