"""A confluent-kafka (librdkafka) group consumer run as a subprocess, for the seed question "does
auto-commit lose a message when the consumer dies, and does commit-after-processing not?".

Owns nothing but its own loop. It consumes one single-partition topic in a group and prints, flushed,
one line per step, so the test can kill it (-9) at an exact point:

    received <offset>     poll() returned the record (librdkafka has stored offset+1 for auto-commit)
    processed <offset>    the record's processing is done
    done                  the record at --until was processed; the consumer closed

`--mode auto`: enable.auto.commit=true with the default enable.auto.offset.store=true, so the
background committer commits offset+1 as soon as poll() has returned the record, whether or not it
has been processed (librdkafka's at-most-once window). `--mode manual`: enable.auto.commit=false and
a synchronous commit of offset+1 after each record is processed (at-least-once).

`--hang-at N`: on the record at offset N, stop and sleep: in auto mode after "received N" and before
processing it, in manual mode after "processed N" and before committing it.

    python -m tests.support.groups_commit_worker BOOTSTRAP TOPIC GROUP --mode auto --hang-at 5 --until 9 \
        [--protocol classic|consumer]
"""

from __future__ import annotations

import argparse
import sys
import time

from confluent_kafka import Consumer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("bootstrap")
    parser.add_argument("topic")
    parser.add_argument("group")
    parser.add_argument("--mode", choices=["auto", "manual"], required=True)
    parser.add_argument("--hang-at", type=int, default=-1)
    parser.add_argument("--until", type=int, required=True)
    parser.add_argument("--protocol", choices=["classic", "consumer"], default="classic")
    args = parser.parse_args(argv)

    # KIP-848 (group.protocol=consumer): the broker sets the session timeout and heartbeat interval.
    timeouts = {"session.timeout.ms": 3000, "heartbeat.interval.ms": 500} if args.protocol == "classic" else {}
    consumer = Consumer({
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "group.protocol": args.protocol,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": args.mode == "auto",
        "auto.commit.interval.ms": 100,
        **timeouts,
    })
    consumer.subscribe([args.topic])

    def say(line: str) -> None:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    while True:
        msg = consumer.poll(0.2)
        if msg is None:
            continue
        if msg.error() is not None:
            say(f"error {msg.error()}")
            continue
        offset = int(msg.offset() or 0)
        say(f"received {offset}")
        if offset == args.hang_at and args.mode == "auto":
            while True:  # "processing" that never finishes: the test kills us here
                time.sleep(1)
        say(f"processed {offset}")
        if args.mode == "manual":
            if offset == args.hang_at:
                while True:  # processed, but dies before committing
                    time.sleep(1)
            consumer.commit(message=msg, asynchronous=False)
        if offset >= args.until:
            break
    consumer.close()
    say("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
