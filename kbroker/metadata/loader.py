"""`MetadataLoader`: committed metadata record batches in, images and publisher calls out (Kafka's
`MetadataLoader`).

Each committed batch becomes one `MetadataDelta` over the current image; the next image is built and
every publisher is told, in the order they were installed (the `MetadataCache` first, so every later
publisher and every request already sees the new image). A publisher that fails is logged and the
others still run, as Kafka's loader does (it reports the fault and carries on).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Protocol

from kbroker.metadata.delta import MetadataDelta
from kbroker.metadata.image import MetadataImage, MetadataProvenance

log = logging.getLogger(__name__)


class MetadataPublisher(Protocol):
    """Told of every new image, with the delta that produced it."""

    name: str

    def on_metadata_update(self, delta: MetadataDelta, image: MetadataImage) -> None: ...


class MetadataLoader:
    def __init__(self, image: MetadataImage | None = None) -> None:
        self.image = image if image is not None else MetadataImage.EMPTY
        self.publishers: list[MetadataPublisher] = []

    def install_publisher(self, publisher: MetadataPublisher) -> None:
        self.publishers.append(publisher)

    def handle_commit(self, last_offset: int, records: Sequence[object], epoch: int = 1,
                      log_time_ms: int = -1) -> MetadataDelta:
        delta = MetadataDelta(self.image)
        for record in records:
            delta.replay(record)
        self.image = delta.apply(MetadataProvenance(last_offset, epoch, log_time_ms))
        for publisher in self.publishers:
            try:
                publisher.on_metadata_update(delta, self.image)
            except Exception:
                log.exception("Metadata publisher %s failed on the image at offset %d", publisher.name,
                              last_offset)
        return delta
