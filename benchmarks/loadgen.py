"""Load generators shared by the side-by-side benchmarks (run as subprocesses, pinned to a core).

Every workload talks to "a Kafka broker at BOOTSTRAP" and knows nothing of which broker it is, so
the same bytes go to kbroker and to Apache Kafka. Each prints one JSON line with its figures.

    python benchmarks/loadgen.py consume BOOTSTRAP TOPIC PARTITIONS EXPECTED_RECORDS
    python benchmarks/loadgen.py e2e BOOTSTRAP TOPIC RATE SECONDS RECORD_SIZE
    python benchmarks/loadgen.py first-produce BOOTSTRAP TOPIC TIMEOUT_S
"""

from __future__ import annotations

import json
import struct
import sys
import time


def consume(bootstrap: str, topic: str, partitions: int, expected: int) -> dict[str, float]:
    """Assign-mode librdkafka consumer reading a backlog from the beginning (P3, the sendfile path)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": "kbroker-bench-unused",  # librdkafka wants one; assign() never joins the group
        "enable.auto.commit": False,
        "fetch.max.bytes": 52428800,
        "max.partition.fetch.bytes": 1048576,
        "queued.max.messages.kbytes": 262144,
    })
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    n = 0
    nbytes = 0
    start = None
    deadline = time.monotonic() + 600
    while n < expected and time.monotonic() < deadline:
        msgs = c.consume(num_messages=10000, timeout=1.0)
        if msgs and start is None:
            start = time.monotonic()
        for m in msgs:
            if m.error():
                continue
            n += 1
            v = m.value()
            nbytes += len(v) if v else 0
    end = time.monotonic()
    c.close()
    elapsed = end - (start or end)
    return {
        "records": n,
        "seconds": elapsed,
        "records_per_s": n / elapsed if elapsed else 0.0,
        "mb_per_s": nbytes / elapsed / 1e6 if elapsed else 0.0,
    }


def e2e(bootstrap: str, topic: str, rate: int, seconds: float, size: int) -> dict[str, float]:
    """End-to-end latency at a fixed rate (P4): send time is carried in the value, read by an
    assign-mode consumer in the same process; percentiles of (receive - send)."""
    import threading

    from confluent_kafka import OFFSET_END, Consumer, Producer, TopicPartition

    lat: list[float] = []
    warm = [0]
    # The first seconds warm both sides up (a JVM's JIT, a fresh topic's first fetches): the
    # records are sent and consumed at the same rate but not measured.
    warmup_s = 3.0
    measure_from = time.time() + 3600.0  # set when the measured part starts
    total = int(rate * seconds)
    warmup_n = int(rate * warmup_s)
    done = threading.Event()
    ready = threading.Event()

    def reader() -> None:
        c = Consumer({
            "bootstrap.servers": bootstrap, "group.id": "kbroker-bench-unused",
            "enable.auto.commit": False, "fetch.wait.max.ms": 100, "fetch.min.bytes": 1,
        })
        c.assign([TopicPartition(topic, 0, OFFSET_END)])
        # Wait for the assignment to take effect before producing, or early records are skipped.
        while not c.assignment():
            c.poll(0.05)
        c.poll(0.5)
        ready.set()
        while len(lat) < total and not done.is_set():
            # poll() returns as soon as one record is there; consume(n, timeout) would hold records
            # until n arrive or the timeout passes, and that wait would be measured as latency.
            m = c.poll(0.1)
            if m is None or m.error() or not m.value():
                continue
            (sent,) = struct.unpack_from(">d", m.value(), 0)
            if sent >= measure_from:
                lat.append(time.time() - sent)
            else:
                warm[0] += 1
        c.close()

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    ready.wait(30)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": 1})
    pad = b"x" * max(0, size - 8)
    interval = 1.0 / rate
    start = time.monotonic()
    for i in range(warmup_n + total):
        if i == warmup_n:
            measure_from = time.time()
        target = start + i * interval
        now = time.monotonic()
        if target > now:
            time.sleep(target - now)
        p.produce(topic, struct.pack(">d", time.time()) + pad, partition=0)
        p.poll(0)
    p.flush(30)
    deadline = time.monotonic() + 30
    while len(lat) < total and time.monotonic() < deadline:
        time.sleep(0.05)
    done.set()
    t.join(5)
    lat.sort()

    def pct(q: float) -> float:
        return lat[min(len(lat) - 1, int(q * len(lat)))] * 1000 if lat else float("nan")

    return {"records": len(lat), "p50_ms": pct(0.50), "p99_ms": pct(0.99), "p999_ms": pct(0.999)}


def first_produce(bootstrap: str, topic: str, timeout: float) -> dict[str, float]:
    """Seconds from now until a produce is acknowledged (P5: start-up to first acknowledged produce)."""
    from confluent_kafka import Producer

    t0 = time.monotonic()
    acked: list[float] = []
    while not acked and time.monotonic() - t0 < timeout:
        p = Producer({"bootstrap.servers": bootstrap, "acks": 1, "message.timeout.ms": 2000,
                      "socket.connection.setup.timeout.ms": 1000, "reconnect.backoff.ms": 10,
                      "reconnect.backoff.max.ms": 50, "topic.metadata.refresh.interval.ms": 100})

        def cb(err: object, msg: object) -> None:
            if err is None:
                acked.append(time.monotonic())

        p.produce(topic, b"hello", callback=cb)
        p.flush(3)
    return {"seconds": (acked[0] - t0) if acked else float("nan")}


def main(argv: list[str]) -> int:
    cmd, args = argv[1], argv[2:]
    if cmd == "consume":
        out = consume(args[0], args[1], int(args[2]), int(args[3]))
    elif cmd == "e2e":
        out = e2e(args[0], args[1], int(args[2]), float(args[3]), int(args[4]))
    elif cmd == "first-produce":
        out = first_produce(args[0], args[1], float(args[2]))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
