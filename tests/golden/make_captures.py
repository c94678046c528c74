"""Make the golden captures: real Kafka clients talking to the reference Apache Kafka 4.3.1.

Owns: the list of capture scenarios and the run that records them. It starts the reference broker
(benchmarks/reference/kafka.sh) advertising the port of a CaptureProxy, runs each scenario's client
(Java tools, confluent-kafka, kafka-python, aiokafka) in its own process through the proxy, and
writes tests/golden/captures/<scenario>/<seq>-<ApiName>-v<version>.req|.resp plus
tests/golden/index.json. Python scenarios run in a child process (`--scenario NAME`) so that every
connection is closed when the scenario ends and the next one starts with a new label.

Usage: .venv/bin/python tests/golden/make_captures.py [--out DIR] [--only PREFIX]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from tests.golden.capture_proxy import CaptureProxy  # noqa: E402
from tests.support.java import KAFKA_VERSION, run_java_main  # noqa: E402
from tests.support.reference_kafka import start_reference_kafka  # noqa: E402

GOLDEN_DIR = REPO_ROOT / "tests" / "golden"
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
RECORDS_PER_BATCH = 5


def _value(i: int, codec: str) -> str:
    # Repetitive values: librdkafka sends a batch uncompressed when compression does not shrink it.
    return f"{codec}-value-{i} " + "kafka " * 12


@dataclasses.dataclass(frozen=True)
class Scenario:
    name: str
    client: str  # java | confluent-kafka | kafka-python | aiokafka | kcat
    exercises: str
    run: Callable[[str], None]  # bootstrap -> None (runs in a child process for Python clients)


# -- Java tools (each run is its own JVM) ----------------------------------------------------------


def _java(tool: str, args: list[str], stdin: str | None = None, timeout: float = 120) -> None:
    proc = run_java_main(tool, args, timeout=timeout, input=stdin)
    if proc.returncode != 0:
        raise RuntimeError(f"{tool} {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-3000:]}")


def _java_console_producer(codec: str) -> Callable[[str], None]:
    def run(bootstrap: str) -> None:
        lines = [f"h1:a,h2:b\tkey-{i}\t{_value(i, codec)}" for i in range(RECORDS_PER_BATCH - 1)]
        lines.append("h1:a\tkey-null\tNULL")  # a null value (tombstone) via null.marker
        _java(
            "kafka-console-producer",
            ["--bootstrap-server", bootstrap, "--topic", "java-codecs", "--compression-codec", codec,
             "--reader-property", "parse.key=true", "--reader-property", "parse.headers=true",
             "--reader-property", "null.marker=NULL", "--command-property", "linger.ms=50"],
            stdin="\n".join(lines) + "\n",
        )
    return run


def _java_scenarios() -> list[Scenario]:
    out = [
        Scenario("java-topics-create", "java", "kafka-topics --create (3 partitions, a topic config)",
                 lambda b: _java("kafka-topics", ["--bootstrap-server", b, "--create", "--topic", "java-admin",
                                                  "--partitions", "3", "--config", "retention.ms=3600000"])),
        Scenario("java-topics-describe", "java", "kafka-topics --describe of one topic",
                 lambda b: _java("kafka-topics", ["--bootstrap-server", b, "--describe", "--topic", "java-admin"])),
        Scenario("java-topics-list", "java", "kafka-topics --list",
                 lambda b: _java("kafka-topics", ["--bootstrap-server", b, "--list"])),
        Scenario("java-configs-describe-topic", "java", "kafka-configs --describe of a topic",
                 lambda b: _java("kafka-configs", ["--bootstrap-server", b, "--describe", "--entity-type",
                                                   "topics", "--entity-name", "java-admin"])),
        Scenario("java-configs-describe-broker", "java", "kafka-configs --describe --all of broker 1",
                 lambda b: _java("kafka-configs", ["--bootstrap-server", b, "--describe", "--all",
                                                   "--entity-type", "brokers", "--entity-name", "1"])),
        Scenario("java-configs-alter-topic", "java", "kafka-configs --alter --add-config on a topic",
                 lambda b: _java("kafka-configs", ["--bootstrap-server", b, "--alter", "--entity-type", "topics",
                                                   "--entity-name", "java-admin", "--add-config",
                                                   "retention.ms=7200000,cleanup.policy=delete"])),
    ]
    for codec in CODECS:
        out.append(Scenario(f"java-producer-{codec}", "java",
                            f"console producer, compression.type={codec}, keys, headers, a null value",
                            _java_console_producer(codec)))
    out += [
        Scenario("java-consumer-assign", "java",
                 "console consumer, assign mode (--partition 0 --offset earliest), all five codecs",
                 lambda b: _java("kafka-console-consumer", [
                     "--bootstrap-server", b, "--topic", "java-codecs", "--partition", "0", "--offset",
                     "earliest", "--max-messages", str(RECORDS_PER_BATCH * len(CODECS)), "--timeout-ms", "20000",
                     "--formatter-property", "print.key=true", "--formatter-property", "print.headers=true"])),
        Scenario("java-idempotent-producer", "java",
                 "verifiable producer, default settings (idempotent, acks=all)",
                 lambda b: _java("kafka-verifiable-producer", [
                     "--bootstrap-server", b, "--topic", "java-idem", "--max-messages", "5"])),
        Scenario("java-consumer-group-classic", "java",
                 "console consumer in a group, group.protocol=classic (Join/Sync/Heartbeat/OffsetCommit)",
                 lambda b: _java("kafka-console-consumer", [
                     "--bootstrap-server", b, "--topic", "java-idem", "--group", "java-classic",
                     "--from-beginning", "--max-messages", "5", "--timeout-ms", "20000",
                     "--command-property", "group.protocol=classic"])),
        Scenario("java-consumer-group-consumer", "java",
                 "console consumer in a group, group.protocol=consumer (KIP-848 ConsumerGroupHeartbeat)",
                 lambda b: _java("kafka-console-consumer", [
                     "--bootstrap-server", b, "--topic", "java-idem", "--group", "java-kip848",
                     "--from-beginning", "--max-messages", "5", "--timeout-ms", "20000",
                     "--command-property", "group.protocol=consumer"])),
        Scenario("java-get-offsets", "java", "kafka-get-offsets (ListOffsets latest)",
                 lambda b: _java("kafka-get-offsets", ["--bootstrap-server", b, "--topic", "java-codecs"])),
    ]
    return out


# -- confluent-kafka (librdkafka) -------------------------------------------------------------------


def _ck_producer(codec: str, idempotent: bool = False) -> Callable[[str], None]:
    def run(bootstrap: str) -> None:
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 50,
                             "enable.idempotence": idempotent})
        base_ts = 1_700_000_000_000
        for i in range(RECORDS_PER_BATCH - 1):
            producer.produce("ck-codecs", key=f"key-{i}".encode(), value=_value(i, codec).encode(),
                             headers=[("h1", b"a"), ("h2", None)], timestamp=base_ts + i)
        producer.produce("ck-codecs", key=b"key-null", value=None, timestamp=base_ts + 99)
        if producer.flush(30) != 0:
            raise RuntimeError("confluent-kafka producer did not deliver every record")
    return run


def _ck_consumer_assign(bootstrap: str) -> None:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "ck-assign", "enable.auto.commit": False})
    consumer.assign([TopicPartition("ck-codecs", 0, OFFSET_BEGINNING)])
    want, got, deadline = RECORDS_PER_BATCH * (len(CODECS) + 1), 0, time.monotonic() + 30
    while got < want and time.monotonic() < deadline:
        msg = consumer.poll(1.0)
        if msg is not None and msg.error() is None:
            got += 1
    consumer.close()
    if got < want:
        raise RuntimeError(f"confluent-kafka consumer got {got} of {want} records")


def _ck_admin_create(bootstrap: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic("ck-admin", num_partitions=2, replication_factor=1,
                                            config={"cleanup.policy": "compact"})], operation_timeout=10)
    for future in futures.values():
        future.result(30)


def _ck_admin_describe_configs(bootstrap: str) -> None:
    from confluent_kafka.admin import AdminClient, ConfigResource

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.describe_configs([ConfigResource("topic", "ck-admin"), ConfigResource("broker", "1")])
    for future in futures.values():
        future.result(30)


def _ck_scenarios() -> list[Scenario]:
    out = [Scenario(f"ck-producer-{codec}", "confluent-kafka",
                    f"Producer, compression.type={codec}, keys, headers (one null), explicit timestamps, "
                    "a null value", _ck_producer(codec)) for codec in CODECS]
    out += [
        Scenario("ck-producer-idempotent", "confluent-kafka",
                 "Producer, enable.idempotence=true (InitProducerId, sequenced batch), lz4",
                 _ck_producer("lz4", idempotent=True)),
        Scenario("ck-consumer-assign", "confluent-kafka", "Consumer.assign at OFFSET_BEGINNING, all codecs",
                 _ck_consumer_assign),
        Scenario("ck-admin-create-topics", "confluent-kafka",
                 "AdminClient.create_topics (2 partitions, cleanup.policy=compact)", _ck_admin_create),
        Scenario("ck-admin-describe-configs", "confluent-kafka",
                 "AdminClient.describe_configs of a topic and broker 1", _ck_admin_describe_configs),
    ]
    return out


# -- kafka-python -------------------------------------------------------------------------------------


def _kp_producer(codec: str) -> Callable[[str], None]:
    def run(bootstrap: str) -> None:
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=bootstrap, compression_type=None if codec == "none" else codec,
                                 linger_ms=50)
        futures = [producer.send("kp-codecs", key=f"key-{i}".encode(), value=_value(i, codec).encode(),
                                 headers=[("h1", b"a")]) for i in range(RECORDS_PER_BATCH - 1)]
        futures.append(producer.send("kp-codecs", key=b"key-null", value=None))
        for future in futures:
            future.get(timeout=30)
        producer.close(timeout=10)
    return run


def _kp_consumer_assign(bootstrap: str) -> None:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="earliest",
                             enable_auto_commit=False)
    consumer.assign([TopicPartition("kp-codecs", 0)])
    consumer.seek_to_beginning()
    want, got, deadline = RECORDS_PER_BATCH * len(CODECS), 0, time.monotonic() + 30
    while got < want and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=1000).values():
            got += len(records)
    consumer.close()
    if got < want:
        raise RuntimeError(f"kafka-python consumer got {got} of {want} records")


def _kp_scenarios() -> list[Scenario]:
    out = [Scenario(f"kp-producer-{codec}", "kafka-python",
                    f"KafkaProducer, compression_type={codec}, keys, a header, a null value", _kp_producer(codec))
           for codec in CODECS]
    out.append(Scenario("kp-consumer-assign", "kafka-python", "KafkaConsumer.assign + seek_to_beginning",
                        _kp_consumer_assign))
    return out


# -- aiokafka ------------------------------------------------------------------------------------------


def _aio_producer(codec: str) -> Callable[[str], None]:
    def run(bootstrap: str) -> None:
        import asyncio

        from aiokafka import AIOKafkaProducer

        async def go() -> None:
            producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=50,
                                        compression_type=None if codec == "none" else codec)
            await producer.start()
            try:
                batch = [await producer.send("aio-codecs", key=f"key-{i}".encode(), value=_value(i, codec).encode(),
                                             headers=[("h1", b"a")]) for i in range(RECORDS_PER_BATCH - 1)]
                batch.append(await producer.send("aio-codecs", key=b"key-null", value=None))
                await asyncio.gather(*batch)
            finally:
                await producer.stop()

        asyncio.run(go())
    return run


def _aio_consumer(bootstrap: str) -> None:
    import asyncio

    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def go() -> None:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        await consumer.start()
        try:
            tp = TopicPartition("aio-codecs", 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            want, got, deadline = RECORDS_PER_BATCH * 2, 0, time.monotonic() + 30
            while got < want and time.monotonic() < deadline:
                for records in (await consumer.getmany(timeout_ms=1000)).values():
                    got += len(records)
            if got < want:
                raise RuntimeError(f"aiokafka consumer got {got} of {want} records")
        finally:
            await consumer.stop()

    asyncio.run(go())


def _aio_scenarios() -> list[Scenario]:
    return [
        Scenario("aio-producer-none", "aiokafka", "AIOKafkaProducer, no compression, keys, a header, a null value",
                 _aio_producer("none")),
        Scenario("aio-producer-gzip", "aiokafka", "AIOKafkaProducer, compression_type=gzip", _aio_producer("gzip")),
        Scenario("aio-consumer-assign", "aiokafka", "AIOKafkaConsumer.assign + seek_to_beginning + getmany",
                 _aio_consumer),
    ]


# -- kcat (librdkafka's command-line client, from Debian) -------------------------------------------


def _kcat_metadata(bootstrap: str) -> None:
    subprocess.run(["kcat", "-b", bootstrap, "-L"], check=True, timeout=60, stdout=subprocess.DEVNULL)


def _kcat_producer(bootstrap: str) -> None:
    lines = "".join(f"key-{i}:{_value(i, 'snappy')}\n" for i in range(RECORDS_PER_BATCH))
    subprocess.run(["kcat", "-b", bootstrap, "-P", "-t", "kcat-codecs", "-K:", "-z", "snappy",
                    "-X", "linger.ms=50"], input=lines.encode(), check=True, timeout=60)


def _kcat_consumer(bootstrap: str) -> None:
    subprocess.run(["kcat", "-b", bootstrap, "-C", "-t", "kcat-codecs", "-p", "0", "-o", "beginning", "-e",
                    "-q"], check=True, timeout=60, stdout=subprocess.DEVNULL)


def _kcat_scenarios() -> list[Scenario]:
    if shutil.which("kcat") is None:
        print("note: kcat not installed (scripts/system-deps.sh installs it); kcat scenarios left out",
              file=sys.stderr)
        return []
    return [
        Scenario("kcat-metadata", "kcat", "kcat -L (Metadata of all topics)", _kcat_metadata),
        Scenario("kcat-producer-snappy", "kcat", "kcat -P -z snappy with keys", _kcat_producer),
        Scenario("kcat-consumer", "kcat", "kcat -C -p 0 -o beginning -e (simple consumer)", _kcat_consumer),
    ]


def all_scenarios() -> list[Scenario]:
    return _java_scenarios() + _ck_scenarios() + _kp_scenarios() + _aio_scenarios() + _kcat_scenarios()


def client_versions() -> dict[str, str]:
    import aiokafka
    import confluent_kafka
    import kafka

    kcat = "not installed"
    if shutil.which("kcat"):
        version = subprocess.run(["kcat", "-V"], capture_output=True, text=True, timeout=30).stdout
        kcat = next((line for line in version.splitlines() if line.startswith("Version")), "unknown")
    return {
        "kcat": f"kcat {kcat}",
        "java": f"Apache Kafka clients/tools {KAFKA_VERSION}",
        "confluent-kafka": f"confluent-kafka {confluent_kafka.__version__} (librdkafka {confluent_kafka.libversion()[0]})",
        "kafka-python": f"kafka-python {kafka.__version__}",
        "aiokafka": f"aiokafka {aiokafka.__version__}",
    }


# -- the run ---------------------------------------------------------------------------------------------


def _create_topics_directly(bootstrap: str) -> None:
    """Topics the produce/consume scenarios use, created outside the proxy (not captured)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    names = ["java-codecs", "java-idem", "ck-codecs", "kp-codecs", "aio-codecs", "kcat-codecs"]
    futures = admin.create_topics([NewTopic(n, num_partitions=1, replication_factor=1) for n in names])
    for future in futures.values():
        future.result(60)


