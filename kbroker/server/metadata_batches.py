"""What a broker reads out of its local `__cluster_metadata-0`: the batches, decoded for the loader.

The log itself is the Raft package's `kbroker.raft.KafkaMetadataLog` (Kafka's `kafka.raft.KafkaMetadataLog`),
the same class, directory and bytes a controller's Raft client keeps: batches fetched from the quorum
leader are appended with the offsets and epochs the leader assigned, a diverging epoch truncates the
tail, and a fetched snapshot replaces the whole log. This module is the observer's read side: every
whole batch between two offsets (`read_batches`), a data batch's metadata records decoded with Kafka's
MetadataRecordSerde (`decode_batch`); control batches (LeaderChange, SnapshotHeader, SnapshotFooter,
KRaftVersion, Voters) only move the offset.

Synchronous, no asyncio: the fetcher calls it on the event loop (metadata is small).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass

from kbroker.metadata.loader import MetadataBatch
from kbroker.protocol.metadata_records.serde import MetadataParseError, decode_metadata_record
from kbroker.protocol.records import RecordBatch, iter_whole_batches
from kbroker.raft.metadata_log import KafkaMetadataLog

_READ_CHUNK = 4 * 1024 * 1024

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ReadBatch:
    """One batch read back from the log: its offsets and, for a data batch, its decoded records."""

    base_offset: int
    next_offset: int
    epoch: int
    is_control: bool
    metadata: MetadataBatch | None


def decode_batch(batch: RecordBatch, size: int) -> MetadataBatch:
    """The metadata records of a data batch. A record kbroker cannot decode is logged and left out, as
    Kafka's loader reports a metadata loading fault and goes on (the rest of the batch still applies)."""
    records: list[object] = []
    for r in batch.iter_records():
        if r.value is None:
            continue
        try:
            records.append(decode_metadata_record(r.value))
        except MetadataParseError as exc:
            log.error("Metadata loading fault: cannot decode the record at offset %d: %s", r.offset, exc)
    return MetadataBatch(batch.base_offset, batch.partition_leader_epoch, batch.max_timestamp, records, size)


def iter_batches(buf: memoryview) -> Iterator[tuple[RecordBatch, int]]:
    """Whole batches in `buf` with their sizes (a partial batch at the end is left out)."""
    return ((b, len(b.buf)) for b in iter_whole_batches(buf))


def read_batches(metadata_log: KafkaMetadataLog, start: int, end: int) -> Iterator[ReadBatch]:
    """Every batch from `start` (a batch boundary) up to `end` (exclusive: whole batches whose last
    offset is below `end`)."""
    offset = max(start, metadata_log.start_offset())
    while offset < min(end, metadata_log.end_offset()):
        data = metadata_log.read(offset, _READ_CHUNK)
        if not data:
            return
        progressed = False
        for batch, size in iter_batches(memoryview(data)):
            if batch.next_offset <= offset:
                continue
            if batch.next_offset > end:
                return
            progressed = True
            offset = batch.next_offset
            meta = None if batch.is_control else decode_batch(batch, size)
            yield ReadBatch(batch.base_offset, batch.next_offset, batch.partition_leader_epoch,
                            batch.is_control, meta)
        if not progressed:
            return
