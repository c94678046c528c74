"""DescribeShareGroupOffsets (key 90): the start offset and lag of a share group's share-partitions.

Versions 0-1 (v1 adds `Lag`, KIP-1226). What `kafka-share-groups --describe` shows. Kafka's group
coordinator answers it from the share coordinator's state summary (ReadShareGroupStateSummary); kbroker
asks its share-partition manager (`SharePartitionManager.offsets_summary`: the live share-partition, else
its state on `__share_group_state`): the start offset, the leader epoch and the lag (records up to the high watermark not yet acknowledged
or archived). Without topics, every initialized share-partition of the group is listed (subscribed
or not: a reset by AlterShareGroupOffsets initializes share-partitions of an empty group); a named partition that is not initialized answers start offset -1.
On a cluster "initialized" is what the group coordinator recorded (ShareGroupStatePartitionMetadata,
`kbroker.coord.share_group_initialization`), as in Kafka. An unknown group, or one
that is not a share group, answers GROUP_ID_NOT_FOUND.

On a multi-broker cluster the group coordinator answers from ReadShareGroupStateSummary (87) to each
share-partition's share coordinator, as Kafka does (`kbroker.api._share_offsets`).
"""

from __future__ import annotations

import asyncio
from functools import partial
from typing import Any

from kbroker.api import _share_offsets
from kbroker.api._authz import authorize
from kbroker.api._groups import coordinator, gather, then
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.coord.share_group import ShareGroup
from kbroker.coord.share_persister import NetworkSharePersister
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages.describe_share_group_offsets import (
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsResponse,
)
from kbroker.security.acl import DESCRIBE, GROUP, TOPIC

API_KEY = 90
MIN_VERSION = 0
MAX_VERSION = 1
VERSION_NOTES = ("From the share-partitions and their state on __share_group_state (in process); on a cluster "
                 "from ReadShareGroupStateSummary to each share coordinator.")

R = DescribeShareGroupOffsetsResponse


def error_response(request: DescribeShareGroupOffsetsRequest, version: int, error: ErrorCode) -> R:
    return R(groups=[R.DescribeShareGroupOffsetsResponseGroup(group_id=g.group_id, error_code=error,
                                                              error_message=error.message)
                     for g in request.groups])


def _denied(services: BrokerServices, ctx: RequestContext, name: str, partitions: list[int] | None) -> Any:
    """The topic's answer when it is unknown or not describable, else None."""
    info = services.metadata.topic(name)
    if info is not None and (services.authorizer is None or authorize(services, ctx, DESCRIBE, TOPIC, name)):
        return None
    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if info is None else ErrorCode.TOPIC_AUTHORIZATION_FAILED
    return R.DescribeShareGroupOffsetsResponseTopic(topic_name=name, partitions=[
        R.DescribeShareGroupOffsetsResponsePartition(partition_index=p, start_offset=-1, leader_epoch=-1,
                                                     error_code=code, error_message=code.message)
        for p in partitions or []])


async def _from_summaries(services: BrokerServices, ctx: RequestContext, persister: NetworkSharePersister,
                          req_group: Any) -> Any:
    """One group's answer on a cluster: ReadShareGroupStateSummary to the share coordinators."""
    gid = req_group.group_id
    answer = coordinator(services).share_group_describe(gid)
    error, message, group = await answer if isinstance(answer, asyncio.Future) else answer
    if group is None:
        return R.DescribeShareGroupOffsetsResponseGroup(group_id=gid, error_code=error, error_message=message)
    topics: list[Any] = []
    wanted: list[tuple[Any, list[int] | None]] = []
    if req_group.topics is None:
        # Kafka's describeShareGroupAllOffsets: the partitions the group coordinator recorded as
        # initialized (ShareGroupStatePartitionMetadata), each listed with its summary (-1 before its
        # leader chose a start offset).
        recorded = await _share_offsets.awaited(coordinator(services).share_initialized_partitions(gid))
        for tid, ps in recorded.items():
            info = services.metadata.topic_by_id(tid)
            if info is not None and (services.authorizer is None
                                     or authorize(services, ctx, DESCRIBE, TOPIC, info.name)):
                wanted.append((info, sorted(p for p in ps if p < info.num_partitions)))
        wanted.sort(key=lambda w: w[0].name)
    else:
        for t in req_group.topics:
            refused = _denied(services, ctx, t.topic_name, list(t.partitions))
            if refused is not None:
                topics.append(refused)
            else:
                wanted.append((services.metadata.topic(t.topic_name), list(t.partitions)))
    keys = [(info.topic_id, p) for info, parts in wanted
            for p in (range(info.num_partitions) if parts is None else parts)]
    found = await _share_offsets.summaries(persister, gid, keys) if keys else {}
    hwms = await _share_offsets.high_watermarks(services, persister, [
        (info.name, p) for info, parts in wanted for p in (range(info.num_partitions) if parts is None else parts)
        if _share_offsets.initialized(found.get((gid, info.topic_id, p)))])
    for info, parts in wanted:
        rows = []
        for p in range(info.num_partitions) if parts is None else parts:
            outcome = found.get((gid, info.topic_id, p))
            if not _share_offsets.initialized(outcome) or outcome is None or outcome.state is None:
                if parts is not None:
                    rows.append(R.DescribeShareGroupOffsetsResponsePartition(
                        partition_index=p, start_offset=-1, leader_epoch=-1, lag=-1))
                continue
            rows.append(R.DescribeShareGroupOffsetsResponsePartition(
                partition_index=p, start_offset=outcome.state.start_offset, leader_epoch=outcome.state.leader_epoch,
                lag=_share_offsets.lag(hwms.get((info.name, p)), outcome)))
        if rows or parts is not None:
            topics.append(R.DescribeShareGroupOffsetsResponseTopic(topic_name=info.name, topic_id=info.topic_id,
                                                                   partitions=rows))
    return R.DescribeShareGroupOffsetsResponseGroup(group_id=gid, topics=topics)


