"""Fetch throughput over TLS vs plaintext on one kbroker (issue 15): librdkafka consumers read the same
topic from a PLAINTEXT listener (sendfile) and an SSL listener (pread + OpenSSL).

    python -m benchmarks.bench_tls_fetch [--mb 200]

Prints MB/s per listener (best of two reads each). Test certificates are made with openssl.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from tests.security.certs import make_pki
from tests.support.broker import KBroker, free_port


def consume_all(conf: dict[str, str], topic: str, count: int) -> float:
    c = Consumer({**conf, "group.id": f"bench-{time.monotonic_ns()}", "enable.auto.commit": "false",
                  "fetch.max.bytes": "52428800", "max.partition.fetch.bytes": "10485760"})
    c.assign([TopicPartition(topic, 0, 0)])
    got = 0
    start = time.perf_counter()
    while got < count:
        msgs = c.consume(1000, 1.0)
        got += sum(1 for m in msgs if m.error() is None)
    elapsed = time.perf_counter() - start
    c.close()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        pki = make_pki(d / "pki")
        plain, tls = free_port(), free_port()
        broker = KBroker(d, port=plain, overrides={
            "listeners": f"PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{tls}",
            "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.broker_keystore),
        })
        with broker:
            value = b"x" * 10_000
            count = args.mb * 100
            p = Producer({"bootstrap.servers": f"127.0.0.1:{plain}", "linger.ms": "20", "batch.size": "1000000"})
            for _ in range(count):
                while True:
                    try:
                        p.produce("bench", value)
                        break
                    except BufferError:
                        p.poll(0.1)
            p.flush(120)
            confs = {
                "PLAINTEXT (sendfile)": {"bootstrap.servers": f"127.0.0.1:{plain}"},
                "SSL (copy through OpenSSL)": {"bootstrap.servers": f"127.0.0.1:{tls}", "security.protocol": "SSL",
                                               "ssl.ca.location": str(pki.ca_cert)},
            }
            for name, conf in confs.items():
                best = min(consume_all(conf, "bench", count) for _ in range(2))
                print(f"{name}: {args.mb / best:.0f} MB/s ({args.mb} MB in {best:.2f} s)")


if __name__ == "__main__":
    main()
