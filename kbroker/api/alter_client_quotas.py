"""AlterClientQuotas (key 49, v0-1; KIP-546): set and remove client quotas through the controller.

`kafka-configs --alter --add-config 'producer_byte_rate=1024' --entity-type clients --entity-name x`
sends this. Kafka's request-to-alteration conversion is kept: an entry's entity is a map, so an entity
type named twice keeps its last name; each op is a key with a value, or a removal. The controller
(`ClientQuotaControlManager`) validates each entity and writes `ClientQuotaRecord`s; the brokers'
image (`ClientQuotasImage`) feeds the quota managers at once. ALTER_CONFIGS on the cluster is
required (CLUSTER_AUTHORIZATION_FAILED for every entry), as Kafka's `ControllerApis`. On a
`process.roles=broker` node the controller is the KRaft quorum's (RemoteController forwards).
"""

from __future__ import annotations

from kbroker.api._authz import authorize_cluster
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.controller.client_quota_control import ClientQuotaAlteration, java_hash_map_order
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.headers import RequestHeader
from kbroker.protocol.messages.alter_client_quotas import AlterClientQuotasRequest, AlterClientQuotasResponse
from kbroker.security.acl import ALTER_CONFIGS

API_KEY = 49
MIN_VERSION = 0
MAX_VERSION = 1

Entry = AlterClientQuotasResponse.EntryData
Entity = AlterClientQuotasResponse.EntityData


def alterations(request: AlterClientQuotasRequest) -> list[ClientQuotaAlteration]:
    """Kafka's `AlterClientQuotasRequest.entries()`: entity data -> a map (last name of a type wins)."""
    out = []
    for entry in request.entries:
        names: dict[str, str | None] = {}
        for e in entry.entity:
            names[e.entity_type] = e.entity_name
        ops = tuple((op.key, None if op.remove else float(op.value)) for op in entry.ops)
        out.append(ClientQuotaAlteration(tuple(names.items()), ops))
    return out


def _entity(pairs: tuple[tuple[str, str | None], ...]) -> list[AlterClientQuotasResponse.EntityData]:
    names = dict(pairs)
    return [Entity(entity_type=t, entity_name=names[t]) for t in java_hash_map_order(list(names))]


async def handle(services: BrokerServices, ctx: RequestContext, header: RequestHeader,
                 request: AlterClientQuotasRequest) -> AlterClientQuotasResponse:
    if not authorize_cluster(services, ctx, ALTER_CONFIGS):
        return error_response(request, header.api_version, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    results = await services.controller.alter_client_quotas(alterations(request), request.validate_only)
    return AlterClientQuotasResponse(throttle_time_ms=0, entries=[
        Entry(error_code=r.error_code, error_message=r.error_message, entity=_entity(r.entity)) for r in results])


def error_response(request: AlterClientQuotasRequest, version: int, error: ErrorCode) -> AlterClientQuotasResponse:
    return AlterClientQuotasResponse(throttle_time_ms=0, entries=[
        Entry(error_code=int(error), error_message=error.message, entity=_entity(a.entity))
        for a in alterations(request)])
