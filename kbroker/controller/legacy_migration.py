"""First start on a data dir written by kbroker 0.1: `__kbroker_metadata.json` becomes records.

Before the controller existed, a single node kept its metadata image as JSON in the first log dir
(topics with ids, partition counts and config overrides; dynamic broker configs, cluster-wide
defaults under a `<default>/` prefix; the end of the last reserved producer-id block). On the first
start of this release the controller finds an empty `__cluster_metadata` log and that file: it
writes the same image as metadata records (topic ids kept, so every `partition.metadata` still
agrees; the next producer id is the old block end, so no id is handed out twice), and renames the
file to `__kbroker_metadata.json.migrated`, which nothing reads again.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from kbroker.controller.replication_control import partition_records
from kbroker.controller.result import MetadataRecord
from kbroker.metadata.views import BROKER_RESOURCE, DYNAMIC_DEFAULT_PREFIX, TOPIC_RESOURCE
from kbroker.protocol.metadata_records import ConfigRecord, ProducerIdsRecord, TopicRecord

LEGACY_METADATA_FILE = "__kbroker_metadata.json"
MIGRATED_SUFFIX = ".migrated"


class LegacyMetadataError(Exception):
    """The legacy metadata file exists but cannot be read: the broker refuses to start (one line)."""


def read_legacy_records(path: Path, node_id: int) -> list[MetadataRecord]:
    """The records that rebuild the image stored in `path`."""
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise LegacyMetadataError(f"The legacy metadata file {path} is not valid JSON ({e}); restore it "
                                  "from a backup to start this data directory") from None
    except (OSError, UnicodeDecodeError) as e:
        raise LegacyMetadataError(f"Cannot read the legacy metadata file {path}: {e}") from None
    try:
        records: list[MetadataRecord] = []
        for t in obj.get("topics", []):
            name = str(t["name"])
            topic_id = uuid.UUID(t["topic_id"])
            records.append(TopicRecord(name=name, topic_id=topic_id))
            for key, value in sorted(t.get("configs", {}).items()):
                records.append(ConfigRecord(resource_type=TOPIC_RESOURCE, resource_name=name, name=str(key),
                                            value=str(value)))
            records += partition_records(topic_id, {p: [node_id] for p in range(int(t["num_partitions"]))})
        for key, value in sorted(obj.get("broker_configs", {}).items()):
            key = str(key)
            if key.startswith(DYNAMIC_DEFAULT_PREFIX):
                resource, key = "", key[len(DYNAMIC_DEFAULT_PREFIX):]
            else:
                resource = str(node_id)
            records.append(ConfigRecord(resource_type=BROKER_RESOURCE, resource_name=resource, name=key,
                                        value=str(value)))
        block_end = int(obj.get("producer_id_block_end", 0))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise LegacyMetadataError(f"Cannot read the legacy metadata file {path}: {e}") from None
    if block_end > 0:
        records.append(ProducerIdsRecord(broker_id=node_id, broker_epoch=-1, next_producer_id=block_end))
    return records


def retire(path: Path) -> Path:
    """Rename the migrated file so it is never read again; its new path."""
    target = path.with_name(path.name + MIGRATED_SUFFIX)
    path.replace(target)
    return target
