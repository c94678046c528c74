"""Transactions across brokers, with real processes: a kbroker controller and three kbroker brokers.

`__transaction_state` (3 partitions, RF 3, min.insync.replicas 2) and a data topic of 3 partitions
(RF 3) whose leaders are the three brokers, so a transaction's coordinator leads one of its partitions
and the two others are led elsewhere: the coordinator writes one marker in-process and sends
WriteTxnMarkers to the two other leaders; those leaders verify each transactional produce with the
coordinator (AddPartitionsToTxn v4 `verify_only`, KIP-890 part 1). Clients are librdkafka's
(confluent-kafka): a transactional producer and read_committed / read_uncommitted consumers.

- `test_commit_and_abort_across_brokers`: committed and aborted transactions over the three partitions;
  read_committed reads exactly the committed records and reaches the high watermark of every partition
  (no transaction left open anywhere: every marker arrived); read_uncommitted also sees the aborted ones.
- `test_coordinator_killed_mid_stream`: transactions run while the coordinator's broker is killed with
  SIGKILL; the producer finds the new coordinator (the `__transaction_state` partition's new leader,
  which reloads the state and completes or aborts what was in flight). Nothing committed is lost,
  nothing aborted is visible, every partition's last stable offset reaches its high watermark.
- slow: the same with several kills in a row (the coordinator and partition leaders), the killed brokers
  restarted in between.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.broker import KBroker
from tests.support.kafka_cluster import new_cluster_id
from tests.support.storage_format import format_node

pytestmark = [pytest.mark.interop]

CONTROLLER_ID = 1
BROKER_IDS = (2, 3, 4)
TOPIC = "txn-data"
STATE = "__transaction_state"
STATE_PARTITIONS = 3


def _java_hash(s: str) -> int:
    h = 0
    for ch in s.encode("utf-16-be").decode("utf-16-be"):
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def _state_partition(tid: str) -> int:
    h = _java_hash(tid)
    return (0 if h == -(1 << 31) else abs(h)) % STATE_PARTITIONS


@dataclass
class Cluster:
    cluster_id: str
    workdir: Path
    controller: KBroker | None = None
    brokers: dict[int, KBroker] = field(default_factory=dict)

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values() if b.is_running())

    def leaders(self, topic: str) -> dict[int, int]:
        from confluent_kafka.admin import AdminClient

        md = AdminClient({"bootstrap.servers": self.bootstrap}).list_topics(topic, timeout=20)
        t = md.topics[topic]
        return {p: pm.leader for p, pm in t.partitions.items()}

    def wait_leaders(self, topic: str, partitions: int, alive: set[int], timeout: float = 60) -> dict[int, int]:
        deadline = time.monotonic() + timeout
        last: dict[int, int] = {}
        while time.monotonic() < deadline:
            try:
                last = self.leaders(topic)
            except Exception:  # noqa: BLE001 - a broker going away mid-request: ask again
                last = {}
            if len(last) == partitions and all(v in alive for v in last.values()):
                return last
            time.sleep(0.3)
        raise AssertionError(f"{topic}: no leaders among {alive} within {timeout}s: {last}")


def _format(cluster: Cluster, node: KBroker) -> None:
    format_node(node, cluster.cluster_id, node.overrides)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    pytest.importorskip("confluent_kafka")
    work = tmp_path_factory.mktemp("txn-cluster")
    c = Cluster(new_cluster_id(), work)
    controller = c.controller = KBroker(work / "controller")
    voters = f"{CONTROLLER_ID}@127.0.0.1:{controller.port}"
    common = {"controller.quorum.voters": voters, "controller.listener.names": "CONTROLLER",
              "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT"}
    controller.overrides = {**common, "process.roles": "controller", "node.id": str(CONTROLLER_ID),
                            "listeners": f"CONTROLLER://127.0.0.1:{controller.port}",
                            "log.dirs": str(controller.log_dir), "broker.session.timeout.ms": "3000"}
    _format(c, controller)
    for i in BROKER_IDS:
        b = c.brokers[i] = KBroker(work / f"broker-{i}")
        b.overrides = {**common, "process.roles": "broker", "node.id": str(i),
                       "listeners": f"PLAINTEXT://127.0.0.1:{b.port}", "log.dirs": str(b.log_dir),
                       "broker.heartbeat.interval.ms": "500", "replica.lag.time.max.ms": "3000",
                       "offsets.topic.replication.factor": "3", "offsets.topic.num.partitions": "3",
                       "transaction.state.log.replication.factor": "3",
                       "transaction.state.log.num.partitions": str(STATE_PARTITIONS),
                       "transaction.state.log.min.isr": "2", "min.insync.replicas": "2",
                       "group.initial.rebalance.delay.ms": "0"}
        _format(c, b)
    try:
        controller.start(timeout=60)
        for b in c.brokers.values():
            b.start(timeout=90)
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": c.bootstrap})
        # (librdkafka refuses a replica assignment here; the controller spreads the leaders itself.)
        fut = admin.create_topics([NewTopic(TOPIC, num_partitions=3, replication_factor=3,
                                            config={"min.insync.replicas": "2"})])
        fut[TOPIC].result(timeout=60)
        c.wait_leaders(TOPIC, 3, set(BROKER_IDS))
        yield c
    finally:
        # SIGKILL: a controlled shutdown of every broker at once would wait for leaders nowhere to go.
        for node in [*c.brokers.values(), controller]:
            node.kill()


def _producer(cluster: Cluster, tid: str) -> object:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": tid,
                  "transaction.timeout.ms": "30000", "message.timeout.ms": "30000",
                  "socket.timeout.ms": "10000", "topic.metadata.refresh.interval.ms": "1000"})
    p.init_transactions(60)
    return p


def _ensure_state_topic(cluster: Cluster, tid: str) -> int:
    """Create __transaction_state (FindCoordinator through a first producer) and return the id's coordinator."""
    p = _producer(cluster, tid)
    p.flush(5)  # type: ignore[attr-defined]
    leaders = cluster.wait_leaders(STATE, STATE_PARTITIONS, set(BROKER_IDS))
    return leaders[_state_partition(tid)]