def run_scenario_child(name: str, bootstrap: str) -> None:
    scenario = next(s for s in all_scenarios() if s.name == name)
    scenario.run(bootstrap)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=GOLDEN_DIR / "captures")  # must be under --index's dir
    parser.add_argument("--index", type=Path, default=GOLDEN_DIR / "index.json")
    parser.add_argument("--only", default="", help="run only scenarios whose name starts with this")
    parser.add_argument("--scenario", help=argparse.SUPPRESS)  # child mode
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.scenario:
        run_scenario_child(args.scenario, args.bootstrap)
        return 0

    args.out = args.out.resolve()
    scenarios = [s for s in all_scenarios() if s.name.startswith(args.only)]
    if args.out.exists():
        shutil.rmtree(args.out)
    args.out.mkdir(parents=True)
    versions = client_versions()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kbroker-golden-") as tmp:
        proxy = CaptureProxy(args.out)
        proxy_port = proxy.start()
        real_bootstrap, stop_kafka = start_reference_kafka(Path(tmp), advertised_port=proxy_port)
        host, _, port = real_bootstrap.rpartition(":")
        proxy.upstream = (host, int(port))
        bootstrap = f"127.0.0.1:{proxy_port}"
        try:
            _create_topics_directly(bootstrap)  # through the proxy, under a label we drop
            proxy.wait_quiet()
            shutil.rmtree(args.out / "unlabelled", ignore_errors=True)
            for scenario in scenarios:
                t0 = time.monotonic()
                proxy.label = scenario.name
                if scenario.client in ("java", "kcat"):
                    scenario.run(bootstrap)
                else:
                    subprocess.run([sys.executable, __file__, "--scenario", scenario.name, "--bootstrap", bootstrap],
                                   check=True, timeout=180, cwd=REPO_ROOT)
                if not proxy.wait_quiet(15):
                    print(f"warning: {scenario.name}: connections still open after the client ended",
                          file=sys.stderr)
                print(f"{scenario.name}: {time.monotonic() - t0:.1f}s", flush=True)
        finally:
            proxy.stop()
            stop_kafka()

    by_name = {s.name: s for s in scenarios}
    base = args.index.resolve().parent  # paths in the index are relative to its own directory
    entries = []
    for ex in sorted(proxy.exchanges, key=lambda e: (e.label, e.seq)):
        if ex.label not in by_name:
            continue
        scenario = by_name[ex.label]
        entries.append({
            "request": ex.request_file.relative_to(base).as_posix(),
            "response": ex.response_file.relative_to(base).as_posix() if ex.response_file else None,
            "scenario": ex.label,
            "client": scenario.client,
            "client_version": versions[scenario.client],
            "api_key": ex.api_key,
            "api_name": ex.api_name,
            "api_version": ex.api_version,
            "connection": ex.connection,
            "correlation_id": ex.correlation_id,
            "exercises": f"{ex.api_name} v{ex.api_version}: {scenario.exercises}",
        })
    index = {
        "broker": f"Apache Kafka {KAFKA_VERSION} (KRaft, single node, benchmarks/reference/kafka.sh)",
        "made_with": "tests/golden/make_captures.py",
        "made_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "client_versions": versions,
        "captures": entries,
    }
    args.index.write_text(json.dumps(index, indent=1) + "\n")
    total = sum(p.stat().st_size for p in args.out.rglob("*") if p.is_file())
    print(f"{len(entries)} exchanges, {total / 1024:.0f} KiB, {time.monotonic() - started:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
