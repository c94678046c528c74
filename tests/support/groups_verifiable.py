"""Kafka's `VerifiableConsumer` (kafka-clients 4.3.1) as a group member under test, and the checks
that read its event stream.

Owns: starting `org.apache.kafka.tools.VerifiableConsumer` JVMs, collecting the JSON events each one
prints (partitions_assigned / partitions_revoked / records_consumed / offsets_committed /
shutdown_complete) with the time they were read, stopping them cleanly (SIGTERM: the JVM's shutdown
hook closes the consumer, which leaves the group) or killing them (SIGKILL), and reconstructing from
the events who owned which partition when; plus the background producer and broker settings the
Java group tests share. It starts no broker (tests/support/broker.py does).

Events carry the JVM's `System.currentTimeMillis()`; every process runs on this machine, so the
timestamps of different members share one clock and ownership intervals can be compared across
members (millisecond resolution: a revocation and an assignment in the same millisecond do not
overlap).
"""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from tests.support.java import DEFAULT_JVM_OPTS, start_java_main

# C1 only: these JVMs live for seconds, start-up time matters more than peak speed on 2 cores.
JVM_OPTS: tuple[str, ...] = (*DEFAULT_JVM_OPTS, "-Xshare:auto")

ASSIGNORS: dict[str, str] = {
    "range": "org.apache.kafka.clients.consumer.RangeAssignor",
    "round-robin": "org.apache.kafka.clients.consumer.RoundRobinAssignor",
    "sticky": "org.apache.kafka.clients.consumer.StickyAssignor",
    "cooperative-sticky": "org.apache.kafka.clients.consumer.CooperativeStickyAssignor",
}


@dataclass
class Ownership:
    """One member's hold on one partition: from its partitions_assigned until its revocation, its
    shutdown or its kill (None while it still holds it)."""

    member: str
    partition: int
    start_ms: int
    end_ms: int | None = None


@dataclass
class VerifiableMember:
    """One VerifiableConsumer JVM and the events it printed."""

    name: str
    proc: subprocess.Popen[str]
    stderr_path: Path
    events: list[dict[str, Any]] = field(default_factory=list)
    killed_at_ms: int | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    reader: threading.Thread | None = None
    noise: list[str] = field(default_factory=list)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            line = line.strip()
            if not line.startswith("{"):
                if line:
                    self.noise.append(line)
                continue
            event = json.loads(line)
            with self.lock:
                self.events.append(event)

    def snapshot(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.events)

    def named(self, name: str) -> list[dict[str, Any]]:
        return [e for e in self.snapshot() if e["name"] == name]

    def owned(self) -> set[int]:
        """Partitions held now, from the assigned/revoked events (eager and incremental alike:
        an eager member revokes everything before it is assigned its new set)."""
        owned: set[int] = set()
        for e in self.snapshot():
            if e["name"] == "partitions_assigned":
                owned |= {p["partition"] for p in e["partitions"]}
            elif e["name"] == "partitions_revoked":
                owned -= {p["partition"] for p in e["partitions"]}
            elif e["name"] == "shutdown_complete":
                owned = set()
        return owned if self.killed_at_ms is None else set()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def terminate(self, timeout: float = 30.0) -> None:
        """SIGTERM: VerifiableConsumer's shutdown hook wakes the poll loop and closes the consumer."""
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout)
        if self.reader is not None:
            self.reader.join(10)

    def kill(self) -> None:
        """SIGKILL: no LeaveGroup, no commit; the coordinator notices at session expiry."""
        self.proc.kill()
        self.killed_at_ms = int(time.time() * 1000)
        self.proc.wait(30)
        if self.reader is not None:
            self.reader.join(10)

    def stderr_tail(self, lines: int = 30) -> str:
        text = self.stderr_path.read_text(errors="replace") if self.stderr_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


