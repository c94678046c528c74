"""Kafka Streams 4.3.1 with `processing.guarantee=exactly_once_v2` against kbroker (which finalizes
`transaction.version` 2, so Streams' producer runs transactions version 2), killed with -9 mid-stream
and restarted on the same state directory: the output read with read_committed holds every input
record exactly once, and the per-word counts (a repartition topic, a state store with a compacted
changelog, restored after the kill) are exact.

The Streams jar comes from `scripts/java-deps.sh --streams` (tools/java/streams/pom.xml, pinned 4.3.1);
the application is `java/StreamsEos.java`, compiled by the JVM's source launcher."""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.broker import KBroker
from tests.support.java import (
    DEFAULT_JVM_OPTS,
    JAVA_DEPS_SCRIPT,
    REPO_ROOT,
    TOOLS_LOG4J_CONFIG,
    java_executable,
    java_lib_dir,
    java_unavailable_reason,
)

pytestmark = [pytest.mark.interop, pytest.mark.java]

APP = Path(__file__).parent / "java" / "StreamsEos.java"
INPUT, OUTPUT, COUNTS = "eos-in", "eos-out", "eos-counts"
WORDS = 7
RECORDS = 4000


def _streams_lib() -> Path:
    out = subprocess.run(["bash", str(JAVA_DEPS_SCRIPT), "--streams"], capture_output=True, text=True, timeout=900,
                         cwd=REPO_ROOT)
    assert out.returncode == 0, out.stderr
    return Path(out.stdout.strip().splitlines()[-1])


def _start_app(bootstrap: str, state_dir: Path, log: Path, streams_lib: Path) -> subprocess.Popen[bytes]:
    java = java_executable()
    assert java is not None
    cmd = [java, *DEFAULT_JVM_OPTS, f"-Dlog4j2.configurationFile={TOOLS_LOG4J_CONFIG}", "-cp",
           f"{java_lib_dir()}/*:{streams_lib}/*", str(APP), bootstrap, "eos-app", INPUT, OUTPUT, COUNTS,
           str(state_dir)]
    return subprocess.Popen(cmd, stdout=log.open("ab"), stderr=subprocess.STDOUT, cwd=REPO_ROOT,
                            start_new_session=True)


def _wait_for(predicate, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def _produce(bootstrap: str, first: int, last: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(first, last):
        p.produce(INPUT, value=f"{i}:w{i % WORDS}".encode(), key=str(i).encode())
    assert p.flush(30) == 0


def _read(bootstrap: str, topic: str, isolation: str) -> list[tuple[bytes | None, bytes]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{time.monotonic_ns()}",
                  "isolation.level": isolation, "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        parts = [TopicPartition(topic, 0)]
        low, high = c.get_watermark_offsets(parts[0], timeout=10, cached=False)
        c.assign(parts)
        out: list[tuple[bytes | None, bytes]] = []
        deadline = time.monotonic() + 20
        position = low
        while position < high and time.monotonic() < deadline:
            for m in c.consume(500, timeout=0.5):
                if m.error() is None:
                    out.append((m.key(), m.value()))
                    position = m.offset() + 1
                elif m.error().code() == -191:  # _PARTITION_EOF
                    position = high
            got = c.position(parts)[0].offset
            if got >= 0:
                position = max(position, got)
        return out
    finally:
        c.close()


def test_streams_exactly_once_v2_survives_kill_9(kbroker: KBroker, tmp_path: Path) -> None:
    reason = java_unavailable_reason()
    if reason:
        pytest.skip(reason)
    streams_lib = _streams_lib()
    bootstrap = kbroker.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(INPUT, 2, 1), NewTopic(OUTPUT, 1, 1), NewTopic(COUNTS, 1, 1)]).values():
        f.result(30)
    state_dir, log = tmp_path / "state", tmp_path / "streams.log"
    _produce(bootstrap, 0, RECORDS // 2)
    app = _start_app(bootstrap, state_dir, log, streams_lib)
    try:
        _wait_for(lambda: "state RUNNING" in log.read_text(errors="replace"), 120, "Streams RUNNING")
        # Kill it mid-stream: some transactions committed, one most likely open.
        _wait_for(lambda: len(_read(bootstrap, OUTPUT, "read_uncommitted")) >= RECORDS // 8, 120, "first output")
        os.killpg(app.pid, signal.SIGKILL)
        app.wait(30)
        _produce(bootstrap, RECORDS // 2, RECORDS)
        app = _start_app(bootstrap, state_dir, log, streams_lib)

        def caught_up() -> bool:
            return len(_read(bootstrap, OUTPUT, "read_committed")) >= RECORDS

        _wait_for(caught_up, 240, "every input record in the output")
        time.sleep(2)  # let a duplicate, if there were one, be committed too
        output = [v.decode() for _k, v in _read(bootstrap, OUTPUT, "read_committed")]
        counts = {}
        for k, v in _read(bootstrap, COUNTS, "read_committed"):
            assert k is not None
            counts[k.decode()] = int(v.decode())
    finally:
        if app.poll() is None:
            os.killpg(app.pid, signal.SIGKILL)
            app.wait(30)
    text = log.read_text(errors="replace")
    assert text.count("state RUNNING") >= 2, text[-3000:]
    expected = collections.Counter(f"{i}:w{i % WORDS}-out" for i in range(RECORDS))
    got = collections.Counter(output)
    assert got == expected, (f"missing {len(expected - got)}, duplicated {len(got - expected)}: "
                             f"{sorted((got - expected).items())[:5]}")
    assert counts == {f"w{w}": sum(1 for i in range(RECORDS) if i % WORDS == w) for w in range(WORDS)}
    # The pre-kill uncommitted writes exist (read_uncommitted sees more) or the kill fell between two
    # commits; either way read_committed saw each record once. Say which for the record.
    uncommitted = len(_read(bootstrap, OUTPUT, "read_uncommitted"))
    print(f"output: {len(output)} committed, {uncommitted} read_uncommitted")
