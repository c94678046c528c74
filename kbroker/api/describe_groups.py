"""DescribeGroups (key 15): state, protocol and members of classic groups.

Versions 0-6. Before v6 an unknown group, or a KIP-848 consumer group, is described as Dead with no
error; v6 answers GROUP_ID_NOT_FOUND (state Dead) with Kafka 4.3's messages "Group X not found." and
"Group X is not a classic group.". Member metadata and assignments are only given for a Stable group,
as Kafka.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kbroker.api._authz import authorized_operations, partition_groups_by_authorization
from kbroker.api._groups import coordinator, gather, then
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.coord.group_metadata_manager import GroupDescription
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages.describe_groups import DescribeGroupsRequest, DescribeGroupsResponse
from kbroker.security.acl import GROUP

API_KEY = 15
MIN_VERSION = 0
MAX_VERSION = 6

R = DescribeGroupsResponse
AUTHORIZED_OPERATIONS_OMITTED = -2147483648


def error_response(request: DescribeGroupsRequest, version: int, error: ErrorCode) -> DescribeGroupsResponse:
    return R(groups=[R.DescribedGroup(error_code=error, group_id=g) for g in request.groups])


def handle(services: BrokerServices, ctx: RequestContext, header: Any, request: DescribeGroupsRequest) -> Any:
    coord = coordinator(services)
    version = header.api_version
    include_ops = version >= 3 and request.include_authorized_operations
    # KafkaApis.handleDescribeGroupsRequest: DESCRIBE on each group; the refused ones come first
    # (GROUP_AUTHORIZATION_FAILED), then the described ones in request order.
    allowed, refused = partition_groups_by_authorization(services, ctx, request.groups)
    denied = [R.DescribedGroup(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, group_id=g) for g in refused]

    def ops(gid: str) -> int:
        # KIP-430: the principal's operations on the group (all of GROUP's without an authorizer).
        return authorized_operations(services, ctx, GROUP, gid) if include_ops else AUTHORIZED_OPERATIONS_OMITTED

    answers = [coord.describe_group(gid, not_classic_error=version >= 6) for gid in allowed]
    return then(gather(answers), lambda described: R(groups=denied + [
        described_group(gid, ops, *d) for gid, d in zip(allowed, described, strict=True)]))


def described_group(gid: str, ops: Callable[[str], int], error: ErrorCode, message: str | None, d: GroupDescription) -> Any:
    if message is not None:
        return R.DescribedGroup(error_code=error, error_message=message, group_id=gid, group_state="Dead")
    if error != ErrorCode.NONE:
        return R.DescribedGroup(error_code=error, group_id=gid)
    return R.DescribedGroup(
        error_code=ErrorCode.NONE, group_id=gid, group_state=d.state, protocol_type=d.protocol_type,
        protocol_data=d.protocol_data, authorized_operations=ops(gid),
        members=[
            R.DescribedGroupMember(member_id=m, group_instance_id=i, client_id=c, client_host=h,
                                   member_metadata=meta, member_assignment=assignment)
            for m, i, c, h, meta, assignment in d.members
        ],
    )
