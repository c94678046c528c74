"""kbroker.metadata against Apache Kafka's own MetadataDelta/MetadataImage (kafka-metadata 4.3.1).

One scenario of metadata records (brokers, features, topics created, changed, reassigned, deleted and
re-created, configs, producer ids, ELR) is replayed by Kafka (``java/DumpMetadataImage.java``, from
the records' wire bytes) and by kbroker.metadata; the images after every apply and the local replica
changes of several brokers must print the same.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from kbroker.metadata import MetadataDelta, MetadataImage, MetadataProvenance
from kbroker.protocol.metadata_records.clear_elr_record import ClearElrRecord
from kbroker.protocol.metadata_records.serde import encode_metadata_record
from tests.metadata.records import (
    BAR,
    BAZ,
    DIR_A,
    DIR_B,
    FOO,
    BrokerRegistrationChangeRecord,
    FenceBrokerRecord,
    NoOpRecord,
    RemoveTopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
    broker,
    change,
    config,
    feature,
    partition,
    producer_ids,
    topic,
)

JAVA_SOURCE = Path(__file__).resolve().parent / "java" / "DumpMetadataImage.java"
BROKERS = (1, 2, 3)


def _apply(offset: int) -> tuple[str, int, int]:
    return ("apply", offset, 1)


SCENARIO: list[object] = [
    feature("metadata.version", 30),
    feature("kraft.version", 1),
    feature("transaction.version", 2),
    broker(1),
    broker(2, rack="r2"),
    broker(3),
    UnfenceBrokerRecord(id=1, epoch=10),
    UnfenceBrokerRecord(id=2, epoch=10),
    topic("foo", FOO),
    partition(FOO, 0, [1, 2, 3]),
    partition(FOO, 1, [2, 3, 1], directories=[DIR_A, DIR_B, DIR_A]),
    partition(FOO, 2, [3, 1]),
    config(2, "foo", "cleanup.policy", "compact"),
    topic("bar", BAR),
    partition(BAR, 0, [3, 1]),
    config(2, "bar", "retention.ms", "1000"),
    config(4, "", "log.retention.ms", "5000"),
    config(4, "2", "log.cleaner.threads", "2"),
    producer_ids(1000),
    *[("local", b) for b in BROKERS],
    _apply(20),
    change(FOO, 0, isr=[1, 2]),
    change(FOO, 1, leader=3, isr=[3, 1]),
    change(FOO, 2, replicas=[3, 1, 2], adding_replicas=[2], isr=[3, 1]),
    partition(FOO, 3, [2, 1]),
    NoOpRecord(),
    UnfenceBrokerRecord(id=3, epoch=10),
    BrokerRegistrationChangeRecord(broker_id=2, broker_epoch=10, in_controlled_shutdown=1, log_dirs=[DIR_B, DIR_A]),
    config(2, "foo", "cleanup.policy", None),
    config(2, "foo", "retention.ms", "60000"),
    BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=10, cordoned_log_dirs=[DIR_B, DIR_A]),
    ClearElrRecord(topic_name=""),
    *[("local", b) for b in BROKERS],
    _apply(30),
    change(FOO, 2, replicas=[3, 2], adding_replicas=[], isr=[3, 2]),
    change(FOO, 0, leader=-1, leader_recovery_state=1, isr=[2]),
    change(FOO, 1, isr=[3], eligible_leader_replicas=[1], last_known_elr=[2]),
    RemoveTopicRecord(topic_id=BAR),
    FenceBrokerRecord(id=1, epoch=10),
    producer_ids(2000),
    feature("transaction.version", 0),
    *[("local", b) for b in BROKERS],
    _apply(40),
    change(FOO, 0, leader=2, leader_recovery_state=0),
    ClearElrRecord(topic_name="foo"),
    BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=10, cordoned_log_dirs=[]),
    RemoveTopicRecord(topic_id=FOO),
    topic("foo", BAZ),
    partition(BAZ, 0, [1, 2]),
    UnregisterBrokerRecord(broker_id=3, broker_epoch=10),
    broker(3, epoch=20),
    *[("local", b) for b in BROKERS],
    _apply(50),
]


def _uuids(values: tuple[uuid.UUID, ...] | list[uuid.UUID]) -> str:
    return "[" + ",".join(str(u) for u in values) + "]"


def _ints(values: tuple[int, ...]) -> str:
    return "[" + ",".join(str(v) for v in values) + "]"


def _dump(image: MetadataImage) -> list[str]:
    p = image.provenance
    out = [f"image {p.last_contained_offset} {p.last_contained_epoch}"]
    if image.features.metadata_version is not None:
        out.append(f"feature metadata.version {image.features.metadata_version}")
    out += [f"feature {k} {v}" for k, v in sorted(image.features.finalized_versions.items())]
    for _, b in sorted(image.cluster.brokers.items()):
        listeners = ",".join(
            f"{e.listener_name}:{e.host}:{e.port}:{e.security_protocol}" for _, e in sorted(b.listeners.items())
        )
        features = ",".join(f"{n}:{v.min}-{v.max}" for n, v in sorted(b.supported_features.items()))
        out.append(
            f"broker {b.id} epoch={b.epoch} incarnation={b.incarnation_id} fenced={str(b.fenced).lower()} "
            f"shutdown={str(b.in_controlled_shutdown).lower()} rack={b.rack or 'null'} listeners={listeners} "
            f"features={features} dirs={_uuids(b.directories)} cordoned={'null' if b.cordoned_directories is None else _uuids(b.cordoned_directories)}"
        )
    for name, t in sorted(image.topics.topics_by_name.items()):
        out.append(f"topic {name} {t.id}")
        for index, r in sorted(t.partitions.items()):
            out.append(
                f"partition {name}-{index} replicas={_ints(r.replicas)} isr={_ints(r.isr)} "
                f"removing={_ints(r.removing_replicas)} adding={_ints(r.adding_replicas)} leader={r.leader} "
                f"lrs={int(r.leader_recovery_state)} le={r.leader_epoch} pe={r.partition_epoch} "
                f"dirs={_uuids(r.directories)} elr={_ints(r.elr)} lkelr={_ints(r.last_known_elr)}"
            )
    configs = [
        f"config {int(res.type)} '{res.name}' {k}={v}"
        for res, data in image.configs.configs.items()
        for k, v in data.items()
    ]
    out += sorted(configs)
    out.append(f"producerIds {image.producer_ids.next_producer_id}")
    return out


def _local(delta: MetadataDelta, broker_id: int) -> list[str]:
    out = [f"local {broker_id}"]
    if delta.topics_delta is None:
        return out
    c = delta.topics_delta.local_changes(broker_id)
    lines = [f"delete {t.topic}-{t.partition}" for t in c.deletes]
    lines += [
        f"leader {t.topic}-{t.partition} elected={str(t in c.elected_leaders).lower()} id={i.topic_id} "
        f"le={i.partition.leader_epoch} pe={i.partition.partition_epoch}"
        for t, i in c.leaders.items()
    ]
    lines += [
        f"follower {t.topic}-{t.partition} id={i.topic_id} le={i.partition.leader_epoch} pe={i.partition.partition_epoch}"
        for t, i in c.followers.items()
    ]
    lines += [f"topicId {name} {tid}" for name, tid in c.topic_ids.items()]
    lines += [f"directory {tip.topic_id}-{tip.partition} {d}" for tip, d in c.directory_ids.items()]
    return out + sorted(lines)


def _ours() -> tuple[list[str], list[str]]:
    """(the input lines for Java, our output)."""
    lines: list[str] = []
    out: list[str] = []
    delta = MetadataDelta(MetadataImage.EMPTY)
    for step in SCENARIO:
        if isinstance(step, tuple) and step[0] == "local":
            lines.append(f"local {step[1]}")
            out += _local(delta, int(step[1]))
        elif isinstance(step, tuple) and step[0] == "apply":
            _, offset, epoch = step
            lines.append(f"apply {offset} {epoch}")
            image = delta.apply(MetadataProvenance(int(offset), int(epoch), 0, True))
            out += _dump(image)
            delta = MetadataDelta(image)
        else:
            lines.append(f"record {encode_metadata_record(step).hex()}")
            delta.replay(step)
    return lines, out


def test_the_scenario_exercises_every_local_change_kind() -> None:
    _, out = _ours()
    kinds = {line.split()[0] for line in out}
    assert {"delete", "leader", "follower", "topicId", "directory", "partition", "config", "broker"} <= kinds
    assert any("elected=true" in line for line in out) and any("elected=false" in line for line in out)


@pytest.mark.java
def test_kafka_metadata_delta_builds_the_same_images(tmp_path: Path) -> None:
    support = pytest.importorskip("tests.support.java", reason="tests/support/java.py not importable")
    reason = support.java_unavailable_reason()
    if reason:
        pytest.skip(reason)
    lines, ours = _ours()
    (tmp_path / "scenario.txt").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    proc = support.run_java_main(str(JAVA_SOURCE), [str(tmp_path / "scenario.txt")], timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines() == ours
