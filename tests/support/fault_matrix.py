"""Kafka's replication fault matrix (system test `replication_test.py`) for three replicating kbroker brokers.

Owns what every run of the matrix shares, whoever the controllers are: Kafka's `VerifiableProducer`
(idempotent, acks=all, retries) writing throughout, `VerifiableConsumer` reading everything back,
the check (zero acknowledged records lost, none twice, each partition's log in the producer's order),
the broker faults -- {clean shutdown, kill -9, bounce} x {partition 0's leader, a follower} -- and the
loop that injects one fault per cycle and heals it while the producer keeps writing.

A cycle is `(kind, role)`; `inject(kind, role)` makes the fault and returns the callable that heals it
(restart what is down, wait until the cluster is whole again). `broker_fault` is the broker matrix;
`tests/support/kbroker_quorum_cluster.py` adds the controller faults of a kbroker controller quorum.

Users: tests/cluster/test_replication_kbroker_cluster.py (Apache Kafka's controller) and
tests/cluster/test_replication_kbroker_quorum_matrix.py (kbroker's own controllers).
"""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from tests.support.broker import KBroker
from tests.support.groups_verifiable import JVM_OPTS
from tests.support.java import run_java_main, start_java_main
from tests.support.replicated_cluster import PartitionState, metadata_state

TOPIC = "verified"
KINDS = ("stop", "kill", "bounce")  # clean shutdown (SIGTERM), hard kill (SIGKILL), clean bounce
BROKER_MATRIX = [(kind, role) for kind in KINDS for role in ("leader", "follower")]

Heal = Callable[[], None]
Inject = Callable[[str, str], Heal]


