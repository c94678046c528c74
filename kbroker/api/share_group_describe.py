"""ShareGroupDescribe (key 77): state, epochs, assignor and members of KIP-932 share groups.

Version 1. An unknown group, or a group of another type, answers GROUP_ID_NOT_FOUND with Kafka's
messages. Each member shows its assignment by topic id and name.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from kbroker.api._authz import authorized_operations, partition_groups_by_authorization
from kbroker.api._groups import coordinator, gather, then
from kbroker.api.consumer_group_describe import AUTHORIZED_OPERATIONS_OMITTED
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.coord.assignors import Assignment
from kbroker.coord.share_group import SHARE_ASSIGNOR_NAME, ShareGroup
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages.share_group_describe import (
    ShareGroupDescribeRequest,
    ShareGroupDescribeResponse,
)
from kbroker.security.acl import GROUP

API_KEY = 77
MIN_VERSION = 1
MAX_VERSION = 1

R = ShareGroupDescribeResponse


def error_response(request: ShareGroupDescribeRequest, version: int, error: ErrorCode) -> R:
    return R(groups=[R.DescribedGroup(group_id=g, error_code=error) for g in request.group_ids])


def handle(services: BrokerServices, ctx: RequestContext, header: Any, request: ShareGroupDescribeRequest) -> Any:
    coord = coordinator(services)

    def assignment(a: Assignment) -> Any:
        return R.Assignment(topic_partitions=[
            R.TopicPartitions(topic_id=tid, topic_name=coord.topic_name(tid) or "", partitions=sorted(ps))
            for tid, ps in sorted(a.items(), key=lambda kv: str(kv[0])) if ps
        ])

    def ops(gid: str) -> int:
        # KIP-430: the principal's operations on the group (all of GROUP's without an authorizer).
        if request.include_authorized_operations:
            return authorized_operations(services, ctx, GROUP, gid)
        return AUTHORIZED_OPERATIONS_OMITTED

    def described(gid: str, answer: tuple[ErrorCode, str | None, ShareGroup | None]) -> Any:
        error, message, group = answer
        if group is None:
            return R.DescribedGroup(group_id=gid, error_code=error, error_message=message)
        return R.DescribedGroup(
            group_id=gid, error_code=ErrorCode.NONE, group_state=str(group.state), group_epoch=group.group_epoch,
            assignment_epoch=group.assignment_epoch, assignor_name=SHARE_ASSIGNOR_NAME, authorized_operations=ops(gid),
            members=[
                R.Member(member_id=m.member_id, rack_id=m.rack_id, member_epoch=m.member_epoch,
                         client_id=m.client_id, client_host=m.client_host,
                         subscribed_topic_names=list(m.subscribed_topic_names), assignment=assignment(m.assigned))
                for m in group.members.values()
            ],
        )

    # KafkaApis.handleShareGroupDescribe: DESCRIBE on each group, the refused ones first with
    # GROUP_AUTHORIZATION_FAILED (as ConsumerGroupDescribe).
    allowed, refused = partition_groups_by_authorization(services, ctx, request.group_ids)
    denied = [R.DescribedGroup(group_id=g, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED) for g in refused]
    answers = [then(coord.share_group_describe(gid), partial(described, gid)) for gid in allowed]
    return then(gather(answers), lambda groups: R(groups=denied + groups))
