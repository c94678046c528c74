"""DescribeLogDirs (API key 35, v1-5): each log directory with the size of every partition in it.

Used by `kafka-log-dirs` and the Admin API's `describeLogDirs` / `describeReplicaLogDirs`. Kafka's
``ReplicaManager.describeLogDirs``: one result per ``log.dirs`` entry (absolute path), listing the
logs in it, current and future (``is_future_key``: a replica being moved there by
AlterReplicaLogDirs), for the requested partitions (null: all); topics with no listed partition are
left out. Offset lag: max(0, HW - LEO) for a current log (0 on one replica), the current log's end
offset minus the future log's for a future one. v4 adds the volume's total and usable bytes
(KIP-827, Java's FileStore total/usable space: f_blocks and f_bavail times the fragment size). An
offline directory is KAFKA_STORAGE_ERROR with no topics and -1 bytes. The metadata log is not a
partition of the LogManager and is never listed (as in Kafka). v5 adds whether the directory is cordoned
(KIP-1066): never, as kbroker has no `cordoned.log.dirs` (Kafka's default, an empty list, reports
false too).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from kbroker.api._authz import check_cluster
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.headers import RequestHeader
from kbroker.protocol.messages.describe_log_dirs import DescribeLogDirsRequest, DescribeLogDirsResponse
from kbroker.security.acl import DESCRIBE

API_KEY = 35
MIN_VERSION = 1
MAX_VERSION = 5

Result = DescribeLogDirsResponse.DescribeLogDirsResult
TopicResult = DescribeLogDirsResponse.DescribeLogDirsTopic
PartitionResult = DescribeLogDirsResponse.DescribeLogDirsPartition


def handle(services: BrokerServices, ctx: RequestContext, header: RequestHeader, request: DescribeLogDirsRequest) -> DescribeLogDirsResponse:
    check_cluster(services, ctx, DESCRIBE)  # KafkaApis: DESCRIBE on the cluster, else CLUSTER_AUTHORIZATION_FAILED and no results
    wanted: dict[str, set[int]] | None = None
    if request.topics is not None:
        wanted = {}
        for t in request.topics:
            wanted.setdefault(t.topic, set()).update(t.partitions)
    lm = services.log_manager
    offline_dirs = set(lm.offline_dirs)
    by_dir: dict[Path, dict[str, list[PartitionResult]]] = {d: {} for d in lm.log_dirs}
    for plog in lm.all_logs() + lm.future_logs():
        if wanted is not None and plog.partition not in wanted.get(plog.topic, ()):
            continue
        in_dir = by_dir.get(plog.parent_dir)
        if in_dir is None:
            continue
        if plog.is_future:
            current = lm.get_log(plog.topic, plog.partition)
            lag = current.log_end_offset - plog.log_end_offset if current is not None else -1
        else:
            lag = max(0, plog.high_watermark - plog.log_end_offset)
        in_dir.setdefault(plog.topic, []).append(
            PartitionResult(partition_index=plog.partition, partition_size=plog.size_in_bytes,
                            offset_lag=lag, is_future_key=plog.is_future))
    results = []
    for d in lm.log_dirs:
        offline = d in offline_dirs
        total = usable = -1
        if not offline:
            try:
                st = os.statvfs(d)
                total, usable = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
            except OSError:
                offline = True
        topics = [] if offline else [
            TopicResult(name=name, partitions=sorted(parts, key=lambda p: (p.partition_index, p.is_future_key)))
            for name, parts in sorted(by_dir[d].items())
        ]
        results.append(Result(error_code=int(ErrorCode.KAFKA_STORAGE_ERROR if offline else ErrorCode.NONE),
                              log_dir=str(Path(os.path.abspath(d))), topics=topics, total_bytes=total,
                              usable_bytes=usable))
    return DescribeLogDirsResponse(throttle_time_ms=0, error_code=0, results=results)


def error_response(request: DescribeLogDirsRequest, version: int, error: Any) -> DescribeLogDirsResponse:
    return DescribeLogDirsResponse(throttle_time_ms=0, error_code=int(error), results=[])
