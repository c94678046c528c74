"""ListOffsets (key 2): earliest, latest, by timestamp, max-timestamp, earliest-local, latest-tiered.

Versions 1-11 (Kafka 4.0 removed v0). v2 adds the isolation level (read_committed answers "latest"
with the last stable offset), v4 the leader epoch, v7 max-timestamp (-3), v8 earliest-local (-4),
v9 latest-tiered (-5; without tiered storage Kafka answers offset -1), v10 a timeout that only
matters for remote storage, v11 earliest-pending-upload (-6, KIP-1023; without tiered storage Kafka
4.3.1 answers offset -1, timestamp -1, leader epoch -1, as for -5).

Kafka's rules (KafkaApis.handleListOffsetRequest / Partition.fetchOffsetForTimestamp): a
partition listed twice gets one INVALID_REQUEST answer; a timestamp lookup answers the first offset whose
timestamp is >= the target, and "no answer" (-1 / -1) when none is below the high watermark (or
the LSO under read_committed); replica id -2 (debug) reads up to the log end.
"""

from __future__ import annotations

from typing import Any

from kbroker.api._authz import authorize
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.headers import RequestHeader
from kbroker.protocol.messages.list_offsets import ListOffsetsRequest, ListOffsetsResponse
from kbroker.security.acl import DESCRIBE, TOPIC

API_KEY = 2
MIN_VERSION = 1
MAX_VERSION = 11
VERSION_NOTES = (
    "v0 removed in Kafka 4.0. -3 max-timestamp (v7), -4 earliest-local (v8), -5 latest-tiered (v9, answered "
    "-1 without tiered storage), -6 earliest-pending-upload (v11, KIP-1023, answered -1 likewise)."
)

DEBUGGING_REPLICA_ID = -2
# Special timestamps and the version that introduced each.
_SPECIAL_MIN_VERSION = {-1: 0, -2: 0, -3: 7, -4: 8, -5: 9, -6: 11}
EARLIEST_PENDING_UPLOAD_TIMESTAMP = -6


def _partition_response(index: int, error: ErrorCode, offset: int = -1, timestamp: int = -1,
                        leader_epoch: int = -1) -> Any:
    return ListOffsetsResponse.ListOffsetsPartitionResponse(
        partition_index=index, error_code=error, timestamp=timestamp, offset=offset, leader_epoch=leader_epoch
    )


def error_response(request: ListOffsetsRequest, version: int, error: ErrorCode) -> ListOffsetsResponse:
    topics = [
        ListOffsetsResponse.ListOffsetsTopicResponse(
            name=t.name, partitions=[_partition_response(p.partition_index, error) for p in t.partitions]
        )
        for t in request.topics
    ]
    return ListOffsetsResponse(throttle_time_ms=0, topics=topics)


def _lookup(services: BrokerServices, topic: str, p: Any, version: int, isolation: int | None) -> Any:
    index = p.partition_index
    timestamp = p.timestamp
    if timestamp < 0 and (timestamp not in _SPECIAL_MIN_VERSION or version < _SPECIAL_MIN_VERSION[timestamp]):
        # An unknown negative timestamp: Kafka fails the partition (UNSUPPORTED_VERSION for a
        # special value the version does not know, as its request builder would have refused).
        return _partition_response(index, ErrorCode.UNSUPPORTED_VERSION)
    partition = services.replica_manager.get_partition(topic, index)
    if partition is None:
        return _partition_response(index, services.replica_manager.missing_partition_error(topic, index))
    if partition.is_offline:  # its log directory failed (Kafka's HostedPartition.Offline)
        return _partition_response(index, ErrorCode.KAFKA_STORAGE_ERROR)
    if version >= 4:
        epoch_error = partition.check_leader_epoch(p.current_leader_epoch)
        if epoch_error != ErrorCode.NONE:
            return _partition_response(index, epoch_error)
    if timestamp == EARLIEST_PENDING_UPLOAD_TIMESTAMP:
        # Nothing is pending upload without tiered storage: Kafka 4.3.1 answers -1/-1/-1.
        return _partition_response(index, ErrorCode.NONE, -1, -1, -1)
    try:
        found = partition.fetch_offset_for_timestamp(timestamp, isolation)
    except KafkaError as exc:
        return _partition_response(index, exc.error_code)
    except OSError:
        return _partition_response(index, ErrorCode.KAFKA_STORAGE_ERROR)
    if found is None:
        return _partition_response(index, ErrorCode.NONE, -1, -1, -1)
    offset, ts, epoch = found
    return _partition_response(index, ErrorCode.NONE, offset, ts, epoch if version >= 4 else -1)


def handle(
    services: BrokerServices, ctx: RequestContext, header: RequestHeader, request: ListOffsetsRequest
) -> ListOffsetsResponse:
    version = header.api_version
    if request.replica_id == DEBUGGING_REPLICA_ID or request.replica_id >= 0:
        # Kafka's isClientRequest is false for the debugging id and for followers (a replica id):
        # "latest" is then the log end offset, not the high watermark.
        isolation: int | None = None
    else:
        isolation = 1 if version >= 2 and request.isolation_level == 1 else 0
    counts: dict[tuple[str, int], int] = {}
    for t in request.topics:
        for p in t.partitions:
            counts[(t.name, p.partition_index)] = counts.get((t.name, p.partition_index), 0) + 1
    topics = []
    answered: set[tuple[str, int]] = set()
    denied: set[str] = set()
    if services.authorizer is not None:
        # KafkaApis.handleListOffsetRequest: DESCRIBE on each topic, else TOPIC_AUTHORIZATION_FAILED.
        denied = {t.name for t in request.topics if not authorize(services, ctx, DESCRIBE, TOPIC, t.name)}
    for t in request.topics:
        parts = []
        for p in t.partitions:
            key = (t.name, p.partition_index)
            if key in answered:
                continue  # Kafka 4.3 answers a duplicated partition once, with INVALID_REQUEST
            answered.add(key)
            if denied and t.name in denied:
                parts.append(_partition_response(p.partition_index, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
            elif counts[key] > 1:
                parts.append(_partition_response(p.partition_index, ErrorCode.INVALID_REQUEST))
            else:
                parts.append(_lookup(services, t.name, p, version, isolation))
        topics.append(ListOffsetsResponse.ListOffsetsTopicResponse(name=t.name, partitions=parts))
    return ListOffsetsResponse(throttle_time_ms=0, topics=topics)