def _read_all(cluster: Cluster, isolation: str, timeout: float = 60) -> tuple[list[str], dict[int, tuple[int, int]]]:
    """Every value of TOPIC under `isolation`, and each partition's (position, high watermark) at the end."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"check-{time.monotonic_ns()}",
                  "isolation.level": isolation, "enable.auto.commit": False, "auto.offset.reset": "earliest",
                  "enable.partition.eof": True})
    try:
        c.assign([TopicPartition(TOPIC, p, 0) for p in range(3)])
        values: list[str] = []
        ends: dict[int, tuple[int, int]] = {}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error() is not None:
                if m.error().code() == -191:  # _PARTITION_EOF
                    low, high = c.get_watermark_offsets(TopicPartition(TOPIC, m.partition()), timeout=10)
                    pos = m.offset()
                    ends[m.partition()] = (pos, high)
                    if len(ends) == 3 and all(pos >= high for pos, high in ends.values()):
                        return values, ends
                continue
            ends.pop(m.partition(), None)
            values.append(m.value().decode())
        return values, ends
    finally:
        c.close()


def _tid_coordinated_by(broker: int, leaders: dict[int, int], prefix: str) -> str:
    for i in range(1000):
        tid = f"{prefix}-{i}"
        if leaders[_state_partition(tid)] == broker:
            return tid
    raise AssertionError(f"no transactional id coordinated by {broker}")


def _remote_pair(cluster: Cluster, topic: str, partitions: int, prefix: str) -> tuple[int, int, int, str]:
    """(partition, its leader, a coordinator on another broker, a transactional id it coordinates):
    leaders move after the kill test, so both are chosen from the current leaders."""
    state_leaders = cluster.wait_leaders(STATE, STATE_PARTITIONS, set(BROKER_IDS))
    data_leaders = cluster.wait_leaders(topic, partitions, set(BROKER_IDS))
    for partition, leader in sorted(data_leaders.items()):
        for coordinator in sorted(set(state_leaders.values()) - {leader}):
            return partition, leader, coordinator, _tid_coordinated_by(coordinator, state_leaders, prefix)
    raise AssertionError(f"every leader on one broker: {state_leaders} {data_leaders}")


def test_commit_and_abort_across_brokers(cluster: Cluster) -> None:
    coordinator = _ensure_state_topic(cluster, "setup-0")
    state_leaders = cluster.wait_leaders(STATE, STATE_PARTITIONS, set(BROKER_IDS))
    tid = _tid_coordinated_by(coordinator, state_leaders, "across")
    data_leaders = cluster.wait_leaders(TOPIC, 3, set(BROKER_IDS))
    remote = [p for p, leader in data_leaders.items() if leader != coordinator]
    assert remote, (coordinator, data_leaders)  # markers cross brokers
    print(f"coordinator {coordinator}, partition leaders {data_leaders}")

    p = _producer(cluster, tid)
    committed, aborted = [], []
    for txn in range(8):
        p.begin_transaction()  # type: ignore[attr-defined]
        values = [f"{tid}:{txn}:{part}:{i}" for part in range(3) for i in range(5)]
        for v in values:
            p.produce(TOPIC, v.encode(), partition=int(v.split(":")[2]))  # type: ignore[attr-defined]
        p.flush(30)  # type: ignore[attr-defined]
        if txn % 3 == 1:
            p.abort_transaction(30)  # type: ignore[attr-defined]
            aborted += values
        else:
            p.commit_transaction(30)  # type: ignore[attr-defined]
            committed += values

    values, ends = _read_all(cluster, "read_committed")
    values = [v for v in values if v.startswith(f"{tid}:")]
    assert sorted(values) == sorted(committed), "read_committed must see exactly the committed records"
    assert all(pos >= high for pos, high in ends.values()), ends  # LSO == HW: every marker is in
    everything, _ = _read_all(cluster, "read_uncommitted")
    assert set(aborted) <= set(everything) and set(committed) <= set(everything)
    # The coordinator's broker sent WriteTxnMarkers to the two other leaders, which checked each
    # transactional produce with it (AddPartitionsToTxn verify_only): both show in the leaders' logs
    # only as served requests, so the proof is the data above; the coordinator's log names no failure.
    assert "Abandoning the markers" not in cluster.brokers[coordinator].log_text()


@dataclass
class Outcome:
    committed: list[str] = field(default_factory=list)
    aborted: list[str] = field(default_factory=list)
    uncertain: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def _run_transactions(cluster: Cluster, tid: str, stop: threading.Event, out: Outcome) -> None:
    """Transactions of 3 x 4 records until `stop`; every other one aborted. A transaction whose commit
    failed (the coordinator died under it) is 'uncertain': either outcome is correct, atomically."""
    from confluent_kafka import KafkaException

    p = _producer(cluster, tid)
    txn = 0
    while not stop.is_set():
        txn += 1
        values = [f"{tid}:{txn}:{part}:{i}" for part in range(3) for i in range(4)]
        commit = txn % 2 == 0
        try:
            p.begin_transaction()  # type: ignore[attr-defined]
            for v in values:
                p.produce(TOPIC, v.encode(), partition=int(v.split(":")[2]))  # type: ignore[attr-defined]
            p.flush(60)  # type: ignore[attr-defined]
            if commit:
                p.commit_transaction(60)  # type: ignore[attr-defined]
                out.committed += values
            else:
                p.abort_transaction(60)  # type: ignore[attr-defined]
                out.aborted += values
        except KafkaException as exc:
            err = exc.args[0]
            out.errors.append(str(err))
            if commit:
                out.uncertain += values
            else:
                out.aborted += values
            if err.txn_requires_abort():
                try:
                    p.abort_transaction(60)  # type: ignore[attr-defined]
                    if commit:  # the abort took: these were not committed
                        out.uncertain = out.uncertain[:-len(values)]
                        out.aborted += values
                except KafkaException as exc2:
                    out.errors.append(f"abort: {exc2.args[0]}")
                    p = _producer(cluster, tid)
            elif err.fatal() or not err.retriable():
                p = _producer(cluster, tid)  # a new incarnation: its InitProducerId completes what was open
        time.sleep(0.02)


def _check(cluster: Cluster, out: Outcome, tids: list[str]) -> None:
    values, ends = _read_all(cluster, "read_committed", timeout=90)
    values = [v for v in values if v.split(":")[0] in tids]  # the other tests' records are theirs
    seen = set(values)
    assert len(values) == len(seen), "a record read twice under read_committed"
    lost = [v for v in out.committed if v not in seen]
    assert not lost, f"committed records lost: {lost[:10]} ({len(lost)})"
    visible = [v for v in out.aborted if v in seen]
    assert not visible, f"aborted records visible: {visible[:10]} ({len(visible)})"
    assert seen <= set(out.committed) | set(out.uncertain)
    # Every uncertain transaction is all or nothing.
    by_txn: dict[str, set[str]] = {}
    for v in out.uncertain:
        by_txn.setdefault(v.rsplit(":", 2)[0], set()).add(v)
    for txn, vs in by_txn.items():
        assert vs <= seen or not (vs & seen), f"transaction {txn} partly visible"
    assert len(ends) == 3 and all(pos >= high for pos, high in ends.values()), \
        f"a transaction left open (LSO below the HW): {ends}"
    print(f"committed {len(out.committed)}, aborted {len(out.aborted)}, uncertain {len(out.uncertain)} records; "
          f"client errors: {out.errors[:5]}")


@pytest.mark.slow
def test_repeated_kills_of_coordinators_and_leaders(cluster: Cluster) -> None:
    """Six kills in a row, alternating the coordinator's broker and another partition leader, each
    broker restarted before the next kill; two producers throughout."""
    _ensure_state_topic(cluster, "setup-2")
    state_leaders = cluster.wait_leaders(STATE, STATE_PARTITIONS, set(BROKER_IDS))
    tids = [_tid_coordinated_by(b, state_leaders, f"matrix{b}") for b in sorted(set(state_leaders.values()))[:2]]
    outs = [Outcome() for _ in tids]
    stop = threading.Event()
    workers = [threading.Thread(target=_run_transactions, args=(cluster, t, stop, o), daemon=True)
               for t, o in zip(tids, outs, strict=True)]
    for w in workers:
        w.start()
    try:
        for round_ in range(6):
            state_leaders = cluster.wait_leaders(STATE, STATE_PARTITIONS, set(BROKER_IDS))
            coordinator = state_leaders[_state_partition(tids[0])]
            victim = coordinator if round_ % 2 == 0 else next(b for b in BROKER_IDS if b != coordinator)
            time.sleep(3)
            cluster.brokers[victim].kill()
            cluster.wait_leaders(STATE, STATE_PARTITIONS, set(BROKER_IDS) - {victim})
            time.sleep(4)
            cluster.brokers[victim].start(timeout=90)
            cluster.wait_leaders(TOPIC, 3, set(BROKER_IDS))
        time.sleep(3)
    finally:
        stop.set()
        for w in workers:
            w.join(120)
    merged = Outcome()
    for o in outs:
        merged.committed += o.committed
        merged.aborted += o.aborted
        merged.uncertain += o.uncertain
    assert len(merged.committed) > 0
    _check(cluster, merged, tids)


def test_produce_verified_by_a_coordinator_on_another_broker(cluster: Cluster) -> None:
    """KIP-890 part 1 across brokers, on the wire: a transactional batch sent to a partition leader that
    is not the producer's coordinator, for a partition never added to the transaction, is refused
    with INVALID_TXN_STATE (the leader asked the coordinator with AddPartitionsToTxn `verify_only`);
    once the partition is added it is accepted, and the abort's marker reaches that leader."""
    import asyncio

    from kbroker.client import NodeConnection
    from kbroker.protocol.errors import ErrorCode
    from kbroker.protocol.messages.add_partitions_to_txn import (
        AddPartitionsToTxnRequest,
        AddPartitionsToTxnResponse,
    )
    from kbroker.protocol.messages.end_txn import EndTxnRequest, EndTxnResponse
    from kbroker.protocol.messages.init_producer_id import InitProducerIdRequest, InitProducerIdResponse
    from kbroker.protocol.messages.produce import ProduceRequest, ProduceResponse
    from kbroker.protocol.records import SimpleRecord, build_batch

    _ensure_state_topic(cluster, "setup-3")
    partition, leader, coordinator, tid = _remote_pair(cluster, TOPIC, 3, "verify")

    async def run() -> None:
        coord = NodeConnection("127.0.0.1", cluster.brokers[coordinator].port)
        lead = NodeConnection("127.0.0.1", cluster.brokers[leader].port)
        await coord.connect()
        await lead.connect()
        try:
            init = await coord.request(22, InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=30000,
                                                                 producer_id=-1, producer_epoch=-1),
                                       InitProducerIdResponse)
            assert init.error_code == 0, init
            pid, epoch = init.producer_id, init.producer_epoch

            def produce(seq: int) -> ProduceRequest:
                batch = build_batch([SimpleRecord(b"verify-%d" % seq, None, int(time.time() * 1000))],
                                    producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                                    is_transactional=True)
                P = ProduceRequest
                return P(transactional_id=tid, acks=-1, timeout_ms=30000, topic_data=[P.TopicProduceData(
                    name=TOPIC, partition_data=[P.PartitionProduceData(index=partition, records=bytes(batch))])])

            refused = await lead.request(0, produce(0), ProduceResponse, version=10)
            assert refused.responses[0].partition_responses[0].error_code == ErrorCode.INVALID_TXN_STATE, refused
            # From v11 (KIP-890) the same refusal is TRANSACTION_ABORTABLE, as Kafka answers it.
            abortable = await lead.request(0, produce(0), ProduceResponse, version=11)
            assert abortable.responses[0].partition_responses[0].error_code == ErrorCode.TRANSACTION_ABORTABLE, \
                abortable
            A = AddPartitionsToTxnRequest
            added = await coord.request(24, A(v3_and_below_transactional_id=tid, v3_and_below_producer_id=pid,
                                              v3_and_below_producer_epoch=epoch, v3_and_below_topics=[
                                                  A.AddPartitionsToTxnTopic(name=TOPIC, partitions=[partition])]),
                                        AddPartitionsToTxnResponse, version=3)
            assert added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0
            accepted = await lead.request(0, produce(0), ProduceResponse, version=11)
            assert accepted.responses[0].partition_responses[0].error_code == ErrorCode.NONE, accepted
            ended = await coord.request(26, EndTxnRequest(transactional_id=tid, producer_id=pid, producer_epoch=epoch,
                                                          committed=False), EndTxnResponse, version=3)
            assert ended.error_code == 0, ended
            # The transaction is over: a late batch of it is refused again (no hanging transaction).
            late = await lead.request(0, produce(1), ProduceResponse, version=10)
            assert late.responses[0].partition_responses[0].error_code == ErrorCode.INVALID_TXN_STATE, late
        finally:
            await coord.close()
            await lead.close()

    asyncio.run(run())
    values, ends = _read_all(cluster, "read_committed")
    assert not [v for v in values if v.startswith("verify-")]
    assert all(pos >= high for pos, high in ends.values()), ends  # the ABORT marker reached the leader


