"""Replication between in-process kbroker brokers, proven with a real client (kafka-python).

Three brokers (`tests.support.replica_cluster.ReplicaCluster`: real services, real listeners, a
stand-in controller feeding every broker the same metadata records), a topic with replicas [1, 2, 3]
and min.insync.replicas=2: records replicate to every follower byte for byte; acks=all blocks while
the followers are stopped (and times out once the ISR is below min ISR: the HW stays, Kafka 4.3) and
is refused below min.insync.replicas; the ISR shrinks after
replica.lag.time.max.ms and expands when the followers catch up; a leader failover loses no record
acknowledged with acks=all and the old leader truncates what only it had.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient
from kafka.errors import KafkaTimeoutError, NotEnoughReplicasError, RequestTimedOutError

from kbroker.protocol.errors import ErrorCode
from kbroker.replica import replica_fetcher
from tests.support.replica_cluster import ReplicaCluster

logging.getLogger("kafka").setLevel(logging.ERROR)

LAG_MS = 1000


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ReplicaCluster]:
    with ReplicaCluster(tmp_path, 3, {"replica.lag.time.max.ms": str(LAG_MS)}) as c:
        c.create_topic("t", [1, 2, 3], {"min.insync.replicas": "2"})
        yield c


def producer(cluster: ReplicaCluster, **kw: object) -> KafkaProducer:
    opts: dict[str, object] = {"bootstrap_servers": cluster.bootstrap, "acks": "all", "request_timeout_ms": 15000}
    opts.update(kw)
    return KafkaProducer(**opts)


def read_all(cluster: ReplicaCluster, topic: str = "t", expect: int = 0) -> list[bytes]:
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, enable_auto_commit=False,
                             consumer_timeout_ms=3000)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    out: list[bytes] = []
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            out.extend(r.value for r in records)
        if len(out) >= expect and (expect or out):
            break
    consumer.close()
    return out


def isr_seen_by_client(cluster: ReplicaCluster, topic: str = "t") -> tuple[int, list[int]]:
    """(leader, ISR) of partition 0 as a Metadata request answers it."""
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        (desc,) = admin.describe_topics([topic])
        (p,) = desc["partitions"]
        return p["leader_id"], sorted(p["isr_nodes"])
    finally:
        admin.close()


def log_bytes(cluster: ReplicaCluster, node: int, topic: str = "t") -> bytes:
    def read() -> bytes:
        part = cluster.partition(node, topic)
        assert part is not None
        data = part.log.read(0, 1 << 24, max_offset=part.log_end_offset)
        return b"" if data.region is None else data.region.read_bytes()

    return cluster.call(read)


def test_rf3_replicates_every_record_byte_for_byte(cluster: ReplicaCluster) -> None:
    p = producer(cluster)  # idempotent: producer ids and sequences replicate too
    for i in range(50):
        p.send("t", f"r{i}".encode())
    p.flush(15)
    p.close()
    cluster.wait_for(lambda: all(cluster.partition(n, "t").high_watermark == 50 for n in (1, 2, 3)),  # type: ignore[union-attr]
                     what="every replica at HW 50")
    leader_bytes = log_bytes(cluster, 1)
    assert leader_bytes and log_bytes(cluster, 2) == leader_bytes and log_bytes(cluster, 3) == leader_bytes
    assert [cluster.log_state(n, "t")[2] for n in (1, 2, 3)] == [[(0, 0)]] * 3
    # The followers replayed the producer state, so a new leader would keep de-duplicating.
    pids = [cluster.call(lambda n=n: sorted(cluster.partition(n, "t").log.producer_state.producers))  # type: ignore[union-attr, misc]
            for n in (1, 2, 3)]
    assert pids[0] and pids[0] == pids[1] == pids[2]
    assert read_all(cluster, expect=50) == [f"r{i}".encode() for i in range(50)]
    assert isr_seen_by_client(cluster) == (1, [1, 2, 3])
    # The followers fetch through incremental sessions (KIP-227) the leader holds for them.
    sessions = [cluster.call(lambda n=n: cluster.nodes[n].services.replica_manager  # type: ignore[misc]
                             .replica_fetcher_manager.fetchers[(1, 0)].session_id) for n in (2, 3)]
    assert all(sessions) and sessions[0] != sessions[1]
    # Followers refuse clients: produce and consumer fetch go to the leader only.
    assert cluster.call(lambda: cluster.nodes[2].services.replica_manager.get_partition("t", 0)) is None


def test_acks_all_blocks_then_isr_shrinks_and_expands(cluster: ReplicaCluster) -> None:
    p = producer(cluster, retries=0)
    p.send("t", b"before").get(15)
    cluster.pause_fetchers(2)
    cluster.pause_fetchers(3)
    # Both followers stopped: acks=all is appended but not answered while the ISR still counts them...
    waiting = producer(cluster, retries=0, request_timeout_ms=5000)
    pending = waiting.send("t", b"waiting")
    time.sleep(0.3)
    assert not pending.is_done
    # ...and after replica.lag.time.max.ms, when the leader has shrunk the ISR to itself through
    # AlterPartition, still not: below min ISR the HW does not advance (Kafka 4.3, KAFKA-15583), so
    # the produce is never acknowledged and times out.
    cluster.wait_for(lambda: cluster.registration("t").isr == (1,), what="ISR [1]")
    with pytest.raises((RequestTimedOutError, KafkaTimeoutError)):
        pending.get(15)
    waiting.close()
    assert cluster.call(lambda: cluster.partition(1, "t").high_watermark) == 1  # type: ignore[union-attr]
    assert isr_seen_by_client(cluster) == (1, [1])
    # Below min.insync.replicas=2 acks=all is refused before the append; acks=1 still works.
    with pytest.raises(NotEnoughReplicasError):
        p.send("t", b"refused").get(15)
    acks1 = producer(cluster, acks=1, retries=0)
    assert acks1.send("t", b"acks=1").get(15).offset == 2
    acks1.close()
    # One follower back: it catches up to the HW and the ISR expands; acks=all works again.
    cluster.resume_fetchers(2)
    cluster.wait_for(lambda: cluster.registration("t").isr == (1, 2), what="ISR [1, 2]")
    assert p.send("t", b"after").get(15).offset == 3
    cluster.resume_fetchers(3)
    cluster.wait_for(lambda: cluster.registration("t").isr == (1, 2, 3), what="ISR [1, 2, 3]")
    assert isr_seen_by_client(cluster) == (1, [1, 2, 3])
    p.close()
    assert read_all(cluster, expect=4) == [b"before", b"waiting", b"acks=1", b"after"]
    shrinks = [r for r in cluster.alter_partition_requests
               if [s.broker_id for s in r.topics[0].partitions[0].new_isr_with_epochs] == [1]]
    assert shrinks and shrinks[0].broker_epoch == cluster.nodes[1].epoch


@pytest.mark.parametrize("truncate_on_fetch", [True, False], ids=["diverging_epoch", "offset_for_leader_epoch"])
def test_leader_failover_keeps_acknowledged_records_and_old_leader_truncates(
        cluster: ReplicaCluster, truncate_on_fetch: bool, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """With a Fetch v12+ leader the old leader learns where to truncate from `diverging_epoch`; with an
    older leader (simulated: the fetcher's v12 threshold raised) it asks OffsetForLeaderEpoch first."""
    if not truncate_on_fetch:
        monkeypatch.setattr(replica_fetcher, "TRUNCATE_ON_FETCH_VERSION", 99)
    caplog.set_level(logging.INFO, logger="kbroker.replica.replica_fetcher")
    acked: list[bytes] = []
    p = producer(cluster, retries=0)
    for i in range(10):
        p.send("t", f"a{i}".encode()).get(15)
        acked.append(f"a{i}".encode())
    cluster.wait_for(lambda: all(cluster.log_state(n, "t")[0] == 10 for n in (2, 3)), what="followers at 10")
    # The followers stop; the leader takes acks=1 writes nobody else has (offsets 10-14).
    cluster.pause_fetchers(2)
    cluster.pause_fetchers(3)
    lonely = producer(cluster, acks=1, retries=0)
    for i in range(5):
        lonely.send("t", f"lonely{i}".encode()).get(15)
    lonely.close()
    p.close()
    assert cluster.log_state(1, "t")[0] == 15
    # The leader is cut off; the controller elects broker 2 (first live ISR replica in assignment order).
    cluster.fail_broker(1)
    reg = cluster.registration("t")
    assert (reg.leader, reg.leader_epoch, reg.isr) == (2, 1, (2, 3))
    cluster.resume_fetchers(2)
    cluster.resume_fetchers(3)
    p2 = producer(cluster, retries=5)
    for i in range(10):
        p2.send("t", f"b{i}".encode()).get(15)
        acked.append(f"b{i}".encode())
    p2.close()
    assert cluster.log_state(2, "t")[2] == [(0, 0), (1, 10)]
    # The old leader comes back as a follower: its epoch-0 entries past offset 10 diverge from the new
    # leader's log (epoch 1 starts at 10), so it truncates to 10 and copies the new records.
    cluster.restore_broker(1)
    cluster.wait_for(lambda: cluster.log_state(1, "t")[0] == 20 and cluster.log_state(1, "t")[2] == [(0, 0), (1, 10)],
                     what="old leader truncated and caught up")
    assert "Truncating t-0 from 15 to 10: the leader (broker 2) ends epoch 0 at 10" in caplog.text
    assert log_bytes(cluster, 1) == log_bytes(cluster, 2)
    cluster.wait_for(lambda: cluster.registration("t").isr == (1, 2, 3), what="old leader back in the ISR")
    assert read_all(cluster, expect=20) == acked


def test_wire_level_leader_and_follower_answers(cluster: ReplicaCluster) -> None:
    """Exact requests: a follower refuses clients, the leader checks follower fetches (replica
    membership, KIP-595 divergence) and serves them up to its log end, not its HW."""
    from kbroker.protocol.messages.fetch import FetchRequest, FetchResponse
    from kbroker.protocol.messages.produce import ProduceRequest
    from kbroker.protocol.records import SimpleRecord, build_batch
    from tests.support.raw_client import RawKafkaClient

    p = producer(cluster)
    for i in range(3):
        p.send("t", f"x{i}".encode()).get(15)
    p.close()
    cluster.pause_fetchers(2)
    cluster.pause_fetchers(3)
    acks1 = producer(cluster, acks=1, retries=0)
    acks1.send("t", b"unreplicated").get(15)  # offset 3: LEO 4, HW 3
    acks1.close()
    topic_id = cluster.image.topic("t").id  # type: ignore[union-attr]

    def fetch(node: int, replica_id: int, offset: int, last_epoch: int, version: int = 17) -> FetchResponse.PartitionData:
        part = FetchRequest.FetchPartition(partition=0, current_leader_epoch=0, fetch_offset=offset,
                                           log_start_offset=0, partition_max_bytes=1 << 20)
        if version >= 12:
            part.last_fetched_epoch = last_epoch
        req = FetchRequest(max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=0,
                           session_epoch=-1, topics=[FetchRequest.FetchTopic(topic_id=topic_id, partitions=[part])
                                                     if version >= 13 else
                                                     FetchRequest.FetchTopic(topic="t", partitions=[part])])
        if version >= 15:
            req.replica_state = FetchRequest.ReplicaState(
                replica_id=replica_id, replica_epoch=cluster.nodes[replica_id].epoch if replica_id in cluster.nodes else -1)
        else:
            req.replica_id = replica_id
        with RawKafkaClient(f"127.0.0.1:{cluster.nodes[node].port}") as raw:
            resp = raw.request(1, version, req)
        return resp.responses[0].partitions[0]

    consumer = fetch(1, -1, 0, -1)
    follower = fetch(1, 2, 0, -1)
    assert consumer.error_code == follower.error_code == 0 and consumer.high_watermark == 3
    assert len(follower.records) > len(consumer.records)  # the follower also gets offset 3
    # A consumer at a follower: served up to the follower's HW from Fetch v11 (KIP-392's client
    # metadata), refused below.
    at_follower = fetch(2, -1, 0, -1)
    assert at_follower.error_code == 0 and at_follower.high_watermark <= 3
    assert bytes(consumer.records).startswith(bytes(at_follower.records))  # never past the follower's HW
    assert fetch(2, -1, 0, -1, version=10).error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert fetch(1, 9, 0, -1).error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER  # not a replica
    # A follower claiming epoch-0 entries up to 7 while the leader's epoch 0 ends at its LEO 4: told
    # where to truncate (diverging_epoch), no records.
    diverged = fetch(1, 3, 7, 0)
    assert diverged.error_code == 0 and (diverged.diverging_epoch.epoch, diverged.diverging_epoch.end_offset) == (0, 4)
    # An epoch the leader cannot place (newer than any it has): OFFSET_OUT_OF_RANGE, as Kafka.
    assert fetch(1, 3, 4, 5).error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert not diverged.records
    from kbroker.protocol.messages.list_offsets import ListOffsetsRequest

    def latest(replica_id: int) -> int:
        req = ListOffsetsRequest(replica_id=replica_id, isolation_level=0, topics=[ListOffsetsRequest.ListOffsetsTopic(
            name="t", partitions=[ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=-1)])])
        with RawKafkaClient(f"127.0.0.1:{cluster.nodes[1].port}") as raw:
            return int(raw.request(2, 7, req).topics[0].partitions[0].offset)

    assert (latest(-1), latest(2)) == (3, 4)  # a consumer's "latest" is the HW, a follower's the LEO
    with RawKafkaClient(f"127.0.0.1:{cluster.nodes[2].port}") as raw:
        resp = raw.request(0, 9, ProduceRequest(acks=-1, timeout_ms=1000, topic_data=[ProduceRequest.TopicProduceData(
            name="t", partition_data=[ProduceRequest.PartitionProduceData(
                index=0, records=build_batch([SimpleRecord(b"v", None, -1)]))])]))
    assert resp.responses[0].partition_responses[0].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_new_leader_deduplicates_an_idempotent_retry(cluster: ReplicaCluster) -> None:
    """Followers replay producer ids and sequences: a batch retried after a failover (the producer
    never saw the first answer) is recognised by the new leader and not written twice."""
    from kbroker.protocol.messages.produce import ProduceRequest
    from kbroker.protocol.records import SimpleRecord, build_batch
    from tests.support.raw_client import RawKafkaClient

    def produce(node: int, seq: int, value: bytes) -> tuple[int, int]:
        records = build_batch([SimpleRecord(value, None, -1)], producer_id=4242, producer_epoch=0, base_sequence=seq)
        with RawKafkaClient(f"127.0.0.1:{cluster.nodes[node].port}") as raw:
            resp = raw.request(0, 9, ProduceRequest(acks=-1, timeout_ms=10000, topic_data=[
                ProduceRequest.TopicProduceData(name="t", partition_data=[
                    ProduceRequest.PartitionProduceData(index=0, records=records)])]))
        r = resp.responses[0].partition_responses[0]
        return r.error_code, r.base_offset

    assert produce(1, 0, b"first") == (0, 0)
    assert produce(1, 1, b"second") == (0, 1)
    cluster.fail_broker(1)
    assert cluster.registration("t").leader == 2
    assert produce(2, 1, b"second") == (0, 1)  # the retry: answered with the original offset
    assert produce(2, 2, b"third") == (0, 2)
    assert cluster.log_state(2, "t")[0] == 3
    assert read_all(cluster, expect=3) == [b"first", b"second", b"third"]


