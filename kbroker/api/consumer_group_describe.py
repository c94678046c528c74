"""ConsumerGroupDescribe (key 69): state, epochs, assignor and members of KIP-848 consumer groups.

Versions 0-1 (v1 adds the member type, KIP-1099: 1 for a consumer-protocol member). An unknown group
or a classic group answers GROUP_ID_NOT_FOUND with Kafka's messages. Each member shows its current
assignment and its target assignment, by topic id and name.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from kbroker.api._authz import (
    authorized_operations,
    filter_authorized,
    partition_groups_by_authorization,
)
from kbroker.api._groups import coordinator, gather, then
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.coord.assignors import Assignment
from kbroker.coord.consumer_coordinator import CLASSIC_MEMBER_TYPE, CONSUMER_MEMBER_TYPE
from kbroker.coord.consumer_group import ConsumerGroup
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages.consumer_group_describe import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
)
from kbroker.security.acl import DESCRIBE, GROUP, TOPIC

API_KEY = 69
MIN_VERSION = 0
MAX_VERSION = 1

R = ConsumerGroupDescribeResponse
UNAUTHORIZED_TOPICS_MESSAGE = "The group has described topic(s) that the client is not authorized to describe."
AUTHORIZED_OPERATIONS_OMITTED = -2147483648


def error_response(request: ConsumerGroupDescribeRequest, version: int, error: ErrorCode) -> R:
    return R(groups=[R.DescribedGroup(group_id=g, error_code=error) for g in request.group_ids])


def handle(services: BrokerServices, ctx: RequestContext, header: Any, request: ConsumerGroupDescribeRequest) -> Any:
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

    def described(gid: str, answer: tuple[ErrorCode, str | None, ConsumerGroup | None, str]) -> Any:
        error, message, group, assignor_name = answer
        if group is None:
            return R.DescribedGroup(group_id=gid, error_code=error, error_message=message)
        return R.DescribedGroup(
            group_id=gid, error_code=ErrorCode.NONE, group_state=str(group.state), group_epoch=group.group_epoch,
            assignment_epoch=group.target_assignment_epoch, assignor_name=assignor_name,
            authorized_operations=ops(gid),
            members=[
                R.Member(member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id,
                         member_epoch=m.member_epoch, client_id=m.client_id, client_host=m.client_host,
                         subscribed_topic_names=list(m.subscribed_topic_names),
                         subscribed_topic_regex=m.subscribed_topic_regex,
                         assignment=assignment(m.assigned),
                         target_assignment=assignment(group.target_assignment.get(m.member_id, {})),
                         member_type=CLASSIC_MEMBER_TYPE if m.classic is not None else CONSUMER_MEMBER_TYPE)
                for m in group.members.values()
            ],
        )

    # KafkaApis.handleConsumerGroupDescribe: DESCRIBE on each group (the refused ones first, with
    # GROUP_AUTHORIZATION_FAILED); then, with an authorizer, a group whose members' current or target
    # assignment names a topic the principal may not DESCRIBE is answered TOPIC_AUTHORIZATION_FAILED
    # with no members (the topics are not disclosed).
    allowed, refused = partition_groups_by_authorization(services, ctx, request.group_ids)
    denied = [R.DescribedGroup(group_id=g, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED) for g in refused]
    answers = [then(coord.consumer_group_describe(gid), partial(described, gid)) for gid in allowed]
    return then(gather(answers), lambda groups: R(groups=_hide_unauthorized_topics(services, ctx, denied + groups)))


def _hide_unauthorized_topics(services: BrokerServices, ctx: RequestContext, groups: list[Any]) -> list[Any]:
    if services.authorizer is None:
        return groups
    named = {tp.topic_name for g in groups for m in g.members for a in (m.assignment, m.target_assignment)
             for tp in a.topic_partitions}
    allowed = filter_authorized(services, ctx, DESCRIBE, TOPIC, named)
    return [R.DescribedGroup(group_id=g.group_id, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                             error_message=UNAUTHORIZED_TOPICS_MESSAGE, members=[])
            if any(tp.topic_name not in allowed for m in g.members for a in (m.assignment, m.target_assignment)
                   for tp in a.topic_partitions) else g
            for g in groups]
