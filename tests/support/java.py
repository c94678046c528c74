"""Running Apache Kafka's own Java tools and clients (4.3.1) from tests.

Owns: finding the jars that ``scripts/java-deps.sh`` resolves from Maven Central (pinned in
``tools/java/pom.xml``) and launching their main classes as subprocesses. It does not start brokers
(``tests/support/reference_kafka.py`` does the reference Kafka, ``tests/support/broker.py`` kbroker).

Tests that use it are marked ``@pytest.mark.java`` and skip, saying why, when Java or the jars are
missing::

    reason = java_unavailable_reason()
    if reason:
        pytest.skip(reason)
    proc = run_java_main(TOOLS["kafka-topics"], ["--bootstrap-server", bootstrap, "--list"], timeout=60)
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
JAVA_DEPS_SCRIPT = REPO_ROOT / "scripts" / "java-deps.sh"
TOOLS_LOG4J_CONFIG = REPO_ROOT / "tools" / "java" / "log4j2-tools.properties"
KAFKA_VERSION = "4.3.1"

# Main class behind each of Kafka 4.3's bin/*.sh scripts (read from the 4.3.1 jars: most tools
# moved from Scala `kafka.*` to Java `org.apache.kafka.tools.*` in 3.x/4.0; ConfigCommand and
# StorageTool are still Scala classes in kafka_2.13).
TOOLS: dict[str, str] = {
    "kafka-server-start": "kafka.Kafka",
    "kafka-storage": "kafka.tools.StorageTool",
    "kafka-configs": "kafka.admin.ConfigCommand",
    "kafka-topics": "org.apache.kafka.tools.TopicCommand",
    "kafka-console-producer": "org.apache.kafka.tools.ConsoleProducer",
    "kafka-console-consumer": "org.apache.kafka.tools.consumer.ConsoleConsumer",
    "kafka-console-share-consumer": "org.apache.kafka.tools.consumer.ConsoleShareConsumer",
    "kafka-consumer-groups": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "kafka-share-groups": "org.apache.kafka.tools.consumer.group.ShareGroupCommand",
    "kafka-groups": "org.apache.kafka.tools.GroupsCommand",
    "kafka-get-offsets": "org.apache.kafka.tools.GetOffsetShell",
    "kafka-producer-perf-test": "org.apache.kafka.tools.ProducerPerformance",
    "kafka-consumer-perf-test": "org.apache.kafka.tools.ConsumerPerformance",
    "kafka-e2e-latency": "org.apache.kafka.tools.EndToEndLatency",
    "kafka-verifiable-producer": "org.apache.kafka.tools.VerifiableProducer",
    "kafka-verifiable-consumer": "org.apache.kafka.tools.VerifiableConsumer",
    "kafka-client-compatibility": "org.apache.kafka.tools.ClientCompatibilityTest",
    "kafka-broker-api-versions": "org.apache.kafka.tools.BrokerApiVersionsCommand",
    "kafka-delete-records": "org.apache.kafka.tools.DeleteRecordsCommand",
    "kafka-log-dirs": "org.apache.kafka.tools.LogDirsCommand",
    "kafka-dump-log": "org.apache.kafka.tools.DumpLogSegments",
    "kafka-transactions": "org.apache.kafka.tools.TransactionsCommand",
    "kafka-features": "org.apache.kafka.tools.FeatureCommand",
    "kafka-cluster": "org.apache.kafka.tools.ClusterTool",
    "kafka-leader-election": "org.apache.kafka.tools.LeaderElectionCommand",
    "kafka-reassign-partitions": "org.apache.kafka.tools.reassign.ReassignPartitionsCommand",
    "kafka-acls": "org.apache.kafka.tools.AclCommand",
    "kafka-metadata-quorum": "org.apache.kafka.tools.MetadataQuorumCommand",
}

# Short-lived tools: a small heap and the serial collector keep 2-core machines responsive, and C1 only
# (TieredStopAtLevel=1) spares them the C2 compiler threads: `kafka-configs --help` took a median 6.8 s
# with C2 and 2.7 s without on this 2-core machine under load (tests/support/kafka_cluster.py's nodes and
# groups_verifiable.py's members already ran this way). Benchmarks never use these options.
DEFAULT_JVM_OPTS: tuple[str, ...] = (
    "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true")


def java_executable() -> str | None:
    """The `java` to run: $JAVA_HOME/bin/java when set, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").is_file():
        return str(Path(home) / "bin" / "java")
    return shutil.which("java")


