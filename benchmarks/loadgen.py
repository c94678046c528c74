"""The start-up probe of the side-by-side benchmarks (P5), run as a subprocess pinned to a core.

It talks to "a Kafka broker at BOOTSTRAP" and knows nothing of which broker it is, and prints one
JSON line. The throughput and latency loads are native (benchmarks/instruments.py): the Python
consume and e2e generators that were here measured the Python client, not the brokers (issue 17).

    python benchmarks/loadgen.py first-produce BOOTSTRAP TOPIC TIMEOUT_S
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
    if cmd == "first-produce":
        out = first_produce(args[0], args[1], float(args[2]))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
