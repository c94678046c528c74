"""Eligible leader replicas (KIP-966) through the quorum controller, on a fake clock.

Three brokers, a topic of one partition with RF 3 and min.insync.replicas 2, with
`eligible.leader.replicas.version=1` finalized at bootstrap (what Kafka 4.3's format gives a new
cluster). Sequences of fencing (missed heartbeats), controlled shutdown, restarts (clean: the
registration names the previous broker epoch; unclean: it does not) and unfencing must leave the ISR,
ELR and last-known ELR that Kafka 4.3.1's controller writes for the same sequence (its
`PartitionChangeBuilder` rules, checked case by case against Kafka's own builder in
test_partition_change_elr_vs_kafka.py, driven as Kafka's `ReplicationControlManager` drives it):
- ISR shrinking below min ISR moves the removed members into the ELR;
- the last ISR member fenced: the ISR becomes empty, no leader, the ELR holds everyone, the last
  leader is remembered in last-known ELR;
- an ELR member unfenced is elected cleanly (no RECOVERING state) and becomes the ISR;
- a broker restarting after an unclean shutdown leaves the ELR; a clean restart stays in it;
- a min.insync.replicas change writes ClearElrRecord; with the feature off nothing of this happens.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from kbroker.controller.local_controller import bootstrap_records
from kbroker.controller.quorum_controller import QuorumController
from kbroker.metadata.image import NO_LEADER, LeaderRecoveryState, PartitionRegistration
from kbroker.protocol.errors import KafkaError
from kbroker.protocol.messages.broker_registration import BrokerRegistrationRequest
from kbroker.protocol.metadata_records import ClearElrRecord
from tests.controller.quorum_fakes import CLUSTER_ID, FakeClock, InMemoryRaftLog, heartbeat, new_controller

SESSION_MS = 9000
JAVA_SOURCE = Path(__file__).resolve().parent / "java" / "PartitionChangeElrDiff.java"


def _registration(broker_id: int, incarnation: int = 0, previous_epoch: int = -1) -> BrokerRegistrationRequest:
    def feature(name: str, lo: int, hi: int) -> BrokerRegistrationRequest.Feature:
        return BrokerRegistrationRequest.Feature(name=name, min_supported_version=lo, max_supported_version=hi)

    return BrokerRegistrationRequest(
        broker_id=broker_id, cluster_id=CLUSTER_ID,
        incarnation_id=uuid.UUID(int=(incarnation << 16) + 0xB0 + broker_id),
        listeners=[BrokerRegistrationRequest.Listener(name="PLAINTEXT", host="localhost", port=9090 + broker_id,
                                                      security_protocol=0)],
        features=[feature("metadata.version", 7, 30), feature("group.version", 0, 1),
                  feature("eligible.leader.replicas.version", 0, 1)],
        log_dirs=[uuid.UUID(int=0xD1500 + broker_id)], previous_broker_epoch=previous_epoch)


class Cluster:
    def __init__(self, elr: bool, min_isr: int = 2) -> None:
        self.clock = FakeClock()
        self.controller: QuorumController
        self.raft: InMemoryRaftLog
        self.controller, self.raft = new_controller(
            self.clock, min_insync_replicas=min_isr, bootstrap=tuple(bootstrap_records(0, 1 if elr else 0)))
        self.epochs: dict[int, int] = {}
        self.incarnations = {1: 0, 2: 0, 3: 0}
        for b in (1, 2, 3):
            self.register(b)
            self.heartbeat(b)

    def register(self, b: int, previous_epoch: int = -1) -> None:
        op = self.controller.register_broker_request(_registration(b, self.incarnations[b], previous_epoch))
        self.raft.commit()
        self.epochs[b] = op.result().epoch

    def heartbeat(self, b: int, *, want_shut_down: bool = False) -> None:
        self.controller.broker_heartbeat(heartbeat(b, self.epochs[b], self.raft.end_offset,
                                                   want_shut_down=want_shut_down))
        self.raft.commit()

    def create(self, name: str = "t") -> None:
        async def run() -> None:
            task = asyncio.ensure_future(self.controller.create_topic(name, 1, 3))
            await asyncio.sleep(0)
            self.raft.commit()
            await task

        asyncio.run(run())

    def partition(self, name: str = "t") -> PartitionRegistration:
        t = self.controller.committed_image.topic(name)
        assert t is not None
        return t.partitions[0]

    def fence(self, victim: int, alive: list[int]) -> None:
        """`victim` stops heartbeating; the others go on until its session expires."""
        for _ in range(5):
            self.clock.advance(2000)
            for b in alive:
                self.heartbeat(b)
            self.controller.poll()
            self.raft.commit()
        assert self.controller.committed_image.cluster.brokers[victim].fenced

    def restart(self, b: int, *, clean: bool) -> None:
        """A new incarnation of `b` registers (naming its last epoch if it shut down cleanly) and unfences."""
        previous = self.epochs[b] if clean else -1
        self.incarnations[b] += 1
        self.register(b, previous)
        self.heartbeat(b)

    def state(self) -> tuple[int, tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        p = self.partition()
        return p.leader, p.isr, p.elr, p.last_known_elr


def _fence_down_to_nothing(c: Cluster) -> tuple[int, int, int]:
    """Fence the replicas one by one in assignment order, the leader (the first replica) last."""
    r0, r1, r2 = c.partition().replicas
    assert c.partition().leader == r0
    alive = [1, 2, 3]
    for b in (r1, r2, r0):
        alive.remove(b)
        c.fence(b, alive)
    return r0, r1, r2


def _sorted(*brokers: int) -> tuple[int, ...]:
    return tuple(sorted(brokers))


def test_fencing_moves_isr_into_elr_and_an_elr_member_is_elected_cleanly() -> None:
    c = Cluster(elr=True)
    assert c.controller.is_elr_enabled()
    c.create()
    r0, r1, r2 = c.partition().replicas
    assert c.state() == (r0, (r0, r1, r2), (), ())
    _fence_down_to_nothing(c)
    # After the first fencing the ISR is at min ISR: no ELR. After the second, below: r2 is in the ELR.
    # After the last: ISR empty, no leader, ELR = everyone who was in the ISR, last leader remembered.
    assert c.state() == (NO_LEADER, (), _sorted(r0, r2), (r0,))
    # r2 (an ELR member) comes back first: elected cleanly, the whole ISR, out of the ELR.
    c.heartbeat(r2)
    p = c.partition()
    assert (p.leader, p.isr, p.elr, p.last_known_elr) == (r2, (r2,), (r0,), ())
    assert p.leader_recovery_state == LeaderRecoveryState.RECOVERED
    # r1 (never in the ELR: fenced while the ISR was still at min ISR) unfenced: not a leader candidate,
    # and it joins the ISR only through the leader's AlterPartition.
    c.heartbeat(r1)
    assert c.state() == (r2, (r2,), (r0,), ())


def test_isr_steps_into_elr_one_at_a_time() -> None:
    c = Cluster(elr=True)
    c.create()
    r0, r1, r2 = c.partition().replicas
    c.fence(r1, [r0, r2])
    assert c.state() == (r0, (r0, r2), (), ())
    c.fence(r2, [r0])
    assert c.state() == (r0, (r0,), (r2,), ())


def test_without_the_feature_the_last_member_stays_in_the_isr() -> None:
    c = Cluster(elr=False)
    assert not c.controller.is_elr_enabled()
    c.create()
    r0, r1, r2 = _fence_down_to_nothing(c)
    assert c.state() == (NO_LEADER, (r0,), (), ())
    c.heartbeat(r2)  # not in the ISR: no clean election without ELR
    assert c.state() == (NO_LEADER, (r0,), (), ())


def test_unclean_restart_leaves_the_elr_and_a_clean_one_stays() -> None:
    c = Cluster(elr=True)
    c.create()
    r0, r1, r2 = _fence_down_to_nothing(c)
    assert c.state() == (NO_LEADER, (), _sorted(r0, r2), (r0,))
    # r2 restarts without a clean-shutdown epoch: it may have lost records, it leaves the ELR.
    c.restart(r2, clean=False)
    assert c.state() == (NO_LEADER, (), (r0,), (r0,))
    # r0 restarts cleanly: it stays in the ELR and is elected from it.
    c.restart(r0, clean=True)
    p = c.partition()
    assert (p.leader, p.isr, p.elr, p.last_known_elr) == (r0, (r0,), (), ())
    assert p.leader_recovery_state == LeaderRecoveryState.RECOVERED


def test_controlled_shutdown_of_every_broker_keeps_them_in_the_elr() -> None:
    c = Cluster(elr=True)
    c.create()
    r0, r1, r2 = c.partition().replicas
    running = [1, 2, 3]
    for b in (r1, r2, r0):  # the leader last
        running.remove(b)
        c.heartbeat(b, want_shut_down=True)
        for other in running:
            c.heartbeat(other)
        c.heartbeat(b, want_shut_down=True)
        assert c.controller.committed_image.cluster.brokers[b].fenced  # shut down
    assert c.state() == (NO_LEADER, (), _sorted(r0, r2), (r0,))
    c.restart(r2, clean=True)
    assert c.state() == (r2, (r2,), (r0,), ())


def test_min_isr_change_writes_clear_elr_and_broker_level_min_isr_is_refused() -> None:
    c = Cluster(elr=True)
    c.create()
    r0, r1, r2 = c.partition().replicas
    c.fence(r1, [r0, r2])
    c.fence(r2, [r0])
    assert c.state() == (r0, (r0,), (r2,), ())

    async def alter() -> None:
        task = asyncio.ensure_future(
            c.controller.incremental_alter_topic_configs("t", [("min.insync.replicas", 0, "1")]))
        await asyncio.sleep(0)
        c.raft.commit()
        await task

    asyncio.run(alter())
    written = [r for batch in c.raft.batches[-1:] for r in batch.records]
    assert ClearElrRecord(topic_name="t") in written
    assert c.state() == (r0, (r0,), (), ())

    with pytest.raises(KafkaError, match="Broker-level min.insync.replicas cannot be altered while ELR is enabled"):
        c.controller.configuration.alter_broker_configs(False, {"min.insync.replicas": "1"})
    # The bootstrap with ELR on wrote the cluster-level min.insync.replicas=2 (Kafka's activation
    # records): change it to 3.
    assert c.controller.image.configs.cluster_broker_config()["min.insync.replicas"] == "2"
    records = c.controller.configuration.alter_broker_configs(True, {"min.insync.replicas": "3"}).records
    assert records[-1] == ClearElrRecord()


# -- the same sequences through Apache Kafka's own PartitionChangeBuilder ---------------------------

SCENARIOS = [
    test_fencing_moves_isr_into_elr_and_an_elr_member_is_elected_cleanly,
    test_isr_steps_into_elr_one_at_a_time,
    test_without_the_feature_the_last_member_stays_in_the_isr,
    test_unclean_restart_leaves_the_elr_and_a_clean_one_stays,
    test_controlled_shutdown_of_every_broker_keeps_them_in_the_elr,
]


def _ids(values: object) -> str:
    items = list(values)  # type: ignore[call-overload]
    return ",".join(str(v) for v in items) if items else "_"


def _fmt(values: list[int] | None) -> str:
    return "null" if values is None else "[" + ",".join(str(v) for v in values) + "]"


def _record_steps(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """Patch the builder the controller uses so every partition change it builds is kept as (case line in
    PartitionChangeElrDiff.java's input format, the record kbroker wrote, printed as that harness prints)."""
    from kbroker.controller import replication_control
    from kbroker.controller.partition_change import PartitionChangeBuilder

    steps: list[tuple[str, str]] = []

    class Recording(PartitionChangeBuilder):
        def build(self):  # type: ignore[no-untyped-def]
            p = self.partition
            name = f"step{len(steps)}"
            unclean = "-" if self.unclean_shutdown_replicas is None else _ids(self.unclean_shutdown_replicas)
            case = " ".join([
                name, _ids(p.replicas), _ids(p.isr), str(p.leader), _ids(p.elr), _ids(p.last_known_elr),
                _ids(r for r in p.replicas if self.is_acceptable_leader(r)), self.election.name, str(self.min_isr),
                "true" if self.eligible_leader_replicas_enabled else "false",
                "true" if self.use_last_known_leader_in_balanced_recovery else "false", unclean,
                _ids(self.target_isr)])
            r = super().build()
            out = f"{name} none" if r is None else (
                f"{name} leader={r.leader} isr={_fmt(r.isr)} lrs={r.leader_recovery_state} "
                f"elr={_fmt(r.eligible_leader_replicas)} lkelr={_fmt(r.last_known_elr)}")
            steps.append((case, out))
            return r

    monkeypatch.setattr(replication_control, "PartitionChangeBuilder", Recording)
    return steps


def test_every_step_is_recorded_and_changes_something(monkeypatch: pytest.MonkeyPatch) -> None:
    steps = _record_steps(monkeypatch)
    for scenario in SCENARIOS:
        scenario()
    assert len(steps) >= 15
    assert any("elr=[" in out and "elr=[]" not in out for _, out in steps)


@pytest.mark.java
def test_every_partition_change_matches_kafkas_builder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from tests.support.java import java_unavailable_reason, run_java_main

    reason = java_unavailable_reason()
    if reason:
        pytest.skip(reason)
    steps = _record_steps(monkeypatch)
    for scenario in SCENARIOS:
        scenario()
    (tmp_path / "cases.txt").write_text("\n".join(case for case, _ in steps) + "\n", encoding="utf-8")
    proc = run_java_main(str(JAVA_SOURCE), [str(tmp_path / "cases.txt")], timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    theirs = proc.stdout.splitlines()
    assert len(theirs) == len(steps)
    diff = [(case, a, b) for (case, b), a in zip(steps, theirs, strict=True) if a != b]
    assert not diff, "\n".join(f"case:    {c}\nkafka:   {a}\nkbroker: {b}" for c, a, b in diff)
