"""When to write a snapshot of the image (Kafka's ``org.apache.kafka.image.publisher.SnapshotGenerator``).

A ``MetadataPublisher``: every delta read from the log adds its batches' bytes; once
``metadata.log.max.record.bytes.between.snapshots`` bytes (20 MiB) were replayed since the last
snapshot, or a delta arrives ``metadata.log.max.snapshot.interval.ms`` (1 h; 0 turns the time rule
off) after it, the image is handed to the ``emitter`` with the reason, and the counters restart. An
image loaded from a snapshot restarts them too. As in Kafka, the time rule is checked only when a new
delta arrives (an idle log gets no new snapshot), an image that is not batch-aligned is not emitted,
and an emitter that fails is reported to the fault handler, not raised into the loader.

Sans-IO: the emitter (the metadata log's ``create_snapshot``) does the writing; the clock is injected.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from kbroker.metadata.delta import MetadataDelta
from kbroker.metadata.image import MetadataImage
from kbroker.metadata.loader import LoaderManifest, LogDeltaManifest

log = logging.getLogger(__name__)

Emitter = Callable[[MetadataImage, str], None]


def snapshot_name(image: MetadataImage) -> str:
    """``MetadataProvenance.snapshotName``: ``<offset + 1:020d>-<epoch:010d>``."""
    p = image.provenance
    return f"{p.last_contained_offset + 1:020d}-{p.last_contained_epoch:010d}"


class SnapshotGenerator:
    def __init__(
        self,
        emitter: Emitter,
        *,
        max_bytes_since_last_snapshot: int,
        max_time_since_last_snapshot_ms: int,
        time_ms: Callable[[], int],
        fault_handler: Callable[[str, Exception], None] | None = None,
    ) -> None:
        self._emitter = emitter
        self.max_bytes_since_last_snapshot = max_bytes_since_last_snapshot
        self.max_time_since_last_snapshot_ms = max_time_since_last_snapshot_ms
        self._time_ms = time_ms
        self._fault_handler = fault_handler
        self.bytes_since_last_snapshot = 0
        self.last_snapshot_time_ms = time_ms()
        self.disabled_reason: str | None = None

    @property
    def name(self) -> str:
        return "SnapshotGenerator"

    def reset_snapshot_counters(self) -> None:
        self.bytes_since_last_snapshot = 0
        self.last_snapshot_time_ms = self._time_ms()

    def on_metadata_update(self, delta: MetadataDelta, new_image: MetadataImage, manifest: LoaderManifest) -> None:
        if not isinstance(manifest, LogDeltaManifest):
            log.debug("Resetting the snapshot counters because we just read %s.", snapshot_name(new_image))
            self.reset_snapshot_counters()
            return
        self.bytes_since_last_snapshot += manifest.num_bytes
        if self.bytes_since_last_snapshot >= self.max_bytes_since_last_snapshot:
            self._maybe_emit(f"we have replayed at least {self.max_bytes_since_last_snapshot} bytes", new_image)
        elif (self.max_time_since_last_snapshot_ms != 0
              and self._time_ms() - self.last_snapshot_time_ms >= self.max_time_since_last_snapshot_ms):
            minutes = self.max_time_since_last_snapshot_ms // 60000
            self._maybe_emit(f"we have waited at least {minutes} minute(s)", new_image)

    def _maybe_emit(self, reason: str, image: MetadataImage) -> None:
        if self.disabled_reason is not None:
            log.error("Not emitting %s despite the fact that %s because snapshots are disabled; %s",
                      snapshot_name(image), reason, self.disabled_reason)
            return
        if not image.provenance.is_offset_batch_aligned:
            log.debug("Not emitting %s: the metadata image is not batch aligned", snapshot_name(image))
            return
        self.reset_snapshot_counters()
        log.info("Creating new KRaft snapshot file %s because %s.", snapshot_name(image), reason)
        try:
            self._emitter(image, reason)
        except Exception as e:
            if self._fault_handler is None:
                raise
            self._fault_handler("KRaft snapshot file generation error", e)
