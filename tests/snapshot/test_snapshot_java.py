"""kbroker's snapshots, metadata log and formatted directories read by Apache Kafka 4.3.1's own tools
(real JVMs), and Kafka's formatted directories started by kbroker.

- `kafka-dump-log --cluster-metadata-decoder` decodes every record of a kbroker `.checkpoint` and of
  its `__cluster_metadata-0` `.log` segment; `kafka-metadata-shell --snapshot` lists its topics.
- `kbroker storage format` writes the same bytes as `kafka-storage format` on the same config (up to
  the random directory ids, the date line and the batches' timestamps/CRCs), statically and with a
  KIP-853 `--initial-controllers` quorum; `kafka-storage info` and `format --ignore-formatted`
  accept kbroker's directories.
- kbroker starts on a directory formatted by `kafka-storage format` (defaults, and `--standalone`).
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from kbroker.config import KafkaConfig
from kbroker.controller.metadata_log import CLUSTER_METADATA_DIR, ClusterMetadataLog
from kbroker.log.checkpoints import read_properties, uuid_from_base64
from kbroker.metadata.image_writer import image_records
from kbroker.protocol.metadata_records import FeatureLevelRecord
from kbroker.protocol.records import batch_size_at
from kbroker.services import build_services, shutdown_services
from kbroker.snapshot import parse_snapshot_path, read_snapshot_file
from tests.support.broker import KBroker
from tests.support.java import REPO_ROOT, java_command, java_unavailable_reason, run_java_main
from tests.support.sync import SyncAdmin

pytestmark = pytest.mark.java

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qk"
# kbroker implements none of these: formatting Kafka with them at 0 gives kbroker's default features
# (eligible.leader.replicas.version is implemented, at Kafka's default level).
KBROKER_FEATURES = ["--feature", "share.version=0", "--feature", "streams.version=0"]


@pytest.fixture(autouse=True)
def _need_java() -> None:
    reason = java_unavailable_reason()
    if reason:
        pytest.skip(reason)


def _shell_classpath() -> str:
    out = subprocess.run(["bash", str(REPO_ROOT / "scripts" / "java-shell-deps.sh")], capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines()[-1] + "/*"


def _kbroker(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    return subprocess.run([sys.executable, "-m", "kbroker", *args], capture_output=True, text=True, timeout=120,
                          env=env, cwd=REPO_ROOT)


def _properties(path: Path, log_dirs: str, *, quorum: str = "static") -> Path:
    lines = ["process.roles=broker,controller", "node.id=1",
             "listeners=PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
             "controller.listener.names=CONTROLLER",
             "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
             f"log.dirs={log_dirs}"]
    lines.append("controller.quorum.voters=1@127.0.0.1:9093" if quorum == "static"
                 else "controller.quorum.bootstrap.servers=127.0.0.1:9093")
    path.write_text("\n".join(lines) + "\n")
    return path


def _normalized(data: bytes) -> bytes:
    """A snapshot file with its batches' CRCs and timestamps, and the header's lastContainedLogTimestamp, zeroed."""
    out = bytearray(data)
    pos = 0
    first = True
    while pos < len(out):
        size = batch_size_at(out, pos)
        out[pos + 17: pos + 21] = bytes(4)   # crc
        out[pos + 27: pos + 43] = bytes(16)  # baseTimestamp, maxTimestamp
        if first:
            out[pos + 73: pos + 81] = bytes(8)  # SnapshotHeaderRecord.lastContainedLogTimestamp
            first = False
        pos += size
    return bytes(out)


def _meta_lines(path: Path) -> list[str]:
    lines = path.read_text().splitlines()
    assert lines[0] == "#" and re.fullmatch(r"#\w{3} \w{3} \d\d \d\d:\d\d:\d\d UTC \d{4}", lines[1]), lines
    return [re.sub(r"^directory.id=.*", "directory.id=<id>", line) for line in lines[2:]]


def _compare_dirs(kafka_dir: Path, kb_dir: Path) -> None:
    k_meta, b_meta = kafka_dir / "meta.properties", kb_dir / "meta.properties"
    assert _meta_lines(k_meta) == _meta_lines(b_meta)
    for name in ("bootstrap.checkpoint",):
        k, b = (kafka_dir / name).read_bytes(), (kb_dir / name).read_bytes()
        assert len(k) == len(b) and _normalized(k) == _normalized(b)
        assert stat.S_IMODE(os.stat(kafka_dir / name).st_mode) == stat.S_IMODE(os.stat(kb_dir / name).st_mode)


def _format_both(tmp_path: Path, name: str, log_dirs: list[str], quorum: str, args: list[str]) -> tuple[str, str]:
    """`kafka-storage format` and `kbroker storage format` on the same config and paths
    (`tmp_path/node/<dir>`), each result moved aside to `tmp_path/<name>-kafka` and `-kb`: their stdout."""
    node = tmp_path / "node"
    cfg = _properties(tmp_path / f"{name}.properties", ",".join(str(node / d) for d in log_dirs), quorum=quorum)
    k = run_java_main("kafka-storage", ["format", "--config", str(cfg), "--cluster-id", CLUSTER_ID, *args,
                                        *KBROKER_FEATURES], timeout=120)
    assert k.returncode == 0, k.stderr
    node.rename(tmp_path / f"{name}-kafka")
    b = _kbroker("storage", "format", "--config", str(cfg), "--cluster-id", CLUSTER_ID, *args)
    assert b.returncode == 0, b.stderr
    node.rename(tmp_path / f"{name}-kb")
    return k.stdout, b.stdout


def test_format_is_kafka_storage_format(tmp_path: Path) -> None:
    k_out, b_out = _format_both(tmp_path, "default", ["data"], "static", [])
    # The whole output is Kafka's (its "Bootstrap metadata: BootstrapMetadata(...)" line included).
    assert b_out == k_out
    assert f"Formatting metadata directory {tmp_path / 'node' / 'data'} with metadata.version 4.3-IV0." in b_out
    _compare_dirs(tmp_path / "default-kafka" / "data", tmp_path / "default-kb" / "data")
    # The same at an older release version, with an explicit feature, on three directories.
    k_out, b_out = _format_both(tmp_path, "v39", ["d1", "d2", "d3"], "static",
                                ["--release-version", "3.9", "--feature", "group.version=0"])
    assert b_out == k_out and b_out.count("Formatting") == 3
    for d in ("d1", "d2", "d3"):
        _compare_dirs(tmp_path / "v39-kafka" / d, tmp_path / "v39-kb" / d)
    (tmp_path / "kb").mkdir()
    (tmp_path / "default-kb" / "data").rename(tmp_path / "kb" / "data")

    # Kafka's tool reads kbroker's directory, and refuses to format it again, as it does its own.
    info = run_java_main("kafka-storage", ["info", "--config", str(_properties(
        tmp_path / "kb2.properties", str(tmp_path / "kb" / "data")))], timeout=120)
    assert info.returncode == 0, info.stdout + info.stderr
    assert f"cluster.id={CLUSTER_ID}" in info.stdout and "node.id=1" in info.stdout and "problem" not in info.stdout
    again = run_java_main("kafka-storage", ["format", "-c", str(tmp_path / "kb2.properties"), "-t", CLUSTER_ID,
                                            "--ignore-formatted", *KBROKER_FEATURES], timeout=120)
    assert again.returncode == 0 and "All of the log directories are already formatted." in again.stdout
    mine_again = _kbroker("storage", "format", "-c", str(tmp_path / "kb2.properties"), "-t", CLUSTER_ID,
                          "--ignore-formatted")
    assert (mine_again.returncode, mine_again.stdout) == (0, again.stdout)
    mine = _kbroker("storage", "format", "-c", str(tmp_path / "kb2.properties"), "-t", CLUSTER_ID)
    assert mine.returncode == 1 and "is already formatted. Use --ignore-formatted" in mine.stderr


def test_format_initial_controllers_is_kafka_storage_format(tmp_path: Path) -> None:
    voters = "1@127.0.0.1:9093:vKiwV36-TRC6w9FhxgbnGg,2@127.0.0.1:9094:yhnzRgSMsIsoTdje-aISQQ"
    k_out, b_out = _format_both(tmp_path, "quorum", ["meta", "data"], "dynamic", ["--initial-controllers", voters])
    assert "Formatting dynamic metadata voter directory" in b_out and "Formatting data directory" in b_out
    assert b_out == k_out  # the directories in Kafka's (hash) order too
    (tmp_path / "quorum-kafka").rename(tmp_path / "kafka")
    (tmp_path / "quorum-kb").rename(tmp_path / "kb")
    for sub in ("meta", "data"):
        _compare_dirs(tmp_path / "kafka" / sub, tmp_path / "kb" / sub)
    # The voter's metadata directory keeps the voter's directory id.
    assert read_properties(tmp_path / "kb" / "meta" / "meta.properties")["directory.id"] == "vKiwV36-TRC6w9FhxgbnGg"
    name = "00000000000000000000-0000000000.checkpoint"
    kp, bp = tmp_path / "kafka" / "meta" / CLUSTER_METADATA_DIR / name, tmp_path / "kb" / "meta" / CLUSTER_METADATA_DIR / name
    assert _normalized(kp.read_bytes()) == _normalized(bp.read_bytes())
    assert stat.S_IMODE(os.stat(bp).st_mode) == stat.S_IMODE(os.stat(kp).st_mode) == 0o400
    assert not (tmp_path / "kb" / "data" / CLUSTER_METADATA_DIR).exists()
    snap = read_snapshot_file(bp)
    assert snap.kraft_version == 1 and snap.voters is not None
    assert [(v.voter_id, v.endpoints[0].port) for v in snap.voters.voters] == [(1, 9093), (2, 9094)]
    dump = run_java_main("kafka-dump-log", ["--cluster-metadata-decoder", "--files", str(bp)], timeout=120)
    assert dump.returncode == 0 and "KRaftVoters" in dump.stdout and "SnapshotFooter" in dump.stdout


def _dump(path: Path) -> str:
    p = run_java_main("kafka-dump-log", ["--cluster-metadata-decoder", "--print-data-log", "--files", str(path)],
                      timeout=180)
    assert p.returncode == 0, p.stderr
    assert "Exception" not in p.stdout + p.stderr and "isvalid: false" not in p.stdout
    assert "Error" not in p.stdout and "Found 0 invalid" not in p.stderr
    return p.stdout


def test_kafka_tools_read_kbroker_snapshots_and_log(tmp_path: Path) -> None:
    config = KafkaConfig({"log.dirs": str(tmp_path / "data"), "node.id": "1",
                          "metadata.log.max.record.bytes.between.snapshots": "3000"})
    s = build_services(config)
    try:
        s.controller.register_broker([("PLAINTEXT", "127.0.0.1", 9092, "PLAINTEXT")], None)  # type: ignore[attr-defined]
        admin = SyncAdmin(s.controller, s.configs)
        names = [f"orders-{i}" for i in range(25)]
        for n in names:
            admin.create_topic(n, 2, configs={"retention.ms": "1234", "cleanup.policy": "compact"})
        admin.delete_topic(names[0])
        admin.alter_broker_configs(False, {"log.retention.ms": "5000"})
        image = s.metadata.image
    finally:
        shutdown_services(s)
    meta = tmp_path / "data" / CLUSTER_METADATA_DIR
    snapshots = sorted(p for p in meta.iterdir() if (sp := parse_snapshot_path(p)) and not sp.partial)
    assert snapshots, list(meta.iterdir())
    latest = snapshots[-1]
    contents = read_snapshot_file(latest)
    out = _dump(latest)
    # Every record decoded: the header, each metadata record (as JSON), the footer.
    assert out.count("SnapshotHeader") == 1 and out.count("SnapshotFooter") == 1
    assert out.count("payload: {\"type\":") == len(contents.records)
    for seg in meta.glob("*.log"):
        text = _dump(seg)
        assert "payload: {\"type\":\"TOPIC_RECORD\"" in text and "REMOVE_TOPIC_RECORD" in text
        assert text.count("payload: {") == text.count("| offset:")

    # The metadata shell lists the topics the snapshot holds.
    in_snapshot = sorted(r.name for r in contents.records if type(r).__name__ == "TopicRecord")
    assert in_snapshot
    cmd = java_command("org.apache.kafka.shell.MetadataShell", ["--snapshot", str(latest), "ls", "/image/topics/byName"])
    cmd[cmd.index("-cp") + 1] = _shell_classpath()
    # Kafka 4.3.1's shell sometimes runs the command before its loader has published the image and
    # prints nothing (an ordering race of its own, cf. KAFKA-15371; it does the same on snapshots Kafka
    # wrote: 2 runs in 8 on one here): an empty answer is asked again, a wrong one fails.
    listed: list[str] = []
    for _ in range(6):
        shell = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
        assert shell.returncode == 0, shell.stderr
        listed = sorted(shell.stdout.split())
        if listed:
            break
    assert listed == in_snapshot
    # And kbroker loads its own snapshot back to the image it had at that offset (a prefix of the final one).
    assert set(in_snapshot) <= set(names) and image.topics.topics_by_name.keys() >= set(in_snapshot) - {names[0]}


def _bootstrap_features(data_dir: Path) -> dict[str, int]:
    log = ClusterMetadataLog(data_dir, lambda: 0)
    try:
        first = next(log.read_all())
        return {r.name: r.feature_level for r in first.records if isinstance(r, FeatureLevelRecord)}
    finally:
        log.close()


@pytest.mark.parametrize("quorum", ["static", "standalone"])
def test_kbroker_starts_on_a_kafka_formatted_directory(tmp_path: Path, quorum: str) -> None:
    broker = KBroker(tmp_path / "node", overrides={"controller.listener.names": "CONTROLLER"})
    data = broker.log_dir
    cfg = _properties(tmp_path / "kafka.properties", str(data),
                      quorum="static" if quorum == "static" else "dynamic")
    args = ["format", "-c", str(cfg), "-t", CLUSTER_ID] + (["--standalone"] if quorum == "standalone" else [])
    k = run_java_main("kafka-storage", args, timeout=120)
    assert k.returncode == 0, k.stderr
    dir_id = read_properties(data / "meta.properties")["directory.id"]
    broker.start()
    try:
        assert "kbroker started" in broker.log_text()
    finally:
        broker.stop()
    props = read_properties(data / "meta.properties")
    assert props["cluster.id"] == CLUSTER_ID and props["directory.id"] == dir_id
    uuid_from_base64(props["directory.id"])
    # Kafka 4.3's default features minus those kbroker does not implement (dropped with a warning).
    assert _bootstrap_features(data) == {"metadata.version": 30, "group.version": 1, "transaction.version": 2,
                                         "eligible.leader.replicas.version": 1}
    assert "Ignoring share.version=1" in broker.log_text()
    if quorum == "standalone":
        assert (data / CLUSTER_METADATA_DIR / "00000000000000000000-0000000000.checkpoint").exists()


def test_kbroker_starts_on_its_own_formatted_directory(tmp_path: Path) -> None:
    broker = KBroker(tmp_path / "node")
    cfg = _properties(tmp_path / "kb.properties", str(broker.log_dir))
    b = _kbroker("storage", "format", "-c", str(cfg), "-t", CLUSTER_ID, "--release-version", "3.9")
    assert b.returncode == 0, b.stderr
    broker.start()
    broker.stop()
    assert read_properties(broker.log_dir / "meta.properties")["cluster.id"] == CLUSTER_ID
    # The bootstrap file's metadata.version (3.9-IV0 = 21), not the default one.
    assert _bootstrap_features(broker.log_dir) == {"metadata.version": 21}
    services = build_services(KafkaConfig({"log.dirs": str(broker.log_dir), "node.id": "1"}))
    try:
        assert services.cluster_id == CLUSTER_ID
        assert image_records(services.metadata.image)[0] == FeatureLevelRecord(name="metadata.version", feature_level=21)
    finally:
        shutdown_services(services)


def test_kbroker_reads_kafka_written_snapshots(tmp_path: Path) -> None:
    """Snapshots Apache Kafka writes (format's KIP-853 checkpoint and bootstrap file here; a controller's
    image snapshot in test_kbroker_loads_a_reference_kafka_controller_snapshot) load in kbroker."""
    cfg = _properties(tmp_path / "kafka.properties", str(tmp_path / "kafka" / "data"), quorum="dynamic")
    k = run_java_main("kafka-storage", ["format", "-c", str(cfg), "-t", CLUSTER_ID, "--standalone"], timeout=120)
    assert k.returncode == 0, k.stderr
    boot = read_snapshot_file(tmp_path / "kafka" / "data" / "bootstrap.checkpoint")
    assert boot.records[0] == FeatureLevelRecord(name="metadata.version", feature_level=30)
    assert {r.name for r in boot.records} >= {"group.version", "transaction.version"}  # type: ignore[attr-defined]
    voters = read_snapshot_file(tmp_path / "kafka" / "data" / CLUSTER_METADATA_DIR
                                / "00000000000000000000-0000000000.checkpoint")
    assert voters.records == [] and voters.kraft_version == 1 and voters.voters is not None
    assert voters.voters.voters[0].voter_id == 1 and voters.voters.voters[0].endpoints[0].name == "CONTROLLER"
    assert (uuid_from_base64(read_properties(tmp_path / "kafka" / "data" / "meta.properties")["directory.id"])
            == voters.voters.voters[0].voter_directory_id)


@pytest.mark.reference
@pytest.mark.slow  # a whole reference Kafka (about 20 s)
def test_kbroker_loads_a_reference_kafka_controller_snapshot(tmp_path: Path) -> None:
    import time

    from confluent_kafka.admin import AdminClient, NewTopic

    from kbroker.metadata.image import MetadataProvenance
    from kbroker.metadata.loader import MetadataLoader
    from tests.support.reference_kafka import reference_unavailable_reason, start_reference_kafka

    reason = reference_unavailable_reason()
    if reason:
        pytest.skip(reason)
    bootstrap, stop = start_reference_kafka(
        tmp_path, overrides={"metadata.log.max.record.bytes.between.snapshots": "200"})
    try:
        names = [f"ref-{i}" for i in range(12)]
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for f in admin.create_topics([NewTopic(n, 2, 1, config={"retention.ms": "4321"}) for n in names]).values():
            f.result(60)
        meta = tmp_path / "reference-kafka" / "data" / CLUSTER_METADATA_DIR
        deadline = time.monotonic() + 60
        found: list[str] = []
        latest = None
        while time.monotonic() < deadline:
            snaps = sorted(p for p in meta.iterdir()
                           if (sp := parse_snapshot_path(p)) and not sp.partial and not sp.deleted
                           and sp.snapshot_id.offset > 0)
            if snaps:
                latest = snaps[-1]
                try:
                    contents = read_snapshot_file(latest)
                except (OSError, ValueError):
                    contents = None
                if contents is not None:
                    found = [r.name for r in contents.records if type(r).__name__ == "TopicRecord"]  # type: ignore[attr-defined]
                    if set(names) <= set(found):
                        break
            time.sleep(0.5)
        assert latest is not None and set(names) <= set(found), (latest, found)
    finally:
        stop()
    sp = parse_snapshot_path(latest)
    assert sp is not None
    contents = read_snapshot_file(latest)
    loader = MetadataLoader()
    image = loader.handle_load_snapshot(contents.records, MetadataProvenance(
        sp.snapshot_id.offset - 1, sp.snapshot_id.epoch, contents.last_contained_log_timestamp, True))
    for n in names:
        topic = image.topics.topics_by_name[n]
        assert len(topic.partitions) == 2
    assert image.features.metadata_version == 30
    # Written back by kbroker, the same image's records read back to the same image.
    from kbroker.snapshot import OffsetAndEpoch, build_snapshot, read_snapshot

    again = read_snapshot(build_snapshot(image_records(image), OffsetAndEpoch(sp.snapshot_id.offset, 1),
                                         last_contained_log_timestamp=0, now_ms=0))
    assert MetadataLoader().handle_load_snapshot(again.records, image.provenance) == image


def test_info_matches_kafka_storage_info(tmp_path: Path) -> None:
    formatted = tmp_path / "formatted"
    cfg = _properties(tmp_path / "one.properties", str(formatted))
    assert _kbroker("storage", "format", "-c", str(cfg), "-t", CLUSTER_ID).returncode == 0
    (tmp_path / "empty").mkdir()
    cfg = _properties(tmp_path / "info.properties",
                      f"{tmp_path / 'empty'},{tmp_path / 'missing'},{formatted}")
    for config in (tmp_path / "one.properties", cfg):
        k = run_java_main("kafka-storage", ["info", "--config", str(config)], timeout=120)
        b = _kbroker("storage", "info", "--config", str(config))
        assert (b.returncode, b.stdout) == (k.returncode, k.stdout)
    assert k.returncode == 1 and "is not formatted." in k.stdout


@pytest.mark.parametrize(("quorum", "args"), [
    ("static", ["--standalone"]),
    pytest.param("dynamic", [], marks=pytest.mark.slow),
    pytest.param("static", ["--feature", "foo.version=1"], marks=pytest.mark.slow),
    pytest.param("static", ["--release-version", "4.3", "--feature", "metadata.version=30"], marks=pytest.mark.slow),
])
def test_format_errors_match_kafka_storage(tmp_path: Path, quorum: str, args: list[str]) -> None:
    cfg = _properties(tmp_path / "e.properties", str(tmp_path / "data"), quorum=quorum)
    k = run_java_main("kafka-storage", ["format", "-c", str(cfg), "-t", CLUSTER_ID, *args], timeout=120)
    b = _kbroker("storage", "format", "-c", str(cfg), "-t", CLUSTER_ID, *args)
    assert k.returncode == b.returncode == 1
    assert b.stderr.strip() == k.stderr.strip()
    assert not (tmp_path / "data" / "meta.properties").exists()
