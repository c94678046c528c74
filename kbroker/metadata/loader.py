"""Replaying committed metadata into images and telling publishers (Kafka's ``MetadataLoader``).

The loader owns the current ``MetadataImage``. ``handle_commit(batches)`` replays committed record
batches of the metadata log into one ``MetadataDelta``, applies it, and calls every installed
``MetadataPublisher`` in installation order with ``(delta, new_image, LogDeltaManifest)``;
``handle_load_snapshot(records, provenance)`` replaces the image by a snapshot's (a delta from the
empty image, ``SnapshotManifest``). A publisher installed after the first image gets that image at
once, as a delta from the empty image rebuilt from the image's records (``image_records``), as Kafka
does, so it never misses state.

Synchronous and sans-IO: the caller (the broker's metadata log reader, or a controller replaying its
log at start) decides when to call; the clock is injected for the manifests' elapsed times.

Faults: without a ``fault_handler`` a record that cannot be replayed, or a publisher that raises,
propagates the exception, and a failed replay publishes nothing (the image stays as it was). With one,
the loader reports the fault and goes on, as Kafka's broker does (a metadata loading fault is logged
and counted, the record skipped; a failing publisher does not stop the others).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from kbroker.metadata.delta import MetadataDelta
from kbroker.metadata.image import MetadataImage, MetadataProvenance
from kbroker.metadata.image_writer import image_records
from kbroker.protocol.metadata_records.serde import decode_metadata_record


@dataclass(frozen=True, slots=True)
class MetadataBatch:
    """One committed batch of the metadata log, its records already decoded."""

    base_offset: int
    epoch: int
    append_timestamp_ms: int
    records: Sequence[object]
    size_in_bytes: int = 0

    @property
    def last_offset(self) -> int:
        return self.base_offset + max(len(self.records), 1) - 1

    @classmethod
    def decode(
        cls,
        base_offset: int,
        epoch: int,
        append_timestamp_ms: int,
        values: Iterable[bytes | bytearray | memoryview],
        size_in_bytes: int = 0,
    ) -> MetadataBatch:
        """A batch from the record values of a (non-control) batch of ``__cluster_metadata``, each
        framed by Kafka's MetadataRecordSerde; raises ``MetadataParseError`` on a malformed value."""
        return cls(base_offset, epoch, append_timestamp_ms, [decode_metadata_record(v) for v in values], size_in_bytes)


@dataclass(frozen=True, slots=True)
class LogDeltaManifest:
    """A delta read from the log (Kafka's LogDeltaManifest)."""

    provenance: MetadataProvenance
    num_batches: int
    elapsed_ns: int
    num_bytes: int


@dataclass(frozen=True, slots=True)
class SnapshotManifest:
    """A whole image loaded from a snapshot, or shown to a newly installed publisher."""

    provenance: MetadataProvenance
    elapsed_ns: int


LoaderManifest = LogDeltaManifest | SnapshotManifest


@runtime_checkable
class MetadataPublisher(Protocol):
    """Told of every new image (Kafka's MetadataPublisher)."""

    @property
    def name(self) -> str: ...

    def on_metadata_update(self, delta: MetadataDelta, new_image: MetadataImage, manifest: LoaderManifest) -> None: ...


FaultHandler = Callable[[str, Exception], None]


class MetadataLoader:
    def __init__(
        self,
        *,
        clock_ns: Callable[[], int] = time.monotonic_ns,
        fault_handler: FaultHandler | None = None,
    ) -> None:
        self._clock_ns = clock_ns
        self._fault_handler = fault_handler
        self._image = MetadataImage.EMPTY
        self._publishers: list[MetadataPublisher] = []

    @property
    def image(self) -> MetadataImage:
        return self._image

    @property
    def publishers(self) -> tuple[MetadataPublisher, ...]:
        return tuple(self._publishers)

    @property
    def last_applied_offset(self) -> int:
        return self._image.provenance.last_contained_offset

    # -- publishers ------------------------------------------------------------------------------------

    def install_publishers(self, publishers: Iterable[MetadataPublisher]) -> None:
        """Add publishers (names must be unique); each is shown the current image right away."""
        new = list(publishers)
        names = [p.name for p in self._publishers] + [p.name for p in new]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate publisher name among {names}")
        self._publishers.extend(new)
        if self._image.is_empty() and self._image.provenance == MetadataProvenance.EMPTY:
            return
        start = self._clock_ns()
        delta = MetadataDelta(MetadataImage.EMPTY)
        delta.replay_all(image_records(self._image))
        manifest = SnapshotManifest(self._image.provenance, self._clock_ns() - start)
        for p in new:
            self._publish(p, delta, self._image, manifest)

    def remove_publisher(self, name: str) -> MetadataPublisher | None:
        for i, p in enumerate(self._publishers):
            if p.name == name:
                return self._publishers.pop(i)
        return None

    # -- input -----------------------------------------------------------------------------------------

    def handle_commit(self, batches: Iterable[MetadataBatch]) -> MetadataImage:
        """Replay committed batches (in log order, after the current offset) and publish once."""
        start = self._clock_ns()
        delta = MetadataDelta(self._image)
        count = size = 0
        last: MetadataBatch | None = None
        for batch in batches:
            if batch.base_offset <= self._image.provenance.last_contained_offset:
                raise ValueError(
                    f"batch at offset {batch.base_offset} is not after the image's offset "
                    f"{self._image.provenance.last_contained_offset}"
                )
            for record in batch.records:
                self._replay(delta, record, batch)
            count += 1
            size += batch.size_in_bytes
            last = batch
        if last is None:
            return self._image
        provenance = MetadataProvenance(last.last_offset, last.epoch, last.append_timestamp_ms, True)
        manifest = LogDeltaManifest(provenance, count, self._clock_ns() - start, size)
        return self._apply_and_publish(delta, provenance, manifest)

    def handle_load_snapshot(self, records: Iterable[object], provenance: MetadataProvenance) -> MetadataImage:
        """Replace the image by a snapshot's records (replayed from the empty image)."""
        start = self._clock_ns()
        delta = MetadataDelta(MetadataImage.EMPTY)
        for record in records:
            self._replay(delta, record, None)
        manifest = SnapshotManifest(provenance, self._clock_ns() - start)
        return self._apply_and_publish(delta, provenance, manifest)

    # -- internals -------------------------------------------------------------------------------------

    def _replay(self, delta: MetadataDelta, record: object, batch: MetadataBatch | None) -> None:
        try:
            delta.replay(record)
        except (ValueError, TypeError) as exc:
            if self._fault_handler is None:
                raise
            where = "snapshot" if batch is None else f"batch at offset {batch.base_offset}"
            self._fault_handler(f"error replaying {type(record).__name__} of the {where}: {exc}", exc)

    def _apply_and_publish(
        self, delta: MetadataDelta, provenance: MetadataProvenance, manifest: LoaderManifest
    ) -> MetadataImage:
        image = delta.apply(provenance)
        self._image = image
        for p in list(self._publishers):
            self._publish(p, delta, image, manifest)
        return image

    def _publish(
        self, publisher: MetadataPublisher, delta: MetadataDelta, image: MetadataImage, manifest: LoaderManifest
    ) -> None:
        try:
            publisher.on_metadata_update(delta, image, manifest)
        except Exception as exc:
            if self._fault_handler is None:
                raise
            self._fault_handler(f"publisher {publisher.name} failed on offset {image.offset}: {exc}", exc)
