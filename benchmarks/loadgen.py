"""The start-up probe of the side-by-side benchmarks (P5), run as a subprocess pinned to a core.

It talks to "a Kafka broker at BOOTSTRAP" and knows nothing of which broker it is, and prints one
JSON line. The throughput and latency loads are native (benchmarks/instruments.py): the Python
consume and e2e generators that were here measured the Python client, not the brokers (issue 17).

    python benchmarks/loadgen.py first-produce BOOTSTRAP TOPIC TIMEOUT_S
    python benchmarks/loadgen.py first-produce-on-go BOOTSTRAP TOPIC TIMEOUT_S

`first-produce-on-go` is P5's form: the probe imports its client, prints `ready`, and starts producing
when a line arrives on its standard input. The caller sends that line just before it starts the broker,
so the probe's own start (a Python interpreter and librdkafka: 0.1 to 0.2 s, the same for both brokers)
is not counted as the broker's, and the probe is already trying when the broker starts listening (no
polling interval between the two). It prints the `time.monotonic()` of the first acknowledgement
(CLOCK_MONOTONIC: one clock for every process on the machine) and its own start-up time.
"""

from __future__ import annotations

import json
import sys
import time


def first_produce(bootstrap: str, topic: str, timeout: float) -> dict[str, float]:
    """Seconds from now until a produce is acknowledged (P5: start-up to first acknowledged produce)."""
    from confluent_kafka import Producer

    t0 = time.monotonic()
    acked: list[float] = []
    while not acked and time.monotonic() - t0 < timeout:
        # The probe's own waits are its resolution: reconnects while the port is closed, and the Metadata
        # retries while the new topic has no leader yet (retry.backoff.ms, 100 ms by default, was up to a
        # tenth of a second of kbroker's figure), every 10 ms for both brokers.
        p = Producer({"bootstrap.servers": bootstrap, "acks": 1, "message.timeout.ms": 2000,
                      "socket.connection.setup.timeout.ms": 1000, "reconnect.backoff.ms": 10,
                      "reconnect.backoff.max.ms": 50, "topic.metadata.refresh.interval.ms": 100,
                      "retry.backoff.ms": 10, "retry.backoff.max.ms": 50})

        def cb(err: object, msg: object) -> None:
            if err is None:
                acked.append(time.monotonic())

        p.produce(topic, b"hello", callback=cb)
        p.flush(3)
    return {"seconds": (acked[0] - t0) if acked else float("nan")}


def first_produce_on_go(bootstrap: str, topic: str, timeout: float, began: float) -> dict[str, float]:
    """`first_produce` from the moment a line arrives on stdin; the acknowledgement's monotonic time."""
    import confluent_kafka  # noqa: F401  (imported before `ready`: the probe's start is not the broker's)

    ready_s = time.monotonic() - began
    print("ready", flush=True)
    sys.stdin.readline()
    go = time.monotonic()
    seconds = first_produce(bootstrap, topic, timeout)["seconds"]
    return {"acked_at": go + seconds, "probe_ready_s": ready_s}


def main(argv: list[str]) -> int:
    began = time.monotonic()
    cmd, args = argv[1], argv[2:]
    if cmd == "first-produce":
        out = first_produce(args[0], args[1], float(args[2]))
    elif cmd == "first-produce-on-go":
        out = first_produce_on_go(args[0], args[1], float(args[2]), began)
    else:
        print(__doc__, file=sys.stderr)
        return 2
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
