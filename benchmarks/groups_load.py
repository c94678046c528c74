"""Consumer-group load for the rebalance benchmark: librdkafka consumers joining and leaving a group.

Owns the client side of `benchmarks/bench_rebalance.py`: it runs as a subprocess pinned to the load
core and, like `benchmarks/loadgen.py`, only knows "a Kafka broker at BOOTSTRAP", so kbroker and
Apache Kafka see the same requests. It prints one JSON line with its figures (milliseconds).

    python benchmarks/groups_load.py --bootstrap HOST:PORT --topic T --partitions 12 \
        [--group-protocol classic|consumer] [--assignors A,B] \
        [--heartbeat-ms 250] [--first-joins 1] [--iterations 5]

Per assignor, on a fresh group:
  first_join  3 consumers subscribe back to back on an empty group, until all 3 hold a balanced
              assignment (this is where `group.initial.rebalance.delay.ms` shows);
  join        a 4th consumer's subscribe() until all 4 members hold their new assignment;
  leave       the 4th consumer's close() until the 3 others hold theirs again.
Each is timed twice: by the clients (the on_assign/on_revoke callbacks; the last one that makes the
assignment complete: every partition owned once, sizes differing by at most one) and by the broker
(AdminClient describe_consumer_groups polled every POLL_S: state Stable, the expected members, the
same complete assignment). The client figure is the headline; the broker figure cross-checks it.

Each consumer is a librdkafka handle driven by its own thread (poll() releases the GIL); a consumer
fetches metadata before it is timed, so the figure is the group protocol, not the TCP connect.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

POLL_S = 0.02  # broker-view polling period: the granularity of the *_broker_ms figures
PHASE_TIMEOUT_S = 60.0


def balanced(owned: list[set[int]], partitions: int) -> bool:
    """Every partition owned by exactly one member, and member sizes differ by at most one."""
    if not owned:
        return False
    sizes = [len(s) for s in owned]
    union: set[int] = set().union(*owned)
    return sum(sizes) == partitions == len(union) and max(sizes) - min(sizes) <= 1


class Tracker:
    """The members' assignments as their rebalance callbacks report them, and when they balanced.

    Assign adds and revoke removes, which is right for both protocols: an eager revoke hands back
    everything and the next assign the full new set; a cooperative one hands over the increments.
    """

    def __init__(self, partitions: int) -> None:
        self.partitions = partitions
        self.cond = threading.Condition()
        self.owned: dict[str, set[int]] = {}
        self.expect: list[str] = []
        self.balanced_at: float | None = None

    def phase(self, members: list[str]) -> None:
        with self.cond:
            self.expect, self.balanced_at = list(members), None
            self._check(time.monotonic())

    def update(self, name: str, add: list[int], remove: list[int]) -> None:
        now = time.monotonic()
        with self.cond:
            s = self.owned.setdefault(name, set())
            s.difference_update(remove)
            s.update(add)
            self._check(now)

    def drop(self, name: str) -> None:
        with self.cond:
            self.owned.pop(name, None)

    def _check(self, now: float) -> None:
        if self.balanced_at is None and self.expect and all(n in self.owned for n in self.expect) \
                and balanced([self.owned[n] for n in self.expect], self.partitions):
            self.balanced_at = now
            self.cond.notify_all()

    def wait(self, timeout: float) -> float:
        with self.cond:
            if not self.cond.wait_for(lambda: self.balanced_at is not None, timeout):
                raise TimeoutError(f"members {self.expect} not balanced after {timeout}s: {self.owned}")
            assert self.balanced_at is not None
            return self.balanced_at


class Member:
    """One consumer in the group, polled by its own thread."""

    def __init__(self, name: str, conf: dict[str, Any], topic: str, tracker: Tracker) -> None:
        from confluent_kafka import Consumer

        self.name, self.topic, self.tracker = name, topic, tracker
        self.consumer = Consumer({**conf, "client.id": name})
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.consumer.list_topics(topic, timeout=30)  # bootstrap connection and metadata, untimed

    def _parts(self, tps: list[Any]) -> list[int]:
        return [tp.partition for tp in tps if tp.topic == self.topic]

    def subscribe(self) -> float:
        """Subscribe and start polling; returns the monotonic time just before subscribe()."""
        t0 = time.monotonic()
        self.consumer.subscribe(
            [self.topic],
            on_assign=lambda _c, tps: self.tracker.update(self.name, self._parts(tps), []),
            on_revoke=lambda _c, tps: self.tracker.update(self.name, [], self._parts(tps)),
            on_lost=lambda _c, tps: self.tracker.update(self.name, [], self._parts(tps)))
        self._thread.start()
        return t0

    def _run(self) -> None:
        while not self._stop.is_set():
            msg = self.consumer.poll(0.05)
            err = msg.error() if msg is not None else None
            if err is not None and not err.retriable():
                print(f"{self.name}: {err}", file=sys.stderr)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.consumer.close()  # revokes (through the callbacks) and sends LeaveGroup
        self.tracker.drop(self.name)


class BrokerWatch:
    """Polls describe_consumer_groups until the broker shows the group Stable and balanced."""

    def __init__(self, admin: Any, group: str, members: int, partitions: int) -> None:
        self.admin, self.group, self.members, self.partitions = admin, group, members, partitions
        self.seen_at: float | None = None
        self.last = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        from confluent_kafka import ConsumerGroupState

        while not self._stop.is_set():
            try:
                d = self.admin.describe_consumer_groups([self.group], request_timeout=5)[self.group].result()
            except Exception as e:  # noqa: BLE001 - a failed poll is retried; the last error is reported
                self.last = repr(e)
                self._stop.wait(POLL_S)
                continue
            owned = [{tp.partition for tp in m.assignment.topic_partitions} for m in d.members]
            self.last = f"{d.state} {[sorted(s) for s in owned]}"
            if d.state == ConsumerGroupState.STABLE and len(owned) == self.members \
                    and balanced(owned, self.partitions):
                self.seen_at = time.monotonic()
                return
            self._stop.wait(POLL_S)

    def wait(self, timeout: float) -> float:
        self._thread.join(timeout)
        self._stop.set()
        if self.seen_at is None:
            raise TimeoutError(f"broker never showed {self.group} Stable with {self.members} balanced "
                               f"members within {timeout}s; last: {self.last}")
        return self.seen_at


def consumer_conf(bootstrap: str, group: str, assignor: str, protocol: str, heartbeat_ms: int) -> dict[str, Any]:
    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "group.protocol": protocol,
        "enable.auto.commit": False,  # nothing is consumed; keeps commits out of the revocation path
        "auto.offset.reset": "earliest",
    }
    if protocol == "classic":
        # KIP-848 moves the assignor and the heartbeat interval to the broker; librdkafka rejects them.
        conf.update({"partition.assignment.strategy": assignor, "heartbeat.interval.ms": heartbeat_ms,
                     "session.timeout.ms": 45000})
    else:
        conf["group.remote.assignor"] = assignor
    return conf


def _close_all(members: list[Member]) -> None:
    with ThreadPoolExecutor(len(members) or 1) as ex:
        list(ex.map(Member.close, members))


def run_assignor(bootstrap: str, topic: str, partitions: int, assignor: str, protocol: str,
                 heartbeat_ms: int, first_joins: int, iterations: int) -> dict[str, list[float]]:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    out: dict[str, list[float]] = {k: [] for k in ("first_join_ms", "first_join_broker_ms", "join_ms",
                                                   "join_broker_ms", "leave_ms", "leave_broker_ms")}

    def timed(key: str, tracker: Tracker, watch: BrokerWatch, t0: float) -> None:
        out[f"{key}_ms"].append((tracker.wait(PHASE_TIMEOUT_S) - t0) * 1000)
        out[f"{key}_broker_ms"].append((watch.wait(PHASE_TIMEOUT_S) - t0) * 1000)

    for fj in range(first_joins):
        group = f"rebalance-{assignor}-{uuid.uuid4().hex[:8]}"
        conf = consumer_conf(bootstrap, group, assignor, protocol, heartbeat_ms)
        tracker = Tracker(partitions)
        three = [Member(f"m{i}", conf, topic, tracker) for i in range(3)]
        tracker.phase([m.name for m in three])
        watch = BrokerWatch(admin, group, 3, partitions)
        t0 = time.monotonic()
        for m in three:
            m.subscribe()
        timed("first_join", tracker, watch, t0)
        if fj < first_joins - 1:
            _close_all(three)
            continue
        for _ in range(iterations):
            time.sleep(0.5)  # let every member's heartbeat cycle settle after the last rebalance
            fourth = Member("m3", conf, topic, tracker)
            tracker.phase([m.name for m in three] + ["m3"])
            watch = BrokerWatch(admin, group, 4, partitions)
            timed("join", tracker, watch, fourth.subscribe())
            time.sleep(0.5)
            tracker.phase([m.name for m in three])
            watch = BrokerWatch(admin, group, 3, partitions)
            t0 = time.monotonic()
            fourth.close()
            timed("leave", tracker, watch, t0)
        _close_all(three)
    return out


def warm_up(bootstrap: str, topic: str, partitions: int, protocol: str, heartbeat_ms: int) -> None:
    """One throwaway group first: the first FindCoordinator creates __consumer_offsets (50 partitions
    on Kafka, seconds of work), which is broker start-up, not rebalance latency."""
    tracker = Tracker(partitions)
    m = Member("warm", consumer_conf(bootstrap, f"warm-{uuid.uuid4().hex[:8]}",
                                     "range" if protocol == "classic" else "uniform", protocol, heartbeat_ms),
               topic, tracker)
    tracker.phase(["warm"])
    m.subscribe()
    tracker.wait(120)
    m.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--partitions", type=int, default=12)
    ap.add_argument("--assignors", default=None,
                    help="classic: client assignors (range,cooperative-sticky); consumer: broker ones (uniform,range)")
    ap.add_argument("--group-protocol", default="classic", choices=("classic", "consumer"))
    ap.add_argument("--heartbeat-ms", type=int, default=250)
    ap.add_argument("--first-joins", type=int, default=1)
    ap.add_argument("--iterations", type=int, default=5)
    a = ap.parse_args(argv)
    if a.assignors is None:
        a.assignors = "range,cooperative-sticky" if a.group_protocol == "classic" else "uniform,range"
    warm_up(a.bootstrap, a.topic, a.partitions, a.group_protocol, a.heartbeat_ms)
    res = {asg: run_assignor(a.bootstrap, a.topic, a.partitions, asg, a.group_protocol, a.heartbeat_ms,
                             a.first_joins, a.iterations)
           for asg in a.assignors.split(",")}
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