def start_verifiable_consumer(
    name: str,
    bootstrap: str,
    topic: str,
    group: str,
    workdir: Path,
    *,
    group_protocol: str = "classic",
    assignor: str | None = None,
    remote_assignor: str | None = None,
    session_timeout_ms: int | None = None,
    group_instance_id: str | None = None,
    auto_commit: bool = False,
    properties: dict[str, str] | None = None,
) -> VerifiableMember:
    """Start one VerifiableConsumer subscribed to `topic` in `group`; its events are collected in
    the background. `properties` go to a --command-config file (client.id is set to `name`)."""
    props = {"client.id": name, **(properties or {})}
    config = workdir / f"{name}.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    args = [
        "--bootstrap-server", bootstrap, "--topic", topic, "--group-id", group,
        "--group-protocol", group_protocol, "--reset-policy", "earliest", "--command-config", str(config),
    ]
    if assignor is not None:
        args += ["--assignment-strategy", ASSIGNORS.get(assignor, assignor)]
    if remote_assignor is not None:
        args += ["--group-remote-assignor", remote_assignor]
    if session_timeout_ms is not None:
        args += ["--session-timeout", str(session_timeout_ms)]
    if group_instance_id is not None:
        args += ["--group-instance-id", group_instance_id]
    if auto_commit:
        args += ["--enable-autocommit"]
    stderr_path = workdir / f"{name}.stderr"
    with open(stderr_path, "w") as err:
        proc = start_java_main("kafka-verifiable-consumer", args, jvm_opts=JVM_OPTS, stderr=err.fileno())
    member = VerifiableMember(name, proc, stderr_path)
    member.reader = threading.Thread(target=member._read, name=f"events-{name}", daemon=True)
    member.reader.start()
    return member


def wait_for(cond: Callable[[], bool], timeout: float, what: Callable[[], str], settle: float = 0.0) -> None:
    """Wait until `cond` holds (continuously for `settle` seconds); else fail saying `what()`."""
    deadline = time.monotonic() + timeout
    met_at: float | None = None
    while time.monotonic() < deadline:
        if cond():
            met_at = met_at if met_at is not None else time.monotonic()
            if time.monotonic() - met_at >= settle:
                return
        else:
            met_at = None
        time.sleep(0.05)
    raise AssertionError(f"not within {timeout}s: {what()}")


def ownership_intervals(members: Sequence[VerifiableMember]) -> list[Ownership]:
    """Every (member, partition) hold, from the events (and the kill time of killed members)."""
    result: list[Ownership] = []
    for m in members:
        open_: dict[int, Ownership] = {}
        for e in m.snapshot():
            ts = int(e["timestamp"])
            if e["name"] == "partitions_assigned":
                for p in e["partitions"]:
                    part = int(p["partition"])
                    assert part not in open_, f"{m.name} assigned partition {part} it already holds: {e}"
                    open_[part] = Ownership(m.name, part, ts)
            elif e["name"] == "partitions_revoked":
                for p in e["partitions"]:
                    own = open_.pop(int(p["partition"]), None)
                    if own is not None:
                        own.end_ms = ts
                        result.append(own)
            elif e["name"] == "shutdown_complete":
                for own in open_.values():
                    own.end_ms = ts
                    result.append(own)
                open_ = {}
        for own in open_.values():
            own.end_ms = m.killed_at_ms
            result.append(own)
    return result


def overlapping_ownership(intervals: Sequence[Ownership]) -> list[tuple[Ownership, Ownership]]:
    """Pairs of different members holding the same partition at the same moment."""
    bad = []
    by_partition: dict[int, list[Ownership]] = {}
    for own in intervals:
        by_partition.setdefault(own.partition, []).append(own)
    for owns in by_partition.values():
        owns.sort(key=lambda o: o.start_ms)
        for i, a in enumerate(owns):
            for b in owns[i + 1:]:
                if a.member == b.member:
                    continue
                a_end = a.end_ms if a.end_ms is not None else 2**62
                if b.start_ms < a_end:
                    bad.append((a, b))
    return bad


