"""MetadataLoader: committed batches -> one delta -> new image -> publishers in order, on a fake clock."""

from __future__ import annotations

import pytest

from kbroker.metadata import (
    LoaderManifest,
    LogDeltaManifest,
    MetadataBatch,
    MetadataDelta,
    MetadataImage,
    MetadataLoader,
    MetadataProvenance,
    MetadataPublisher,
    MetadataReplayError,
    SnapshotManifest,
    TopicPartition,
    image_records,
)
from kbroker.protocol.metadata_records.serde import MetadataParseError, encode_metadata_record
from tests.metadata.records import FOO, RemoveTopicRecord, broker, change, feature, partition, topic


class FakeClock:
    def __init__(self) -> None:
        self.ns = 1_000

    def __call__(self) -> int:
        self.ns += 250
        return self.ns


class Recorder:
    def __init__(self, name: str, calls: list[tuple[str, MetadataDelta, MetadataImage, LoaderManifest]]) -> None:
        self._name = name
        self.calls = calls

    @property
    def name(self) -> str:
        return self._name

    def on_metadata_update(self, delta: MetadataDelta, new_image: MetadataImage, manifest: LoaderManifest) -> None:
        self.calls.append((self._name, delta, new_image, manifest))


class Failing(Recorder):
    def on_metadata_update(self, delta: MetadataDelta, new_image: MetadataImage, manifest: LoaderManifest) -> None:
        raise RuntimeError("boom")


def test_batches_are_published_once_in_order() -> None:
    calls: list[tuple[str, MetadataDelta, MetadataImage, LoaderManifest]] = []
    loader = MetadataLoader(clock_ns=FakeClock())
    first, second = Recorder("replica-manager", calls), Recorder("group-coordinator", calls)
    assert isinstance(first, MetadataPublisher)
    loader.install_publishers([first, second])
    assert calls == []  # nothing to show yet
    image = loader.handle_commit(
        [
            MetadataBatch(0, 1, 100, [feature("metadata.version", 27), broker(1)], size_in_bytes=80),
            MetadataBatch(2, 1, 200, [topic("foo", FOO), partition(FOO, 0, [1])], size_in_bytes=60),
        ]
    )
    assert [c[0] for c in calls] == ["replica-manager", "group-coordinator"]
    _, delta, new_image, manifest = calls[0]
    assert new_image is image is loader.image
    assert manifest == LogDeltaManifest(MetadataProvenance(3, 1, 200, True), 2, 250, 140)
    assert delta.topics_delta is not None and delta.topics_delta.created_topic_ids() == {FOO}
    assert delta.local_changes(1).elected_leaders.keys() == {TopicPartition("foo", 0)}
    assert loader.last_applied_offset == 3

    calls.clear()
    loader.handle_commit([MetadataBatch(4, 2, 300, [change(FOO, 0, isr=[1], leader=1)])])
    _, delta, new_image, manifest = calls[0]
    assert isinstance(manifest, LogDeltaManifest) and manifest.provenance.last_contained_epoch == 2
    p = new_image.partition("foo", 0)
    assert p is not None and p.leader_epoch == 1
    assert delta.image is image  # the delta is relative to the previous image
    assert loader.handle_commit([]) is new_image and len(calls) == 2  # nothing new: nothing published

    with pytest.raises(ValueError):
        loader.handle_commit([MetadataBatch(4, 2, 300, [])])  # not after the current offset


def test_a_late_publisher_is_shown_the_current_image() -> None:
    calls: list[tuple[str, MetadataDelta, MetadataImage, LoaderManifest]] = []
    loader = MetadataLoader(clock_ns=FakeClock())
    loader.handle_commit([MetadataBatch(0, 1, 100, [broker(1), topic("foo", FOO), partition(FOO, 0, [1])])])
    loader.install_publishers([Recorder("late", calls)])
    (_, delta, image, manifest), = calls
    assert image is loader.image
    assert isinstance(manifest, SnapshotManifest) and manifest.provenance == loader.image.provenance
    assert delta.image == MetadataImage.EMPTY
    assert delta.apply(image.provenance) == image  # the whole image, as a delta from nothing
    assert delta.local_changes(1).leaders.keys() == {TopicPartition("foo", 0)}
    with pytest.raises(ValueError):
        loader.install_publishers([Recorder("late", calls)])
    assert loader.remove_publisher("late") is not None and loader.publishers == ()


def test_snapshot_load_replaces_the_image() -> None:
    loader = MetadataLoader(clock_ns=FakeClock())
    loader.handle_commit([MetadataBatch(0, 1, 100, [topic("foo", FOO), partition(FOO, 0, [1])])])
    source = loader.image
    other = MetadataLoader(clock_ns=FakeClock())
    calls: list[tuple[str, MetadataDelta, MetadataImage, LoaderManifest]] = []
    other.install_publishers([Recorder("p", calls)])
    image = other.handle_load_snapshot(image_records(source), source.provenance)
    assert image == source and isinstance(calls[0][3], SnapshotManifest)
    # Later batches apply on top of the snapshot.
    other.handle_commit([MetadataBatch(2, 1, 200, [RemoveTopicRecord(topic_id=FOO)])])
    assert other.image.topic("foo") is None
    assert calls[-1][1].local_changes(1).deletes == {TopicPartition("foo", 0)}


def test_replay_errors_without_a_fault_handler_publish_nothing() -> None:
    calls: list[tuple[str, MetadataDelta, MetadataImage, LoaderManifest]] = []
    loader = MetadataLoader(clock_ns=FakeClock())
    loader.install_publishers([Recorder("p", calls)])
    with pytest.raises(MetadataReplayError):
        loader.handle_commit([MetadataBatch(0, 1, 100, [topic("foo", FOO), partition(FOO, 0, [1]),
                                                        change(FOO, 7, leader=1)])])  # fmt: skip
    assert calls == [] and loader.image is MetadataImage.EMPTY


def test_fault_handler_skips_bad_records_and_failing_publishers() -> None:
    faults: list[str] = []
    calls: list[tuple[str, MetadataDelta, MetadataImage, LoaderManifest]] = []
    loader = MetadataLoader(clock_ns=FakeClock(), fault_handler=lambda msg, exc: faults.append(msg))
    loader.install_publishers([Failing("broken", calls), Recorder("ok", calls)])
    loader.handle_commit([MetadataBatch(5, 1, 100, [topic("foo", FOO), change(FOO, 7, leader=1),
                                                    partition(FOO, 0, [1])])])  # fmt: skip
    assert loader.image.partition("foo", 0) is not None and loader.last_applied_offset == 7
    assert len(faults) == 2
    assert "PartitionChangeRecord" in faults[0] and "offset 5" in faults[0]
    assert "publisher broken failed" in faults[1]
    assert [c[0] for c in calls] == ["ok"]  # the failing publisher did not stop the next one


def test_batches_decode_from_wire_values() -> None:
    records = [feature("metadata.version", 30), topic("foo", FOO), partition(FOO, 0, [1])]
    batch = MetadataBatch.decode(7, 2, 99, [encode_metadata_record(r) for r in records], size_in_bytes=64)
    assert batch == MetadataBatch(7, 2, 99, records, 64) and batch.last_offset == 9
    with pytest.raises(MetadataParseError):
        MetadataBatch.decode(0, 1, 0, [b"\x01\x02"])