def test_consumer_reads_from_a_follower_in_its_rack(tmp_path: Path) -> None:
    """KIP-392: with RackAwareReplicaSelector the leader sends a consumer that has a client.rack to the
    in-sync replica of its rack (preferred_read_replica), which serves it up to its own HW."""
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as CTopicPartition

    selector = {"replica.lag.time.max.ms": str(LAG_MS),
                "replica.selector.class": "org.apache.kafka.common.replica.RackAwareReplicaSelector"}
    with ReplicaCluster(tmp_path, 3, selector, racks={1: "rack-a", 2: "rack-b", 3: "rack-c"}) as cluster:
        cluster.create_topic("t", [1, 2, 3])
        p = producer(cluster)
        for i in range(20):
            p.send("t", f"r{i}".encode())
        p.flush(15)
        p.close()
        cluster.wait_for(lambda: cluster.log_state(3, "t")[1] == 20, what="broker 3 at HW 20")
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "kip392", "client.rack": "rack-c",
                             "enable.auto.commit": False, "auto.offset.reset": "earliest"})
        try:
            consumer.assign([CTopicPartition("t", 0, 0)])
            got: list[bytes] = []
            deadline = time.monotonic() + 20
            while len(got) < 20 and time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is not None and msg.error() is None:
                    got.append(msg.value())
        finally:
            consumer.close()
        assert got == [f"r{i}".encode() for i in range(20)]
        reads = {n: cluster.call(lambda n=n: cluster.nodes[n].services.replica_manager.follower_reads)  # type: ignore[misc]
                 for n in (2, 3)}
        assert reads[3] > 0 and reads[2] == 0  # served by the follower in the consumer's rack


