"""CreatePartitions (API key 37, v0-3): grow topics through the controller, one result per topic.

As in Kafka's `ControllerApis.createPartitions`, a topic named twice is answered once (ahead of the
others) with INVALID_REQUEST "Duplicate topic name." and not grown. The partitions one request adds
are bounded by Kafka's MAX_RECORDS_PER_USER_OP (10,000), counted across its topics: the topic that
crosses it fails with UNKNOWN_SERVER_ERROR, as in Kafka 4.3 (controller/replication_control.py).
"""

from __future__ import annotations

from typing import Any

from kbroker.api._authz import check_topic
from kbroker.api._quotas import controller_mutation_quota
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.cluster.quotas import ThrottlingQuotaExceeded
from kbroker.protocol.errors import ErrorCode, error_fields
from kbroker.protocol.headers import RequestHeader
from kbroker.protocol.messages.create_partitions import CreatePartitionsRequest, CreatePartitionsResponse
from kbroker.security.acl import ALTER

API_KEY = 37
MIN_VERSION = 0
# KIP-599: from v3 a topic is refused while the controller mutation quota is exhausted.
STRICT_QUOTA_SINCE_VERSION = 3
MAX_VERSION = 3

Result = CreatePartitionsResponse.CreatePartitionsTopicResult


async def handle(services: BrokerServices, ctx: RequestContext, header: RequestHeader, request: CreatePartitionsRequest) -> CreatePartitionsResponse:
    controller = services.controller
    counts: dict[str, int] = {}
    for t in request.topics:
        counts[t.name] = counts.get(t.name, 0) + 1
    # Kafka answers the duplicates first, then the topics the controller handled.
    results: list[Any] = [
        Result(name=name, error_code=int(ErrorCode.INVALID_REQUEST), error_message="Duplicate topic name.")
        for name, n in counts.items() if n > 1
    ]
    added = 0
    quota = controller_mutation_quota(services, ctx, header, STRICT_QUOTA_SINCE_VERSION)
    for t in request.topics:
        if counts[t.name] > 1:
            continue
        assignments = None if t.assignments is None else [list(a.broker_ids) for a in t.assignments]
        before = services.metadata.topic(t.name)
        try:
            check_topic(services, ctx, ALTER, t.name)  # KafkaApis: ALTER on the topic
            quota.check()
            grown = await controller.create_partitions(t.name, t.count, validate_only=request.validate_only,
                                                       assignments=assignments, records_in_request=added)
        except ThrottlingQuotaExceeded as e:
            results.append(Result(name=t.name, error_code=int(ErrorCode.THROTTLING_QUOTA_EXCEEDED),
                                  error_message=str(e)))
        except Exception as e:  # noqa: BLE001 - every failure becomes this topic's error
            code, message = error_fields(e)
            results.append(Result(name=t.name, error_code=code, error_message=message))
        else:
            new_partitions = grown.num_partitions - (before.num_partitions if before is not None else 0)
            added += new_partitions
            if not request.validate_only:
                quota.record(new_partitions)
            results.append(Result(name=t.name, error_code=0, error_message=None))
    return CreatePartitionsResponse(throttle_time_ms=quota.throttle_time_ms, results=results)


def error_response(request: CreatePartitionsRequest, version: int, error: Any) -> CreatePartitionsResponse:
    return CreatePartitionsResponse(throttle_time_ms=0, results=[
        Result(name=t.name, error_code=int(error), error_message=error.message or None) for t in request.topics
    ])