@dataclass
class Consumption:
    """Every consumed offset per partition, with who consumed it, in the order consumed."""

    by_offset: dict[tuple[int, int], list[str]] = field(default_factory=dict)
    # Offsets each member committed successfully (partition -> highest committed "next offset").
    committed: dict[str, dict[int, int]] = field(default_factory=dict)
    failed_commits: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    # Re-consumptions of a record that an earlier consumer had already committed past at that moment:
    # the group's committed offset moved beyond the record, so nobody should have read it again.
    unexplained_duplicates: list[tuple[int, int, list[str]]] = field(default_factory=list)


def consumption(members: Sequence[VerifiableMember]) -> Consumption:
    """Merge the members' records_consumed / offsets_committed events in timestamp order."""
    result = Consumption()
    tagged = sorted(
        ((int(e["timestamp"]), i, m.name, e) for m in members for i, e in enumerate(m.snapshot())),
        key=lambda t: (t[0], t[1]),
    )
    for _, _, name, e in tagged:
        if e["name"] == "records_consumed":
            for s in e["partitions"]:
                count, lo, hi = int(s["count"]), int(s["minOffset"]), int(s["maxOffset"])
                # No compaction and no transactions: a batch is a contiguous offset range.
                assert count == hi - lo + 1, f"{name}: non-contiguous batch {s}"
                part = int(s["partition"])
                for off in range(lo, hi + 1):
                    who = result.by_offset.setdefault((part, off), [])
                    if any(result.committed.get(earlier, {}).get(part, 0) > off for earlier in who):
                        result.unexplained_duplicates.append((part, off, [*who, name]))
                    who.append(name)
        elif e["name"] == "offsets_committed":
            if e.get("success", True):
                done = result.committed.setdefault(name, {})
                for o in e["offsets"]:
                    done[int(o["partition"])] = max(done.get(int(o["partition"]), 0), int(o["offset"]))
            else:
                result.failed_commits.append((name, e))
    return result


# Broker settings of the Java group tests (test_groups_java.py, test_groups_migration.py): both
# protocols' session timeouts at SESSION_TIMEOUT_MS, a 500 ms KIP-848 heartbeat.
SESSION_TIMEOUT_MS = 3000
# A new group rebalances at once: the delay would only slow each join down, it changes no check here.
FAST_GROUP_OVERRIDES = {
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "5",
    "group.min.session.timeout.ms": "1000",
    # KIP-848 members take their session timeout and heartbeat interval from the broker.
    "group.consumer.session.timeout.ms": str(SESSION_TIMEOUT_MS),
    "group.consumer.min.session.timeout.ms": "1000",
    "group.consumer.heartbeat.interval.ms": "500",
    "group.consumer.min.heartbeat.interval.ms": "500",
}


class BackgroundProducer:
    """confluent-kafka producing small records round-robin over the partitions until stopped; the
    acknowledged (partition, offset) pairs are what the group must consume."""

    def __init__(self, bootstrap: str, topic: str, partitions: int = 6, per_tick: int = 12,
                 tick: float = 0.1) -> None:
        self.topic = topic
        self.partitions = partitions
        self.per_tick = per_tick
        self.tick = tick
        self.acked: set[tuple[int, int]] = set()
        self.errors: list[Any] = []
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
        self._stop = threading.Event()
        self._n = 0
        self._thread = threading.Thread(target=self._run, name="background-producer", daemon=True)

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors.append(err)
        else:
            self.acked.add((int(msg.partition()), int(msg.offset())))

    def produce_batch(self) -> None:
        for _ in range(self.per_tick):
            self.producer.produce(self.topic, value=f"r{self._n}".encode(), partition=self._n % self.partitions,
                                  on_delivery=self._delivered)
            self._n += 1
        self.producer.poll(0)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.produce_batch()
            self._stop.wait(self.tick)

    def start(self) -> BackgroundProducer:
        self._thread.start()
        return self

    def halt(self) -> None:
        """Stop producing (idempotent; also what a failing test's cleanup calls)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10)

    def stop(self) -> None:
        """Stop producing and wait until every record sent so far is acknowledged."""
        self.halt()
        assert self.producer.flush(30) == 0
        assert not self.errors, self.errors
