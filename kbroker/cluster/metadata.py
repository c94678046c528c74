"""The single-node metadata image: topics (names, ids, partition counts, config overrides), dynamic
broker configs and the producer-id block, persisted atomically as JSON.

Divergence from Kafka, documented in docs/compatibility.md: Kafka keeps this image in the
`__cluster_metadata` KRaft log and replays it; a single node has no quorum to replicate it to, so a
JSON file written with write-temp + fsync + rename gives the same crash atomicity at a fraction of
the code. The topic ids stored here must agree with each partition's `partition.metadata` (written
by the log layer).

Synchronous and asyncio-free; must not import net/, api/ or replica/.
"""

from __future__ import annotations

import json
import os
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

METADATA_FILE_NAME = "__kbroker_metadata.json"

# Kafka's controller hands producer ids to brokers in blocks of 1000 (ProducerIdManager,
# AllocateProducerIds); we reserve a block in the persisted image before handing out any id of it,
# so a crash can skip ids but never reuse one.
PRODUCER_ID_BLOCK_SIZE = 1000

_FORMAT_VERSION = 1


@dataclass
class TopicInfo:
    """One topic as the metadata image knows it. `configs` holds only the topic's overrides."""

    name: str
    topic_id: uuid.UUID
    num_partitions: int
    replication_factor: int = 1
    configs: dict[str, str] = field(default_factory=dict)
    is_internal: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "topic_id": str(self.topic_id),
            "num_partitions": self.num_partitions,
            "replication_factor": self.replication_factor,
            "configs": dict(self.configs),
            "is_internal": self.is_internal,
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> TopicInfo:
        return cls(
            name=str(obj["name"]),
            topic_id=uuid.UUID(obj["topic_id"]),
            num_partitions=int(obj["num_partitions"]),
            replication_factor=int(obj.get("replication_factor", 1)),
            configs={str(k): str(v) for k, v in obj.get("configs", {}).items()},
            is_internal=bool(obj.get("is_internal", False)),
        )


class MetadataLoadError(Exception):
    """The persisted image cannot be read (truncated, not JSON, wrong shape): the broker does not start."""


class MetadataStore:
    """Topics, dynamic broker configs and producer-id reservations, saved on every change."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._topics: dict[str, TopicInfo] = {}
        self._by_id: dict[uuid.UUID, TopicInfo] = {}
        self._broker_configs: dict[str, str] = {}
        # Next producer id to hand out and the end (exclusive) of the reserved block.
        self._next_producer_id = 0
        self._producer_id_block_end = 0
        # Bumped on every change: cheap staleness check for caches built from the image.
        self.epoch = 0
        self._lock = threading.Lock()

    # -- persistence -------------------------------------------------------------------------

    def load(self) -> None:
        """Read the image from disk; a missing file is an empty image (a freshly formatted node)."""
        try:
            raw = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return
        except (OSError, UnicodeDecodeError) as e:
            raise MetadataLoadError(f"Cannot read the metadata image {self.path}: {e}") from None
        try:
            obj = json.loads(raw)
            topics = [TopicInfo.from_json(t) for t in obj.get("topics", [])]
            broker_configs = {str(k): str(v) for k, v in obj.get("broker_configs", {}).items()}
            end = int(obj.get("producer_id_block_end", 0))
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            # Written by rename, so only an outside hand truncates it: refuse rather than start empty
            # (an empty image would delete every partition's data as strays).
            reason = f"{type(e).__name__}: {e}" if not isinstance(e, json.JSONDecodeError) else \
                f"not valid JSON ({e}; truncated?)"
            raise MetadataLoadError(f"Cannot load the metadata image {self.path}: {reason}. Restore the file "
                                    "from a backup; kbroker does not start on a damaged image") from None
        self._topics = {}
        self._by_id = {}
        for info in topics:
            self._topics[info.name] = info
            self._by_id[info.topic_id] = info
        self._broker_configs = broker_configs
        # Ids up to the end of the last reserved block may have been handed out before a crash:
        # restart from the block end.
        self._next_producer_id = end
        self._producer_id_block_end = end
        self.epoch += 1

    def _save(self) -> None:
        obj = {
            "version": _FORMAT_VERSION,
            "topics": [t.to_json() for t in sorted(self._topics.values(), key=lambda t: t.name)],
            "broker_configs": dict(sorted(self._broker_configs.items())),
            "producer_id_block_end": self._producer_id_block_end,
        }
        data = json.dumps(obj, indent=1).encode("utf-8")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
        try:
            dfd = os.open(self.path.parent, os.O_RDONLY)
        except OSError:
            return
        try:
            os.fsync(dfd)
        except OSError:
            pass
        finally:
            os.close(dfd)

    # -- topics --------------------------------------------------------------------------------

    def topics(self) -> list[TopicInfo]:
        return list(self._topics.values())

    def __iter__(self) -> Iterator[TopicInfo]:
        return iter(list(self._topics.values()))

    def topic(self, name: str) -> TopicInfo | None:
        return self._topics.get(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        return self._by_id.get(topic_id)

    def put_topic(self, info: TopicInfo) -> None:
        """Add or replace a topic (same name: new partition count or configs) and save."""
        with self._lock:
            old = self._topics.get(info.name)
            if old is not None and old.topic_id != info.topic_id:
                self._by_id.pop(old.topic_id, None)
            self._topics[info.name] = info
            self._by_id[info.topic_id] = info
            self.epoch += 1
            self._save()

    def remove_topic(self, name: str) -> TopicInfo | None:
        with self._lock:
            info = self._topics.pop(name, None)
            if info is None:
                return None
            self._by_id.pop(info.topic_id, None)
            self.epoch += 1
            self._save()
            return info

    # -- dynamic broker configs ------------------------------------------------------------------

    @property
    def broker_configs(self) -> dict[str, str]:
        return dict(self._broker_configs)

    def set_broker_configs(self, configs: dict[str, str]) -> None:
        with self._lock:
            self._broker_configs = dict(configs)
            self.epoch += 1
            self._save()

    # -- producer ids ----------------------------------------------------------------------------

    def allocate_producer_id(self) -> int:
        """A producer id never handed out before, across restarts (block reserved on disk first)."""
        with self._lock:
            if self._next_producer_id >= self._producer_id_block_end:
                self._producer_id_block_end = self._next_producer_id + PRODUCER_ID_BLOCK_SIZE
                self._save()
            pid = self._next_producer_id
            self._next_producer_id += 1
            return pid
