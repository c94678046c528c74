"""franz-go's GroupTransactSession (issue 14): a consume-transform-produce pipeline of several members in
one consumer group on kbroker, each with its own transactional id (KIP-447), copies every input record
exactly once to a read_committed reader, across deliberately aborted transactions, a member killed with
SIGKILL in the middle of a transaction and the rebalances that follow.

The member is tests/support/go/txnsession (its own Go module, franz-go v1.22.3 as kbench, go.sum
committed), built by tests/support/go/build.sh into .cache/go-tests. It prints what it did as JSON
lines; the checks read them and the topics:

- the finalized `transaction.version` from ApiVersions is 2 and franz-go ran transactions version 2:
  no AddPartitionsToTxn and no AddOffsetsToTxn request, and (for a member that was never killed) the
  producer epoch equals the number of transactions it ended (EndTxn v5 bumps it once each);
- read_committed output holds each input value exactly once, read_uncommitted holds more (the aborted
  copies: the deliberate aborts and the killed member's open transaction);
- the group's committed offsets are the input's end offsets.

The `reference` variant runs the same program and checks against Apache Kafka 4.3.1; the slow variant
against three kbroker brokers of a KRaft cluster (RF 3, min.insync.replicas 2).
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.broker import KBroker
from tests.support.java import java_unavailable_reason
from tests.support.reference_kafka import start_reference_kafka
from tests.transactions.test_transactions_cluster import Cluster, cluster  # noqa: F401 - the slow variant's fixture

pytestmark = [pytest.mark.interop]

ROOT = Path(__file__).resolve().parents[2]
PARTITIONS = 4
RECORDS = 1200
GROUP = "franz-etl"
IN, OUT = "franz-in", "franz-out"


def _binary() -> str:
    if shutil.which("go") is None:
        pytest.skip("no Go toolchain to build tests/support/go/txnsession (go >= 1.26)")
    out = subprocess.run(["bash", str(ROOT / "tests" / "support" / "go" / "build.sh"), "txnsession"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines()[-1]


class Member:
    """One txnsession process; its JSON events are collected by a reader thread."""

    def __init__(self, binary: str, bootstrap: str, txn_id: str, workdir: Path) -> None:
        self.txn_id = txn_id
        self.events: list[dict[str, object]] = []
        self._lock = threading.Lock()
        self.stderr_path = workdir / f"{txn_id}-{time.monotonic_ns()}.stderr"
        self._stderr = open(self.stderr_path, "wb")  # noqa: SIM115 - closed in wait()
        self.proc = subprocess.Popen(
            [binary, "-bootstrap", bootstrap, "-group", GROUP, "-in", IN, "-out", OUT, "-txn-id", txn_id,
             "-poll-max", "20", "-abort-every", "4", "-hold-ms", "100", "-session-ms", "6000", "-log", "info"],
            stdout=subprocess.PIPE, stderr=self._stderr)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._lock:
                self.events.append(json.loads(line))

    def of(self, kind: str) -> list[dict[str, object]]:
        with self._lock:
            return [e for e in self.events if e["event"] == kind]

    def wait_for(self, pred: object, what: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if pred():  # type: ignore[operator]
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.01)
        raise AssertionError(f"{self.txn_id}: no {what}; exit {self.proc.poll()}\n{self.stderr_tail()}")

    def stderr_tail(self) -> str:
        return self.stderr_path.read_text(errors="replace")[-4000:]

    def wait(self, timeout: float = 30.0) -> int:
        code = self.proc.wait(timeout)
        self._reader.join(10)
        self._stderr.close()
        return code


@pytest.fixture
def members() -> Iterator[list[Member]]:
    started: list[Member] = []
    yield started
    for m in started:
        if m.proc.poll() is None:
            m.proc.kill()
        m.proc.wait(30)


def _setup_topics(bootstrap: str, replication_factor: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(IN, PARTITIONS, replication_factor),
                                  NewTopic(OUT, PARTITIONS, replication_factor)]).values():
        f.result(60)
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(RECORDS):
        p.produce(IN, f"in-{i:05d}".encode(), partition=i % PARTITIONS)
    assert p.flush(60) == 0


def _read(bootstrap: str, isolation: str) -> list[bytes]:
    """Every record of OUT under the isolation level, from the beginning until 3 s without any."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{isolation}", "enable.auto.commit": False,
                  "isolation.level": isolation, "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(OUT, p, 0) for p in range(PARTITIONS)])
    keys: list[bytes] = []
    idle_since = time.monotonic()
    deadline = time.monotonic() + 60
    while time.monotonic() - idle_since < 3 and time.monotonic() < deadline:
        for m in c.consume(500, 0.2):
            assert m.error() is None, m.error()
            keys.append(m.key())
            idle_since = time.monotonic()
    c.close()
    return keys


def _committed(bootstrap: str) -> list[int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False})
    offsets = c.committed([TopicPartition(IN, p) for p in range(PARTITIONS)], timeout=10)
    c.close()
    return [tp.offset for tp in offsets]


