"""Replication between kbroker and Apache Kafka brokers under an Apache Kafka 4.3.1 controller (issue 12).

Cluster: Kafka controller (node 1), Kafka brokers 2 and 3, kbroker broker 4. Two topics with RF 3 and
min.insync.replicas 2, placed explicitly: `lead-kb` (replicas 4,2,3: kbroker leads, both Kafka
brokers follow it) and `lead-kafka` (replicas 2,4,3: Kafka leads, kbroker follows). An idempotent
acks=all producer runs throughout while each broker is, in turn, killed -9 or stopped cleanly and
restarted; at each step `kafka-topics --describe` must show the ISR shrink (the dead broker leaves it
when the controller fences it, or at controlled shutdown) and expand (the restarted broker catches up
and its leader adds it back through AlterPartition). At the end every acknowledged record is read back
at its acknowledged offset, in order, without duplicates, and the three replicas' logs hold the same
record batches byte for byte (same offsets and leader epochs) -- Kafka's followers copying kbroker's
batches and kbroker copying Kafka's.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.support.java import run_java_main
from tests.support.kafka_cluster import KafkaCluster, KafkaNode, cluster_unavailable_reason
from tests.support.replicated_cluster import (
    BackgroundProducer,
    PartitionState,
    describe,
    epoch_checkpoint,
    log_batches,
    read_partition,
    wait_partition,
)

pytestmark = [pytest.mark.interop, pytest.mark.java]

KAFKA_A, KAFKA_B, KB = 2, 3, 4
TOPICS = {"lead-kb": (KB, KAFKA_A, KAFKA_B), "lead-kafka": (KAFKA_A, KB, KAFKA_B)}
BROKER_OVERRIDES = {"replica.lag.time.max.ms": "6000", "min.insync.replicas": "2"}


class Mixed:
    def __init__(self, cluster: KafkaCluster) -> None:
        self.cluster = cluster

    def node(self, node_id: int) -> KafkaNode:
        return next(n for n in self.cluster.kafka_brokers if n.node_id == node_id)

    @property
    def kb(self):  # noqa: ANN201 - tests.support.broker.KBroker
        return self.cluster.kbrokers[0]

    def live(self) -> list[str]:
        out = [n.bootstrap for n in self.cluster.kafka_brokers if n.proc is not None]
        if self.kb.is_running():
            out.append(self.kb.bootstrap)
        return out

    def data_dir(self, node_id: int, topic: str) -> object:
        base = self.kb.log_dir if node_id == KB else self.node(node_id).data
        return base / f"{topic}-0"

    def down(self, node_id: int, how: str) -> None:
        if node_id == KB:
            if how == "kill":
                self.kb.kill()
            else:
                assert self.kb.stop(60) == 0
        elif how == "kill":
            self.node(node_id).kill()
        else:
            self.node(node_id).stop(60)

    def up(self, node_id: int) -> None:
        if node_id == KB:
            self.kb.start(timeout=90)
        else:
            self.node(node_id).start()


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mixed]:
    reason = cluster_unavailable_reason()
    if reason:
        pytest.skip(reason)
    c = KafkaCluster(tmp_path_factory.mktemp("repl-mixed"), controller_overrides={"broker.session.timeout.ms": "3000"})
    try:
        c.start_controllers()
        c.add_kafka_broker(KAFKA_A, BROKER_OVERRIDES).start()
        c.add_kafka_broker(KAFKA_B, BROKER_OVERRIDES).start()
        c.kbroker(KB, BROKER_OVERRIDES).start(timeout=90)
        for t, r in TOPICS.items():
            proc = run_java_main("kafka-topics", ["--bootstrap-server", c.kbrokers[0].bootstrap, "--create",
                                                  "--topic", t, "--replica-assignment", ":".join(map(str, r)),
                                                  "--config", "min.insync.replicas=2"], timeout=120)
            assert proc.returncode == 0, proc.stdout + proc.stderr
        yield Mixed(c)
    finally:
        c.stop_all()


def _isr_is(expected: set[int], leader_in: set[int] | None = None):  # noqa: ANN202
    return lambda s: set(s.isr) == expected and (leader_in is None or s.leader in leader_in)


def _check_describe(m: Mixed, expected_isr: dict[str, set[int]]) -> dict[tuple[str, int], PartitionState]:
    """`kafka-topics --describe` through a live broker shows the expected ISR for both topics."""
    states = describe(m.live()[0], TOPICS)
    for t, isr in expected_isr.items():
        st = states[(t, 0)]
        assert set(st.isr) == isr, (t, st)
        assert st.replicas == TOPICS[t], (t, st)
        assert st.leader in isr, (t, st)
    return states


def _wait_in_sync(m: Mixed, members: set[int], timeout: float = 90) -> None:
    for t in TOPICS:
        wait_partition(m.live, t, _isr_is(members), timeout=timeout, what=f"ISR {sorted(members)}")


def test_initial_placement_and_follower_logs_match(mixed: Mixed) -> None:
    """Leaders land on each kind; after acks=all produce every replica's log is the leader's, byte for byte."""
    _wait_in_sync(mixed, {KAFKA_A, KAFKA_B, KB})
    states = _check_describe(mixed, {t: {KAFKA_A, KAFKA_B, KB} for t in TOPICS})
    assert states[("lead-kb", 0)].leader == KB and states[("lead-kafka", 0)].leader == KAFKA_A
    producer = BackgroundProducer(mixed.kb.bootstrap, list(TOPICS)).start()
    try:
        producer.wait_acked(400)
    finally:
        producer.stop()
    assert not producer.failed and not producer.fatal, (producer.failed[:5], producer.fatal)
    _assert_replicas_identical(mixed)


def _assert_replicas_identical(m: Mixed, timeout: float = 60) -> None:
    """Every replica holds the same batches (offsets, leader epochs, bytes) and the same epoch cache."""
    for t in TOPICS:
        deadline = time.monotonic() + timeout
        while True:
            logs = {n: log_batches(m.data_dir(n, t)) for n in TOPICS[t]}  # type: ignore[arg-type]
            ends = {n: (b[-1].last_offset if b else -1) for n, b in logs.items()}
            if len(set(ends.values())) == 1 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        leader_log = logs[TOPICS[t][0]]
        assert leader_log, t
        for n, batches in logs.items():
            assert [(b.base_offset, b.leader_epoch, b.last_offset) for b in batches] == \
                [(b.base_offset, b.leader_epoch, b.last_offset) for b in leader_log], (t, n, ends)
            assert [b.raw for b in batches] == [b.raw for b in leader_log], (t, n)
        caches = {n: epoch_checkpoint(m.data_dir(n, t)) for n in TOPICS[t]}  # type: ignore[arg-type]
        assert len({tuple(c) for c in caches.values()}) == 1, (t, caches)


def _fault_cycle(m: Mixed, producer: BackgroundProducer, victim: int, how: str) -> None:
    everyone = {KAFKA_A, KAFKA_B, KB}
    m.down(victim, how)
    rest = everyone - {victim}
    # The controller fences the dead broker (session timeout) or it left at controlled shutdown: the
    # ISR shrinks to the survivors and a survivor leads.
    _wait_in_sync(m, rest, timeout=60)
    _check_describe(m, {t: rest for t in TOPICS})
    producer.wait_acked(100, timeout=90)
    m.up(victim)
    # It truncates to its leader's log by leader epoch, catches up, and the leader adds it back.
    _wait_in_sync(m, everyone, timeout=120)
    _check_describe(m, {t: everyone for t in TOPICS})
    producer.wait_acked(100, timeout=90)


def _run_faults(m: Mixed, faults: list[tuple[int, str]]) -> None:
    _wait_in_sync(m, {KAFKA_A, KAFKA_B, KB})
    producer = BackgroundProducer(m.live()[0], list(TOPICS), interval=0.02).start()
    try:
        producer.wait_acked(100)
        for victim, how in faults:
            _fault_cycle(m, producer, victim, how)
    finally:
        producer.stop()
    assert not producer.fatal, producer.fatal
    _check_every_acked_record(m, producer)
    _assert_replicas_identical(m)


def _check_every_acked_record(m: Mixed, producer: BackgroundProducer) -> None:
    for t in TOPICS:
        acked = [a for a in producer.acked if a.topic == t]
        log = read_partition(m.live()[0], t)
        by_offset = dict(log)
        values = [v for _, v in log if v.startswith(producer.run.encode())]
        assert len(values) == len(set(values)), f"{t}: duplicates in the log"
        for a in acked:
            assert by_offset.get(a.offset) == a.value, f"{t}: acknowledged {a} lost or moved"
        # In order: the producer's sequence numbers increase with the offset.
        assert values == sorted(values), f"{t}: out of order"
        assert acked, t


def test_each_broker_dies_in_turn_and_every_acknowledged_record_survives(mixed: Mixed) -> None:
    """kill -9 the kbroker leader, then the Kafka leader (kbroker takes over); clean stop of kbroker."""
    _run_faults(mixed, [(KB, "kill"), (KAFKA_A, "kill"), (KB, "stop")])


@pytest.mark.slow
def test_longer_fault_sequence(mixed: Mixed) -> None:
    faults = [(n, how) for how in ("kill", "stop") for n in (KB, KAFKA_A, KAFKA_B)] * 2
    _run_faults(mixed, faults)