async def _handle_cluster(services: BrokerServices, ctx: RequestContext, request: DescribeShareGroupOffsetsRequest,
                          persister: NetworkSharePersister) -> R:
    groups = []
    for g in request.groups:
        if services.authorizer is not None and not authorize(services, ctx, DESCRIBE, GROUP, g.group_id):
            groups.append(R.DescribeShareGroupOffsetsResponseGroup(
                group_id=g.group_id, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED,
                error_message=ErrorCode.GROUP_AUTHORIZATION_FAILED.message))
            continue
        groups.append(await _from_summaries(services, ctx, persister, g))
    return R(groups=groups)


def handle(services: BrokerServices, ctx: RequestContext, header: Any,
           request: DescribeShareGroupOffsetsRequest) -> Any:
    persister = _share_offsets.network_persister(services)
    if persister is not None:
        return _handle_cluster(services, ctx, request, persister)
    manager = services.share_partition_manager
    coord = coordinator(services)

    def described(req_group: Any, answer: tuple[ErrorCode, str | None, ShareGroup | None]) -> Any:
        error, message, group = answer
        gid = req_group.group_id
        if group is None or manager is None:
            return R.DescribeShareGroupOffsetsResponseGroup(group_id=gid, error_code=error, error_message=message)
        wanted: list[tuple[str, list[int] | None]]
        if req_group.topics is None:  # the topics with an initialized share-partition
            names = [services.metadata.topic_by_id(tid) for tid in manager.initialized_topics(gid)]
            wanted = [(name, None) for name in sorted(info.name for info in names if info is not None)]
        else:
            wanted = [(t.topic_name, list(t.partitions)) for t in req_group.topics]
        topics = []
        for name, partitions in wanted:
            info = services.metadata.topic(name)
            if info is None or (services.authorizer is not None
                                and not authorize(services, ctx, DESCRIBE, TOPIC, name)):
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if info is None else ErrorCode.TOPIC_AUTHORIZATION_FAILED
                topics.append(R.DescribeShareGroupOffsetsResponseTopic(topic_name=name, partitions=[
                    R.DescribeShareGroupOffsetsResponsePartition(partition_index=p, start_offset=-1, leader_epoch=-1,
                                                                 error_code=code, error_message=code.message)
                    for p in partitions or []]))
                continue
            rows = []
            for p in range(info.num_partitions) if partitions is None else partitions:
                summary = manager.offsets_summary(gid, info.topic_id, p)
                if summary is None and partitions is None:
                    continue  # not initialized: only listed when named
                start, epoch, lag = summary if summary is not None else (-1, -1, -1)
                rows.append(R.DescribeShareGroupOffsetsResponsePartition(
                    partition_index=p, start_offset=start, leader_epoch=epoch, lag=lag))
            if rows or partitions is not None:
                topics.append(R.DescribeShareGroupOffsetsResponseTopic(topic_name=name, topic_id=info.topic_id,
                                                                       partitions=rows))
        return R.DescribeShareGroupOffsetsResponseGroup(group_id=gid, topics=topics)

    answers: list[Any] = []
    for g in request.groups:
        if services.authorizer is not None and not authorize(services, ctx, DESCRIBE, GROUP, g.group_id):
            answers.append(R.DescribeShareGroupOffsetsResponseGroup(
                group_id=g.group_id, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED,
                error_message=ErrorCode.GROUP_AUTHORIZATION_FAILED.message))
            continue
        answers.append(then(coord.share_group_describe(g.group_id), partial(described, g)))
    return then(gather(answers), lambda groups: R(groups=groups))