class ReplicatedBrokers:
    """Three (or more) kbroker brokers replicating `topic` (the matrix's, `TOPIC` unless a test gives
    each run its own: the VerifiableProducer numbers its values from 0, so two runs on one topic would
    read as duplicates), as clients see them through Metadata."""

    def __init__(self, brokers: Mapping[int, KBroker], workdir: Path, topic: str = TOPIC) -> None:
        self.brokers = dict(brokers)
        self.workdir = workdir
        self.topic = topic

    @property
    def ids(self) -> tuple[int, ...]:
        return tuple(self.brokers)

    def broker(self, node_id: int) -> KBroker:
        return self.brokers[node_id]

    def live(self) -> list[str]:
        return [kb.bootstrap for kb in self.brokers.values() if kb.is_running()]

    @property
    def bootstrap(self) -> str:
        return ",".join(kb.bootstrap for kb in self.brokers.values())

    def state(self, topic: str | None = None, partition: int = 0) -> PartitionState:
        for b in self.live():
            st = metadata_state(b, topic or self.topic, partition)
            if st is not None:
                return st
        raise AssertionError("no live broker answered Metadata")

    def wait_isr(self, members: set[int], topic: str | None = None, partitions: int = 3,
                 timeout: float = 90) -> None:
        topic = topic or self.topic
        for p in range(partitions):
            deadline = time.monotonic() + timeout
            while True:
                st = next((s for b in self.live() if (s := metadata_state(b, topic, p)) is not None), None)
                if st is not None and set(st.isr) == members and st.leader in members:
                    break
                assert time.monotonic() < deadline, f"{topic}-{p}: ISR {sorted(members)} not reached: {st}"
                time.sleep(0.3)

    def create(self, topic: str, assignment: str, configs: dict[str, str]) -> None:
        args = ["--bootstrap-server", self.live()[0], "--create", "--topic", topic, "--replica-assignment", assignment]
        for k, v in configs.items():
            args += ["--config", f"{k}={v}"]
        proc = run_java_main("kafka-topics", args, timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr


class VerifiableProducer:
    """kafka-verifiable-producer (idempotent, acks=all, retries as the system tests set them)."""

    def __init__(self, bootstrap: str, topic: str, workdir: Path, throughput: int = 200) -> None:
        config = workdir / "vp.properties"
        config.write_text("enable.idempotence=true\nretries=2147483647\ndelivery.timeout.ms=120000\n"
                          "metadata.max.age.ms=2000\n")
        self.stderr = open(workdir / "vp.stderr", "w")  # noqa: SIM115 - closed in stop()
        self.proc = start_java_main("kafka-verifiable-producer", [
            "--bootstrap-server", bootstrap, "--topic", topic, "--throughput", str(throughput),
            "--acks", "-1", "--producer.config", str(config)], jvm_opts=JVM_OPTS, stderr=self.stderr.fileno())
        self.acked: list[tuple[int, int, str]] = []  # (partition, offset, value)
        self.errors: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if not line.startswith("{"):
                continue
            ev = json.loads(line)
            if ev.get("name") == "producer_send_success":
                self.acked.append((ev["partition"], ev["offset"], ev["value"]))
            elif ev.get("name") == "producer_send_error":
                self.errors.append(f"{ev.get('exception')}: {ev.get('message')}")

    def wait_acked(self, more: int, timeout: float = 90) -> None:
        target = len(self.acked) + more
        deadline = time.monotonic() + timeout
        while len(self.acked) < target:
            assert self.proc.poll() is None, "the VerifiableProducer exited"
            assert time.monotonic() < deadline, f"{len(self.acked)} of {target} acknowledged; errors {self.errors[-3:]}"
            time.sleep(0.2)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # its shutdown hook closes (flushes) the producer
            try:
                self.proc.wait(120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.reader.join(10)
        self.stderr.close()


def consume_all(bootstrap: str, topic: str, expected: int, workdir: Path, timeout: float = 120) -> list[tuple[int, int, str]]:
    """kafka-verifiable-consumer --verbose from the earliest offset until `expected` records arrived."""
    stderr = open(workdir / "vc.stderr", "w")  # noqa: SIM115
    proc = start_java_main("kafka-verifiable-consumer", [
        "--bootstrap-server", bootstrap, "--topic", topic, "--group-id", f"verify-{time.monotonic_ns()}",
        "--reset-policy", "earliest", "--verbose", "--max-messages", str(expected)], jvm_opts=JVM_OPTS,
        stderr=stderr.fileno())
    got: list[tuple[int, int, str]] = []
    timer = threading.Timer(timeout, proc.kill)
    timer.start()
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("{"):
                ev = json.loads(line)
                if ev.get("name") == "record_data":
                    got.append((ev["partition"], ev["offset"], ev["value"]))
        proc.wait(30)
    finally:
        timer.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        stderr.close()
    return got


def check_no_loss(acked: list[tuple[int, int, str]], consumed: list[tuple[int, int, str]]) -> None:
    log = {(p, o): v for p, o, v in consumed}
    lost = [a for a in acked if log.get((a[0], a[1])) != a[2]]
    assert not lost, f"{len(lost)} acknowledged records lost or moved, e.g. {lost[:5]}"
    values = [v for _, _, v in consumed]
    assert len(values) == len(set(values)), "duplicates"
    for p in {a[0] for a in acked}:
        offsets = [o for q, o, _ in acked if q == p]
        assert offsets == sorted(offsets), f"partition {p}: acknowledged out of order"
        in_log = [int(v) for q, _, v in sorted(consumed) if q == p]
        assert in_log == sorted(in_log), f"partition {p}: the log is out of the producer's order"


def broker_fault(cl: ReplicatedBrokers, kind: str, role: str) -> Heal:
    """Inject one fault on partition 0's leader or one of its followers; return what heals it."""
    st = cl.state()
    victim = st.leader if role == "leader" else next(r for r in st.isr if r != st.leader)
    kb = cl.broker(victim)
    if kind == "bounce":
        assert kb.stop(60) == 0
        kb.start(timeout=90)
    else:
        if kind == "kill":
            kb.kill()
        else:
            assert kb.stop(60) == 0
        cl.wait_isr(set(cl.ids) - {victim})  # the controller fenced it (kill) or it shut down in a controlled way

    def heal() -> None:
        if not kb.is_running():
            kb.start(timeout=90)
        cl.wait_isr(set(cl.ids))

    return heal


def run_matrix(cl: ReplicatedBrokers, cycles: list[tuple[str, str]], workdir: Path,
               inject: Inject | None = None) -> VerifiableProducer:
    """The producer writes throughout; each cycle injects a fault, waits for 100 more acknowledgements
    (the cluster serves with the fault in place), heals it, waits for 100 more; then everything
    acknowledged is read back and checked."""
    do = inject or (lambda kind, role: broker_fault(cl, kind, role))
    vp = VerifiableProducer(cl.bootstrap, cl.topic, workdir)
    try:
        vp.wait_acked(200)
        for i, (kind, role) in enumerate(cycles):
            began = time.monotonic()
            heal = do(kind, role)
            vp.wait_acked(100)
            heal()
            vp.wait_acked(100)
            print(f"cycle {i + 1}/{len(cycles)} {kind} {role}: {time.monotonic() - began:.1f}s, "
                  f"{len(vp.acked)} acknowledged", flush=True)
    finally:
        vp.stop()
    assert vp.acked, vp.errors
    consumed = consume_all(cl.bootstrap, cl.topic, len(vp.acked), workdir)
    check_no_loss(vp.acked, consumed)
    return vp


__all__ = ["BROKER_MATRIX", "KINDS", "TOPIC", "ReplicatedBrokers", "VerifiableProducer", "broker_fault",
           "check_no_loss", "consume_all", "run_matrix"]