@pytest.mark.java
def test_java_transactional_producer_across_brokers(cluster: Cluster) -> None:
    """kafka-clients 4.3.1 (tests/transactions/java/TxnClient.java): commit, abort, a zombie fenced by a
    new incarnation (whose InitProducerId aborts the zombie's open transaction with markers sent to
    another broker), then read_committed reads exactly the committed records; the partition's leader
    is not the coordinator."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from tests.support.java import java_unavailable_reason, run_java_main

    reason = java_unavailable_reason()
    if reason:
        pytest.skip(reason)
    topic = "java-txn-cluster"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 3, config={"min.insync.replicas": "2"})])[topic].result(60)
    _ensure_state_topic(cluster, "setup-4")
    _partition, _leader, _coordinator, tid = _remote_pair(cluster, topic, 1, "java")
    txn_client = Path(__file__).parent / "java" / "TxnClient.java"
    proc = run_java_main(str(txn_client), [cluster.bootstrap, topic, tid], timeout=240)
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "fenced ProducerFencedException" in lines, proc.stdout + proc.stderr
    assert "read c0,c1,c2,fresh" in lines, proc.stdout + proc.stderr
    described = run_java_main("kafka-transactions", ["--bootstrap-server", cluster.bootstrap, "describe",
                                                     "--transactional-id", tid], timeout=120)
    assert described.returncode == 0 and "CompleteCommit" in described.stdout, described.stdout + described.stderr


def test_coordinator_killed_mid_stream(cluster: Cluster) -> None:
    _ensure_state_topic(cluster, "setup-1")
    state_leaders = cluster.wait_leaders(STATE, STATE_PARTITIONS, set(BROKER_IDS))
    data_leaders = cluster.wait_leaders(TOPIC, 3, set(BROKER_IDS))
    victim = data_leaders[0]
    tid = _tid_coordinated_by(victim, state_leaders, "killed")
    out = Outcome()
    stop = threading.Event()
    worker = threading.Thread(target=_run_transactions, args=(cluster, tid, stop, out), daemon=True)
    worker.start()
    try:
        deadline = time.monotonic() + 60
        while len(out.committed) < 3 * 12 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(out.committed) >= 3 * 12, f"no progress before the kill: {out.errors}"
        cluster.brokers[victim].kill()
        alive = set(BROKER_IDS) - {victim}
        new_leaders = cluster.wait_leaders(STATE, STATE_PARTITIONS, alive)
        assert new_leaders[_state_partition(tid)] != victim
        before = len(out.committed)
        deadline = time.monotonic() + 90
        while len(out.committed) < before + 3 * 12 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(out.committed) >= before + 3 * 12, f"no commits after the failover: {out.errors[-5:]}"
    finally:
        stop.set()
        worker.join(120)
    _check(cluster, out, [tid])
    cluster.brokers[victim].start(timeout=90)
    cluster.wait_leaders(TOPIC, 3, set(BROKER_IDS))


@pytest.mark.java
@pytest.mark.slow  # 14 s alone, 132 s in one full CI run (the copier waited out a transaction after the
# kill); version 2 runs by default without kills in test_tv2_java.py / test_tv2_mixed.py
def test_java_copier_on_transactions_v2_through_a_coordinator_kill(cluster: Cluster) -> None:
    """Transactions version 2 across brokers under a fault: the formatted cluster finalizes
    `transaction.version` 2 (kbroker storage format's bootstrap, as Kafka 4.3.1's), so the Java client
    (kafka-tools 4.3.1's TransactionalMessageCopier, Kafka's own system-test program) runs KIP-890 part 2:
    EndTxn v5 epoch bumps, Produce v12 adding partitions implicitly through the coordinator on another
    broker. The coordinator's broker is killed with SIGKILL mid-copy and restarted; a copier that dies is
    started again, as Kafka's system test does. Under read_committed the output holds every input record
    exactly once."""
    from confluent_kafka import Consumer, KafkaError, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from kbroker.protocol.messages.api_versions import ApiVersionsRequest
    from tests.support.java import java_unavailable_reason, start_java_main
    from tests.support.raw_client import RawKafkaClient

    reason = java_unavailable_reason()
    if reason:
        pytest.skip(reason)
    with RawKafkaClient(next(b.bootstrap for b in cluster.brokers.values() if b.is_running())) as c:
        v = c.request(18, 4, ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    assert {f.name: f.max_version_level for f in v.finalized_features}.get("transaction.version") == 2
    n, src, dst = 3000, "tv2-copy-in", "tv2-copy-out"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for f in admin.create_topics([NewTopic(src, 1, 3), NewTopic(dst, 1, 3, config={"min.insync.replicas": "2"})]
                                 ).values():
        f.result(60)
    cluster.wait_leaders(dst, 1, set(BROKER_IDS))
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(n):
        p.produce(src, str(i).encode())
    assert p.flush(60) == 0
    _ensure_state_topic(cluster, "setup-tv2")
    state_leaders = cluster.wait_leaders(STATE, STATE_PARTITIONS, set(BROKER_IDS))
    out_leader = cluster.wait_leaders(dst, 1, set(BROKER_IDS))[0]
    victim = next(b for b in sorted(set(state_leaders.values())) if b != out_leader)
    tid = _tid_coordinated_by(victim, state_leaders, "tv2-copier")
    killed, killed_at = False, 0
    attempts = 0
    while attempts < 6:
        attempts += 1
        args = ["--broker-list", cluster.bootstrap, "--input-topic", src, "--input-partition", "0",
                "--output-topic", dst, "--transactional-id", tid, "--consumer-group", "tv2-copier-group",
                "--transaction-size", "100", "--max-messages", str(n), "--enable-random-aborts",
                "--use-group-metadata"]
        copier = start_java_main("org.apache.kafka.tools.TransactionalMessageCopier", args)
        try:
            head = ""
            if not killed:
                # Kill once the copier has committed some transactions but not all: its progress lines
                # ({"progress": ..., "remaining": R, ...}) come after each transaction.
                assert copier.stdout is not None
                for line in copier.stdout:
                    head += line
                    remaining = json.loads(line).get("remaining") if line.startswith("{") else None
                    if isinstance(remaining, int) and 0 < remaining < n - 300:
                        cluster.brokers[victim].kill()
                        killed_at = remaining
                        killed = True
                        break
                assert killed, f"the copier finished before the kill: {head[-2000:]}"
                cluster.wait_leaders(STATE, STATE_PARTITIONS, set(BROKER_IDS) - {victim})
                time.sleep(2)
                cluster.brokers[victim].start(timeout=90)
            stdout, _err = copier.communicate(timeout=240)
            stdout = head + stdout
        finally:
            if copier.poll() is None:
                copier.kill()
                copier.wait()
        if copier.returncode == 0 and '"remaining":0' in stdout.replace(" ", ""):
            break
    assert killed and killed_at > 0
    print(f"transactions v2 copier: broker {victim} (coordinator) killed at remaining={killed_at}; "
          f"copier runs: {attempts}")
    cluster.wait_leaders(TOPIC, 3, set(BROKER_IDS))
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"tv2-verify-{time.monotonic_ns()}",
                  "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                  "enable.partition.eof": True})
    c.subscribe([dst])
    values: list[bytes] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            if m.error().code() == KafkaError._PARTITION_EOF:
                break
            continue
        values.append(m.value())
    c.close()
    got = sorted(int(v) for v in values)
    assert got == list(range(n)), (len(got), len(set(got)))
