"""KIP-704 leader recovery with kbroker brokers under an Apache Kafka 4.3.1 controller.

After an unclean election (`kafka-leader-election --election-type UNCLEAN`, forwarded by a kbroker
broker) Kafka's controller writes the new leader with ISR [leader] and leaderRecoveryState RECOVERING.
The kbroker leader recovers as Kafka's `Partition.makeLeader` does (at once: "Marking the topic
partition as RECOVERED"), serves its followers, and its first ISR expansion (AlterPartition carrying
RECOVERED) moves the controller's state to RECOVERED -- read back from the controller's own metadata log
with Kafka's `kafka-dump-log --cluster-metadata-decoder`. The followers truncate to the new leader and
every replica ends identical.

Also here, what Spark's driver relies on through a leader change: ListOffsets LATEST never goes back
while the leader is killed -9 under an acks=all producer.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from tests.support.broker import KBroker
from tests.support.java import run_java_main
from tests.support.kafka_cluster import KafkaCluster, cluster_unavailable_reason
from tests.support.replicated_cluster import log_batches, metadata_state, read_partition, wait_partition

pytestmark = [pytest.mark.interop, pytest.mark.java]

IDS = (2, 3, 4)
OVERRIDES = {"replica.lag.time.max.ms": "3000"}
TOPIC = "recover"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    reason = cluster_unavailable_reason()
    if reason:
        pytest.skip(reason)
    c = KafkaCluster(tmp_path_factory.mktemp("kip704"), controller_overrides={"broker.session.timeout.ms": "3000"})
    try:
        c.start_controllers()
        for node_id in IDS:
            c.kbroker(node_id, OVERRIDES).start(timeout=90)
        yield c
    finally:
        c.stop_all()


def partition_changes(c: KafkaCluster, topic_id: str) -> list[dict[str, object]]:
    """The controller's PartitionChangeRecords of `topic_id`, partition 0, in log order (Kafka's decoder)."""
    logs = sorted((c.controllers[0].data / "__cluster_metadata-0").glob("*.log"))
    proc = run_java_main("kafka-dump-log", ["--cluster-metadata-decoder", "--files", ",".join(map(str, logs))],
                         timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out: list[dict[str, object]] = []
    for line in proc.stdout.splitlines():
        if "PARTITION_CHANGE_RECORD" not in line or "payload: " not in line:
            continue
        data = json.loads(line.split("payload: ", 1)[1])["data"]
        if data.get("topicId") == topic_id and data.get("partitionId") == 0:
            out.append(data)
    return out


def topic_id(bootstrap: str, topic: str) -> str:
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    md = admin.describe_topics(TopicCollection([topic]))[topic].result(30)
    # Kafka's Uuid.toString (what the metadata decoder prints) is url-safe base64 without padding;
    # librdkafka prints the standard alphabet.
    return str(md.topic_id).replace("+", "-").replace("/", "_").rstrip("=")


def test_unclean_leader_recovers_and_reports_recovered(cluster: KafkaCluster) -> None:
    from confluent_kafka import Producer

    kb: dict[int, KBroker] = {n: cluster.kbrokers[IDS.index(n)] for n in IDS}

    def live() -> list[str]:
        return [b.bootstrap for b in cluster.kbrokers if b.is_running()]

    proc = run_java_main("kafka-topics", ["--bootstrap-server", kb[2].bootstrap, "--create", "--topic", TOPIC,
                                          "--replica-assignment", "2:3:4", "--config", "min.insync.replicas=1",
                                          "--config", "unclean.leader.election.enable=false"], timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    wait_partition(live, TOPIC, lambda s: len(s.isr) == 3, what="ISR 2,3,4")
    tid = topic_id(kb[2].bootstrap, TOPIC)
    producer = Producer({"bootstrap.servers": ",".join(live()), "acks": "all"})
    for i in range(50):
        producer.produce(TOPIC, f"replicated-{i}".encode())
    assert producer.flush(30) == 0
    for node in (3, 4):
        kb[node].kill()
    wait_partition(live, TOPIC, lambda s: set(s.isr) == {2}, what="ISR [2]")
    p2 = Producer({"bootstrap.servers": kb[2].bootstrap, "acks": "all"})
    for i in range(30):
        p2.produce(TOPIC, f"lost-{i}".encode())
    assert p2.flush(30) == 0
    kb[2].kill()
    kb[3].start(timeout=90)
    time.sleep(4)
    st = metadata_state(kb[3].bootstrap, TOPIC)
    assert st is not None and st.leader == -1, st
    proc = run_java_main("kafka-leader-election", ["--bootstrap-server", kb[3].bootstrap, "--election-type",
                                                   "UNCLEAN", "--topic", TOPIC, "--partition", "0"], timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    wait_partition(live, TOPIC, lambda s: s.leader == 3, what="unclean leader 3")

    # The controller marked the partition RECOVERING with the new leader alone in the ISR.
    changes = partition_changes(cluster, tid)
    unclean = [i for i, ch in enumerate(changes) if ch.get("leader") == 3 and ch.get("leaderRecoveryState") == 1]
    assert unclean, (tid, changes)
    assert changes[unclean[-1]]["isr"] == [3]
    # The kbroker leader recovered at once, as Kafka's makeLeader does, and serves.
    deadline = time.monotonic() + 30
    while "was marked as RECOVERING. Marking the topic partition as RECOVERED" not in kb[3].log_text():
        assert time.monotonic() < deadline, kb[3].log_text()[-3000:]
        time.sleep(0.3)
    p3 = Producer({"bootstrap.servers": kb[3].bootstrap, "acks": "all", "message.timeout.ms": 20000})
    for i in range(20):
        p3.produce(TOPIC, f"after-{i}".encode())
    assert p3.flush(30) == 0

    # A follower comes back, truncates to the new leader and joins the ISR: the leader's expansion
    # carries RECOVERED, which the controller records (an ISR of two is refused while RECOVERING).
    kb[4].start(timeout=90)
    wait_partition(live, TOPIC, lambda s: set(s.isr) == {3, 4}, timeout=90, what="ISR 3,4")
    changes = partition_changes(cluster, tid)
    later = changes[unclean[-1] + 1:]
    recovered = [ch for ch in later if ch.get("leaderRecoveryState") == 0]
    assert recovered, later
    assert sorted(recovered[0]["isr"]) == [3, 4]  # type: ignore[call-overload]
    kb[2].start(timeout=90)
    wait_partition(live, TOPIC, lambda s: set(s.isr) == {2, 3, 4}, timeout=90, what="ISR 2,3,4 again")
    values = [v for _, v in read_partition(kb[3].bootstrap, TOPIC)]
    assert values == [f"replicated-{i}".encode() for i in range(50)] + [f"after-{i}".encode() for i in range(20)]
    logs = {n: log_batches(kb[n].log_dir / f"{TOPIC}-0") for n in IDS}
    assert logs[2] == logs[3] == logs[4]


@pytest.mark.slow  # the Spark version (tests/spark/test_spark_leader_change.py) is slow too; ListOffsets on a
# new leader is unit-tested (OFFSET_NOT_AVAILABLE below its epoch start)
def test_latest_offset_never_goes_back_across_a_leader_kill(cluster: KafkaCluster) -> None:
    """What Spark's driver does between micro-batches (tests/spark/test_spark_leader_change.py runs Spark
    itself, slow): ListOffsets LATEST, polled while an acks=all producer writes and the leader is killed
    -9. The answers never go back (a new leader whose HW lags its epoch start answers
    OFFSET_NOT_AVAILABLE, which the admin client retries) and end at the last acknowledged offset + 1."""
    import threading

    from confluent_kafka import Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    kb: dict[int, KBroker] = {n: cluster.kbrokers[IDS.index(n)] for n in IDS}
    for n in IDS:
        if not kb[n].is_running():
            kb[n].start(timeout=90)

    def live() -> list[str]:
        return [b.bootstrap for b in cluster.kbrokers if b.is_running()]

    proc = run_java_main("kafka-topics", ["--bootstrap-server", kb[3].bootstrap, "--create", "--topic", "latest",
                                          "--replica-assignment", "4:2:3", "--config", "min.insync.replicas=2"],
                         timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    wait_partition(live, "latest", lambda s: len(s.isr) == 3 and s.leader == 4, what="ISR 4,2,3")
    producer = Producer({"bootstrap.servers": ",".join(live()), "acks": "all", "enable.idempotence": True,
                         "metadata.max.age.ms": 1000})
    acked: list[int] = []
    stop = threading.Event()
    seen: list[int] = []
    unavailable: list[int] = []
    errors: list[str] = []

    def poll() -> None:
        admin = AdminClient({"bootstrap.servers": ",".join(b.bootstrap for b in cluster.kbrokers),
                             "metadata.max.age.ms": 1000})
        while not stop.is_set():
            try:
                res = admin.list_offsets({TopicPartition("latest", 0): OffsetSpec.latest()}, request_timeout=10)
                offset = res[TopicPartition("latest", 0)].result().offset
                if offset < 0:
                    # librdkafka reports a partition error such as OFFSET_NOT_AVAILABLE (which Java's
                    # admin client, Spark's, retries) as offset -1001: an answer withheld, not an offset.
                    unavailable.append(offset)
                else:
                    seen.append(offset)
            except Exception as e:  # noqa: BLE001 - a failed round (leader moving) is retried
                errors.append(str(e))
            time.sleep(0.02)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    try:
        deadline = time.monotonic() + 20
        i = 0
        killed = False
        while time.monotonic() < deadline:
            producer.produce("latest", f"v{i}".encode(), partition=0,
                             on_delivery=lambda e, m: acked.append(m.offset()) if e is None else None)
            producer.poll(0.01)
            i += 1
            if not killed and time.monotonic() > deadline - 14:
                kb[4].kill()
                killed = True
        assert producer.flush(60) == 0
        time.sleep(2)
    finally:
        stop.set()
        poller.join(30)
    assert acked and seen, (len(acked), errors[:3])
    drops = [(a, b) for a, b in zip(seen, seen[1:], strict=False) if b < a]
    assert not drops, f"ListOffsets latest went back: {drops[:5]}"
    assert seen[-1] == max(acked) + 1
    print(f"latest polled {len(seen)} times, {len(unavailable)} answers withheld, {len(errors)} failed rounds")
    kb[4].start(timeout=90)
