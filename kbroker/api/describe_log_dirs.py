"""DescribeLogDirs (API key 35, v1-5): each log directory with the size of every partition in it.

Used by `kafka-log-dirs` and the Admin API's `describeLogDirs`. A null topic list means every
partition; an offline directory is reported with KAFKA_STORAGE_ERROR and no topics. The offset lag
of a current (non-future) replica is max(0, HW - LEO) as in Kafka, i.e. 0. v4 adds the directory's
total and usable bytes (KIP-827), v5 whether it is cordoned (KIP-1066): never, as kbroker has no
`cordoned.log.dirs` (Kafka's default, an empty list, reports false too).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from kbroker.api.context import BrokerServices, RequestContext
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.headers import RequestHeader
from kbroker.protocol.messages.describe_log_dirs import DescribeLogDirsRequest, DescribeLogDirsResponse

API_KEY = 35
MIN_VERSION = 1
MAX_VERSION = 5

Result = DescribeLogDirsResponse.DescribeLogDirsResult
TopicResult = DescribeLogDirsResponse.DescribeLogDirsTopic
PartitionResult = DescribeLogDirsResponse.DescribeLogDirsPartition


def handle(services: BrokerServices, ctx: RequestContext, header: RequestHeader, request: DescribeLogDirsRequest) -> DescribeLogDirsResponse:
    wanted: dict[str, set[int]] | None = None
    if request.topics is not None:
        wanted = {}
        for t in request.topics:
            wanted.setdefault(t.topic, set()).update(t.partitions)
    dirs = [Path(d).absolute() for d in services.config.log_dirs]
    offline_dirs = {Path(d).absolute() for d in services.log_manager.offline_dirs}
    by_dir: dict[Path, dict[str, list[Any]]] = {d: {} for d in dirs}
    for partition in services.replica_manager.partitions():
        if wanted is not None and partition.partition not in wanted.get(partition.topic, ()):
            continue
        if partition.is_offline:
            continue
        parent = partition.log.parent_dir.absolute()
        if parent not in by_dir:
            continue
        lag = max(0, partition.high_watermark - partition.log_end_offset)
        by_dir[parent].setdefault(partition.topic, []).append(
            PartitionResult(partition_index=partition.partition, partition_size=partition.log.size_in_bytes,
                            offset_lag=lag, is_future_key=False))
    results = []
    for d in dirs:
        offline = d in offline_dirs
        total = usable = -1
        if not offline:
            try:
                st = os.statvfs(d)
                total, usable = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
            except OSError:
                offline = True
        topics = [] if offline else [
            TopicResult(name=name, partitions=sorted(parts, key=lambda p: p.partition_index))
            for name, parts in sorted(by_dir[d].items())
        ]
        results.append(Result(error_code=int(ErrorCode.KAFKA_STORAGE_ERROR if offline else ErrorCode.NONE),
                              log_dir=str(d), topics=topics, total_bytes=total, usable_bytes=usable))
    return DescribeLogDirsResponse(throttle_time_ms=0, error_code=0, results=results)


def error_response(request: DescribeLogDirsRequest, version: int, error: Any) -> DescribeLogDirsResponse:
    return DescribeLogDirsResponse(throttle_time_ms=0, error_code=int(error), results=[])