def _pipeline(bootstrap: str, workdir: Path, members: list[Member], replication_factor: int = 1,
              timeout: float = 45.0) -> None:
    binary = _binary()
    _setup_topics(bootstrap, replication_factor)
    started = time.monotonic()

    def start(txn_id: str) -> Member:
        m = Member(binary, bootstrap, txn_id, workdir)
        members.append(m)
        return m

    a, b, c = start("franz-a"), start("franz-b"), start("franz-c")
    # b commits a few transactions, then dies with SIGKILL while its next one is open.
    b.wait_for(lambda: sum(1 for e in b.of("end") if e["committed"]) >= 2 and
               len(b.of("produced")) > len(b.of("end")), "second commit and an open transaction")
    b.proc.send_signal(signal.SIGKILL)
    b.wait()
    killed_at = time.time()
    owned = {int(p) for e in b.of("assigned") for p in e["partitions"].get(IN, [])}  # type: ignore[union-attr]
    assert b.of("exit") == [], "b was killed, it did not exit"
    # Its session times out and the survivors take its partitions over (a rebalance), while its
    # transaction is still open; then it comes back under the same transactional id, which fences
    # the dead incarnation and aborts that transaction, and joins (another rebalance).
    a.wait_for(lambda: any(float(e["t"]) > killed_at for e in a.of("assigned") + c.of("assigned")),  # type: ignore[arg-type]
               "rebalance after the kill", timeout=30)
    b2 = start("franz-b")

    deadline = started + timeout
    ends = [0] * PARTITIONS
    cons = Consumer({"bootstrap.servers": bootstrap, "group.id": "ends"})
    for p in range(PARTITIONS):
        ends[p] = cons.get_watermark_offsets(TopicPartition(IN, p), timeout=10)[1]
    cons.close()
    assert sum(ends) == RECORDS
    while _committed(bootstrap) != ends:
        assert time.monotonic() < deadline, f"group offsets {_committed(bootstrap)} never reached {ends}"
        for m in (a, c, b2):
            assert m.proc.poll() is None, f"{m.txn_id} exited {m.proc.poll()}: {m.stderr_tail()}"
        time.sleep(0.5)
    for m in (a, c, b2):
        m.proc.send_signal(signal.SIGTERM)
    for m in (a, c, b2):
        assert m.wait() == 0, m.stderr_tail()

    # What the members report.
    for m in (a, b, c, b2):
        ready = m.of("ready")
        assert ready and ready[0]["transaction_version"] == 2, (m.txn_id, ready)
    totals = {m.txn_id + ("'" if m is b2 else ""): m.of("exit")[0] for m in (a, c, b2)}
    for name, ex in totals.items():
        assert ex["add_partitions_requests"] == 0 and ex["add_offsets_requests"] == 0, (name, ex)
    for m in (a, c):  # never killed: one epoch bump per ended transaction (version 1 keeps 0)
        ex = totals[m.txn_id]
        assert ex["producer_epoch"] == ex["transactions"] == len(m.of("end")), (m.txn_id, ex)
    deliberate = sum(int(ex["deliberate_aborts"]) for ex in totals.values()) + sum(  # type: ignore[call-overload]
        1 for e in b.of("end") if not e["want_commit"])
    assert deliberate >= 2, totals
    # Each input record was committed by exactly one transaction of one member.
    b_committed = sum(int(e["records"]) for e in b.of("end") if e["committed"])  # type: ignore[call-overload]
    assert sum(int(ex["records_committed"]) for ex in totals.values()) + b_committed == RECORDS, totals  # type: ignore[call-overload]
    assert owned, "the killed member owned no partition"

    # What the topics hold.
    committed = Counter(_read(bootstrap, "read_committed"))
    expected = {f"in-{i:05d}".encode() for i in range(RECORDS)}
    assert set(committed) == expected, (len(set(committed)), len(expected))
    dups = {k: n for k, n in committed.items() if n != 1}
    assert not dups, f"{len(dups)} inputs copied more than once, e.g. {list(dups.items())[:5]}"
    uncommitted = _read(bootstrap, "read_uncommitted")
    assert len(uncommitted) > RECORDS, "no aborted copy in the log: aborts did not happen"
    assert _committed(bootstrap) == ends
    print(f"members: {json.dumps(totals)}; read_uncommitted {len(uncommitted)} records, "
          f"read_committed {sum(committed.values())}; {time.monotonic() - started:.1f}s")


@pytest.mark.timeout(180)
def test_group_transact_session_exactly_once_on_kbroker(kbroker_factory: object, tmp_path: Path,
                                                        members: list[Member]) -> None:
    broker: KBroker = kbroker_factory()  # type: ignore[operator]
    _pipeline(broker.bootstrap, tmp_path, members)


@pytest.mark.slow
@pytest.mark.reference
@pytest.mark.java
@pytest.mark.timeout(300)
def test_group_transact_session_exactly_once_on_kafka(tmp_path: Path, members: list[Member]) -> None:
    """The same program and checks against Apache Kafka 4.3.1: what is asserted of kbroker is Kafka's.
    Slow-marked: Kafka's start-up makes it about 85 s on the shared 2-core machine (the pipeline itself
    took 36 s there, kbroker's 24 s)."""
    reason = java_unavailable_reason()
    if reason:
        pytest.skip(reason)
    bootstrap, stop = start_reference_kafka(tmp_path, overrides={"transaction.state.log.replication.factor": "1",
                                                                 "transaction.state.log.min.isr": "1"})
    try:
        _pipeline(bootstrap, tmp_path, members)
    finally:
        for m in members:
            if m.proc.poll() is None:
                m.proc.kill()
        stop()



@pytest.mark.slow
@pytest.mark.timeout(420)
def test_group_transact_session_exactly_once_on_a_kbroker_cluster(cluster: Cluster, tmp_path: Path,  # noqa: F811
                                                                  members: list[Member]) -> None:
    """Three kbroker brokers under a kbroker controller (tests/transactions/test_transactions_cluster.py's
    cluster: `__transaction_state` and `__consumer_offsets` at RF 3, min.insync.replicas 2): the topics at
    RF 3, the members' coordinators, group coordinator and partition leaders spread over the brokers."""
    _pipeline(cluster.bootstrap, tmp_path, members, replication_factor=3, timeout=150.0)
