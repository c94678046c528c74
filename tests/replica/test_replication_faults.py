"""Fault cycles under a running idempotent acks=all producer, in the spirit of Kafka's replication
system tests ({clean shutdown, hard failure} x {leader, follower}): no acknowledged record lost, none
duplicated, per-partition order kept. The default suite runs a few cycles; `-m slow` runs 50.

Brokers are in-process (`tests/support/replica_cluster.py`): a "hard failure" cuts a broker off
(listener closed, fetchers stopped, fenced by the stand-in controller) with its state as it was, a
"clean shutdown" closes its logs and starts it again on its data.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from tests.support.replica_cluster import ReplicaCluster

logging.getLogger("kafka").setLevel(logging.CRITICAL)

FAULTS = ("fail-leader", "stop-follower", "fail-follower", "stop-leader")


class BackgroundProducer(threading.Thread):
    """Sends "0", "1", ... with acks=all, idempotent, retrying; records what was acknowledged."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(daemon=True)
        self.producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True,
                                      retries=2**31 - 1, delivery_timeout_ms=60000, request_timeout_ms=5000,
                                      max_in_flight_requests_per_connection=5)
        self.acked: list[tuple[int, str]] = []
        self.failed: list[str] = []
        self.stopping = threading.Event()
        self._lock = threading.Lock()

    def run(self) -> None:
        i = 0
        while not self.stopping.is_set():
            value = str(i)
            future = self.producer.send("t", value.encode())
            future.add_callback(self._ok, value)
            future.add_errback(self._error, value)
            i += 1
            time.sleep(0.004)
        self.producer.flush(60)
        self.producer.close()

    def _ok(self, value: str, md: object) -> None:
        with self._lock:
            self.acked.append((md.offset, value))  # type: ignore[attr-defined]

    def _error(self, value: str, exc: BaseException) -> None:
        with self._lock:
            self.failed.append(f"{value}: {exc!r}")

    def acked_count(self) -> int:
        with self._lock:
            return len(self.acked)


def wait_progress(bg: BackgroundProducer, more: int, timeout: float = 30) -> None:
    target = bg.acked_count() + more
    deadline = time.monotonic() + timeout
    while bg.acked_count() < target:
        assert time.monotonic() < deadline, f"no produce progress: {bg.failed[-3:]}"
        time.sleep(0.05)


@pytest.mark.parametrize("cycles", [pytest.param(4, id="4-cycles"),
                                    pytest.param(50, id="50-cycles", marks=pytest.mark.slow)])
def test_fault_cycles_lose_no_acknowledged_record(tmp_path: Path, cycles: int) -> None:
    with ReplicaCluster(tmp_path, 3, {"replica.lag.time.max.ms": "1500"}) as cluster:
        cluster.create_topic("t", [1, 2, 3], {"min.insync.replicas": "2"})
        bg = BackgroundProducer(cluster.bootstrap)
        bg.start()
        wait_progress(bg, 50)
        for c in range(cycles):
            fault = FAULTS[c % len(FAULTS)]
            reg = cluster.registration("t")
            victim = reg.leader if fault.endswith("leader") else next(r for r in reg.replicas if r != reg.leader)
            if fault.startswith("fail"):
                cluster.fail_broker(victim)
            else:
                cluster.stop_broker(victim)
            assert cluster.registration("t").leader != victim
            wait_progress(bg, 30)
            if fault.startswith("fail"):
                cluster.restore_broker(victim)
            else:
                cluster.start_broker(victim)
            cluster.wait_for(lambda: len(cluster.registration("t").isr) == 3, timeout=30,
                             what=f"full ISR after {fault} of {victim} (cycle {c})")
            wait_progress(bg, 30)
        bg.stopping.set()
        bg.join(90)
        assert not bg.is_alive()
        leader = cluster.registration("t").leader
        end = cluster.log_state(leader, "t")[1]
        consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, enable_auto_commit=False)
        tp = TopicPartition("t", 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        logged: list[tuple[int, str]] = []
        deadline = time.monotonic() + 60
        while len(logged) < end and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                logged.extend((r.offset, r.value.decode()) for r in records)
        consumer.close()
        values = [v for _, v in logged]
        assert len(values) == len(set(values)), "a record was written twice"
        assert set(bg.acked) <= set(logged), "an acknowledged record is missing (or moved)"
        assert [int(v) for v in values] == sorted(int(v) for v in values), "order not kept"
        assert len(bg.acked) > 50 * (cycles + 1)
        # Two replicas stay live through every fault, so the retrying producer never gives up.
        assert not bg.failed, bg.failed[:3]