@functools.cache
def _java_major_version() -> int | None:
    java = java_executable()
    if java is None:
        return None
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if match is None:
        return None
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major


@functools.cache
def _resolve_lib_dir() -> tuple[Path | None, str]:
    """Run java-deps.sh once per process: (lib dir, "") or (None, why it failed)."""
    try:
        out = subprocess.run(
            ["bash", str(JAVA_DEPS_SCRIPT)], capture_output=True, text=True, timeout=900, cwd=REPO_ROOT
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"scripts/java-deps.sh did not run: {exc}"
    if out.returncode != 0:
        tail = (out.stderr or out.stdout).strip().splitlines()[-5:]
        return None, f"scripts/java-deps.sh failed (exit {out.returncode}): {' | '.join(tail)}"
    lib = Path(out.stdout.strip().splitlines()[-1])
    if not any(lib.glob("kafka-clients-*.jar")):
        return None, f"scripts/java-deps.sh printed {lib} but it holds no kafka-clients jar"
    return lib, ""


def java_unavailable_reason() -> str | None:
    """None when Kafka's Java tools can run here, else a sentence saying why not (for pytest.skip)."""
    if java_executable() is None:
        return "no `java` on PATH or in $JAVA_HOME (Kafka 4.3 tools need Java 17+)"
    major = _java_major_version()
    if major is None or major < 17:
        return f"Kafka 4.3 tools need Java 17+, found {major or 'an unreadable version'}"
    lib, why = _resolve_lib_dir()
    return why if lib is None else None


def java_available() -> bool:
    return java_unavailable_reason() is None


def java_lib_dir() -> Path:
    lib, why = _resolve_lib_dir()
    if lib is None:
        raise RuntimeError(why)
    return lib


def java_classpath() -> str:
    """A `-cp` value naming every resolved jar (a JVM wildcard entry)."""
    return str(java_lib_dir() / "*")


def java_command(
    main_class: str, args: Sequence[str] = (), jvm_opts: Sequence[str] = DEFAULT_JVM_OPTS
) -> list[str]:
    java = java_executable()
    if java is None:
        raise RuntimeError("no java executable found")
    return [
        java,
        *jvm_opts,
        f"-Dlog4j2.configurationFile={TOOLS_LOG4J_CONFIG}",
        "-cp",
        java_classpath(),
        main_class,
        *args,
    ]


def run_java_main(
    main_class: str,
    args: Sequence[str],
    timeout: float,
    env: Mapping[str, str] | None = None,
    *,
    input: str | bytes | None = None,
    jvm_opts: Sequence[str] = DEFAULT_JVM_OPTS,
    check: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run a Java main class to completion; stdout/stderr captured as text.

    `main_class` may be a class name or a key of TOOLS ("kafka-topics"). `env` is added to the
    current environment. Raises subprocess.TimeoutExpired (after killing the JVM) on timeout, and
    CalledProcessError when `check` is set and the exit code is not 0.
    """
    main_class = TOOLS.get(main_class, main_class)
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    return subprocess.run(
        java_command(main_class, args, jvm_opts),
        input=input.decode() if isinstance(input, bytes) else input,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
        check=check,
        cwd=REPO_ROOT,
    )


def start_java_main(
    main_class: str,
    args: Sequence[str],
    env: Mapping[str, str] | None = None,
    *,
    jvm_opts: Sequence[str] = DEFAULT_JVM_OPTS,
    stdout: int | None = subprocess.PIPE,
    stderr: int | None = subprocess.PIPE,
    stdin: int | None = subprocess.DEVNULL,
) -> subprocess.Popen[str]:
    """Start a long-running Java main class (a console consumer, a perf test) without waiting."""
    main_class = TOOLS.get(main_class, main_class)
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    return subprocess.Popen(
        java_command(main_class, args, jvm_opts),
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
        text=True,
        env=full_env,
        cwd=REPO_ROOT,
    )