def test_followers_learn_the_high_watermark_without_waiting_for_data(tmp_path: Path) -> None:
    """KIP-1166 (Fetch v18): a follower's fetch waiting at the leader returns as soon as the leader's HW
    passes the HW the follower sent, not after replica.fetch.wait.max.ms."""
    with ReplicaCluster(tmp_path, 3, {"replica.fetch.wait.max.ms": "5000"}) as cluster:
        cluster.create_topic("t", [1, 2, 3])
        p = producer(cluster)
        p.send("t", b"warm-up").get(15)
        cluster.wait_for(lambda: all(cluster.log_state(n, "t")[1] == 1 for n in (2, 3)), what="followers at HW 1")
        started = time.monotonic()
        p.send("t", b"one").get(15)
        cluster.wait_for(lambda: all(cluster.log_state(n, "t")[1] == 2 for n in (2, 3)), timeout=10,
                         what="followers at HW 2")
        assert time.monotonic() - started < 2.5  # not the 5 s fetch wait
        p.close()


def test_a_zombie_leader_cannot_acknowledge_acks_all(cluster: ReplicaCluster) -> None:
    """A leader cut off from the controller while clients still reach it: the controller elects another
    leader, the followers move to it, so the zombie's high watermark cannot pass a new write (its ISR
    change cannot reach the controller either). acks=all there times out; the write never counts, and
    the zombie truncates it when it rejoins as a follower."""
    from kbroker.protocol.messages.produce import ProduceRequest
    from kbroker.protocol.records import SimpleRecord, build_batch
    from tests.support.raw_client import RawKafkaClient

    p = producer(cluster)
    p.send("t", b"committed").get(15)
    p.close()
    cluster.wait_for(lambda: all(cluster.log_state(n, "t")[1] == 1 for n in (1, 2, 3)), what="HW 1 everywhere")
    cluster.fail_broker(1, keep_listener=True)
    assert cluster.registration("t").leader == 2
    with RawKafkaClient(f"127.0.0.1:{cluster.nodes[1].port}") as raw:
        resp = raw.request(0, 9, ProduceRequest(acks=-1, timeout_ms=1500, topic_data=[ProduceRequest.TopicProduceData(
            name="t", partition_data=[ProduceRequest.PartitionProduceData(
                index=0, records=build_batch([SimpleRecord(b"zombie", None, -1)]))])]))
    r = resp.responses[0].partition_responses[0]
    assert r.error_code == ErrorCode.REQUEST_TIMED_OUT  # appended locally, never acknowledged
    assert cluster.log_state(1, "t")[:2] == (2, 1)
    p2 = producer(cluster)
    p2.send("t", b"new leader").get(15)
    p2.close()
    cluster.restore_broker(1)
    cluster.wait_for(lambda: cluster.log_state(1, "t")[2] == [(0, 0), (1, 1)] and cluster.log_state(1, "t")[0] == 2,
                     what="zombie truncated and caught up")
    assert read_all(cluster, expect=2) == [b"committed", b"new leader"]


def test_follower_bounce_while_producing(cluster: ReplicaCluster) -> None:
    """A follower shut down cleanly and started again on its data while an acks=all producer runs: the
    producer never fails (min.insync.replicas=2 still holds), the restarted follower replays its
    metadata, catches up from its log end and rejoins the ISR with identical bytes."""
    p = producer(cluster)
    sent = 0
    for _ in range(20):
        p.send("t", f"m{sent}".encode()).get(15)
        sent += 1
    cluster.stop_broker(3)
    assert cluster.registration("t").isr == (1, 2)
    for _ in range(30):
        p.send("t", f"m{sent}".encode()).get(15)
        sent += 1
    cluster.start_broker(3)
    for _ in range(10):
        p.send("t", f"m{sent}".encode()).get(15)
        sent += 1
    p.close()
    cluster.wait_for(lambda: cluster.registration("t").isr == (1, 2, 3), what="broker 3 back in the ISR")
    cluster.wait_for(lambda: cluster.log_state(3, "t")[0] == sent, what="broker 3 caught up")
    assert log_bytes(cluster, 3) == log_bytes(cluster, 1)
    assert read_all(cluster, expect=sent) == [f"m{i}".encode() for i in range(sent)]
