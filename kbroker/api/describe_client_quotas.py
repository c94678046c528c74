"""DescribeClientQuotas (key 48, v0-1; KIP-546): the client quotas matching a filter.

Answered from the metadata image's `ClientQuotasImage`, as Kafka's broker does
(`ClientQuotasImage.describe`). Each filter component names an entity type and a match: EXACT (that
name), DEFAULT (the type's default entity) or SPECIFIED (any name; Kafka 4.3 matches the default entity too); `strict` asks for
entities with exactly the filtered types. Kafka's request errors: an empty type INVALID_REQUEST
"Invalid empty entity type.", a type twice "Entity type <t> cannot appear more than once in the
filter.", an unknown type UNSUPPORTED_VERSION "Unsupported entity type <t>", a match string with
DEFAULT / SPECIFIED or none with EXACT, an unknown match type, "ip" with "user" / "client-id".
DESCRIBE_CONFIGS on the cluster is required (CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from kbroker.api._authz import authorize_cluster
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.controller.client_quota_control import CLIENT_ID, IP, USER, java_hash_map_order
from kbroker.metadata.image import ClientQuotaEntityKey
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.headers import RequestHeader
from kbroker.protocol.messages.describe_client_quotas import (
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
)
from kbroker.security.acl import DESCRIBE_CONFIGS

API_KEY = 48
MIN_VERSION = 0
MAX_VERSION = 1

MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2
Entry = DescribeClientQuotasResponse.EntryData
Entity = DescribeClientQuotasResponse.EntityData
Value = DescribeClientQuotasResponse.ValueData


def _invalid(message: str) -> KafkaError:
    return KafkaError(message, error_code=ErrorCode.INVALID_REQUEST)


def parse_filter(request: DescribeClientQuotasRequest) -> tuple[dict[str, str | None], set[str]]:
    """(exact: type -> name or None for the default, specified: types with any non-default name)."""
    exact: dict[str, str | None] = {}
    specified: set[str] = set()
    for c in request.components:
        t = c.entity_type
        if not t:
            raise _invalid("Invalid empty entity type.")
        if t in exact or t in specified:
            raise _invalid(f"Entity type {t} cannot appear more than once in the filter.")
        if t not in (IP, USER, CLIENT_ID):
            raise KafkaError(f"Unsupported entity type {t}", error_code=ErrorCode.UNSUPPORTED_VERSION)
        if c.match_type == MATCH_EXACT:
            if c.match is None:
                raise _invalid("Request specified MATCH_TYPE_EXACT, but set match string to null.")
            exact[t] = c.match
        elif c.match_type == MATCH_DEFAULT:
            if c.match is not None:
                raise _invalid("Request specified MATCH_TYPE_DEFAULT, but also specified a match string.")
            exact[t] = None
        elif c.match_type == MATCH_SPECIFIED:
            if c.match is not None:
                raise _invalid("Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.")
            specified.add(t)
        else:
            raise _invalid(f"Unknown match type {c.match_type}")
    types = set(exact) | specified
    if IP in types and (USER in types or CLIENT_ID in types):
        raise _invalid("Invalid entity filter component combination. IP filter component should not be "
                       "used with user or clientId filter component.")
    return exact, specified


def matches(entity: ClientQuotaEntityKey, exact: dict[str, str | None], specified: set[str], strict: bool) -> bool:
    names = dict(entity)
    if strict and len(names) != len(exact) + len(specified):
        return False
    for t, name in exact.items():
        if t not in names or names[t] != name:
            return False
    # SPECIFIED matches any entity of that type, the default one included (Kafka's `matches`).
    return all(t in names for t in specified)


def handle(services: BrokerServices, ctx: RequestContext, header: RequestHeader,
           request: DescribeClientQuotasRequest) -> DescribeClientQuotasResponse:
    if not authorize_cluster(services, ctx, DESCRIBE_CONFIGS):
        return error_response(request, header.api_version, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    try:
        exact, specified = parse_filter(request)
    except KafkaError as e:
        return DescribeClientQuotasResponse(throttle_time_ms=0, error_code=int(e.error_code),
                                            error_message=str(e) or e.error_code.message, entries=None)
    entries = []
    for entity, quotas in services.metadata.image.client_quotas.entities.items():
        if matches(entity, exact, specified, request.strict):
            names = dict(entity)
            entries.append(Entry(
                entity=[Entity(entity_type=t, entity_name=names[t]) for t in java_hash_map_order(list(names))],
                values=[Value(key=k, value=v) for k, v in sorted(quotas.items())]))
    return DescribeClientQuotasResponse(throttle_time_ms=0, error_code=0, error_message="", entries=entries)


def error_response(request: DescribeClientQuotasRequest, version: int,
                   error: ErrorCode) -> DescribeClientQuotasResponse:
    return DescribeClientQuotasResponse(throttle_time_ms=0, error_code=int(error), error_message=error.message,
                                        entries=None)
