"""`MetadataCache`: the broker's current metadata image, for the APIs to read (Kafka's
`KRaftMetadataCache`).

The first publisher the `MetadataLoader` tells of a new image: it swaps in a `MetadataView` of that
image, so every later publisher and every request sees the new topics and configs. Reads are lookups
in dicts built once per image; `epoch` counts the images seen (a cheap staleness check for caches
built from the image).

Sans-IO; imports only metadata/.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

from kbroker.metadata.delta import MetadataDelta
from kbroker.metadata.image import MetadataImage
from kbroker.metadata.loader import LoaderManifest
from kbroker.metadata.views import MetadataView, TopicInfo


class MetadataCache:
    """The latest image as seen by broker `node_id`."""

    name = "MetadataCache"

    def __init__(self, node_id: int, image: MetadataImage | None = None) -> None:
        self.node_id = node_id
        self.view = MetadataView(image if image is not None else MetadataImage.EMPTY, node_id)
        self.epoch = 0

    @property
    def image(self) -> MetadataImage:
        return self.view.image

    def on_metadata_update(self, delta: MetadataDelta, image: MetadataImage, manifest: LoaderManifest) -> None:
        self.view = MetadataView(image, self.node_id)
        self.epoch += 1

    def topic(self, name: str) -> TopicInfo | None:
        return self.view.topic(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        return self.view.topic_by_id(topic_id)

    def topics(self) -> list[TopicInfo]:
        return self.view.topics()

    def __iter__(self) -> Iterator[TopicInfo]:
        return iter(self.view)

    @property
    def broker_configs(self) -> dict[str, str]:
        return self.view.broker_configs
