"""UpdateFeatures (key 57, KIP-584 / KIP-778): `kafka-features upgrade / downgrade / disable`.

Versions 0-2. ALTER on the cluster (else CLUSTER_AUTHORIZATION_FAILED). The single node's controller
applies Kafka's FeatureControlManager rules to the features it implements (`LocalController.update_features`):
an unknown feature, a level outside the supported range or a downgrade with upgrade type UPGRADE is
INVALID_UPDATE_VERSION ("The update failed for all features since the following feature had an
error: ...") and nothing changes; otherwise one FeatureLevelRecord per changed feature (level 0 removes
it), unless `validate_only` (v1+). v0 says `allow_downgrade` instead of an upgrade type (true = safe
downgrade). v0-1 list a result per feature on success (error NONE, message "NONE", as Kafka 4.3.1), none
on a failure; v2 has no per-feature results.

Served on broker and controller listeners, as in Kafka: a KRaft broker (`process.roles=broker`, or the
broker side of a combined node -- kbroker's default single node) forwards the client's request to the
active controller in one Envelope (`RemoteController.forward`, Kafka's `ForwardingManager`) and answers
once its own image holds the new levels; the `QuorumController` applies the same rules
(`kbroker/controller/feature_control.py`: the ranges this controller, every registered broker and every
other registered controller support, and feature dependencies such as eligible.leader.replicas.version 1
needing metadata.version 4.0-IV1), and with eligible.leader.replicas.version turned on it first writes
Kafka's ELR safety records (the cluster-level min.insync.replicas; docs/replication.md).
"""

from __future__ import annotations

from typing import Any

from kbroker.api._authz import check_cluster
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.headers import RequestHeader
from kbroker.protocol.messages.update_features import UpdateFeaturesRequest, UpdateFeaturesResponse
from kbroker.security.acl import ALTER

API_KEY = 57
MIN_VERSION = 0
MAX_VERSION = 2
LISTENERS = ("broker", "controller")
VERSION_NOTES = ("transaction.version, group.version and eligible.leader.replicas.version (KIP-890 part 2, "
                 "KIP-966 on and off); metadata.version is not changed. A KRaft broker forwards it to the "
                 "active controller.")

R = UpdateFeaturesResponse
SAFE_DOWNGRADE, UPGRADE = 2, 1


def error_response(request: UpdateFeaturesRequest, version: int, error: ErrorCode,
                   message: str | None = None) -> UpdateFeaturesResponse:
    return R(throttle_time_ms=0, error_code=error, error_message=message, results=[])


async def _update(services: BrokerServices, request: UpdateFeaturesRequest, version: int) -> UpdateFeaturesResponse:
    updates: dict[str, tuple[int, int]] = {}
    for u in request.feature_updates:
        upgrade_type = (SAFE_DOWNGRADE if u.allow_downgrade else UPGRADE) if version == 0 else u.upgrade_type
        updates[u.feature] = (u.max_version_level, upgrade_type)
    try:
        await services.controller.update_features(updates, request.validate_only if version >= 1 else False)
    except KafkaError as exc:
        return error_response(request, version, exc.error_code, str(exc))
    results = [R.UpdatableFeatureResult(feature=name, error_code=ErrorCode.NONE, error_message="NONE")
               for name in updates] if version < 2 else []
    return R(throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None, results=results)


async def _forward(services: BrokerServices, request: UpdateFeaturesRequest, version: int) -> UpdateFeaturesResponse:
    assert services.kraft is not None
    validate_only = request.validate_only if version >= 1 else False
    try:
        return await services.kraft.controller.forward(API_KEY, request, UpdateFeaturesResponse, version=version,
                                                       validate_only=validate_only)
    except KafkaError as exc:
        return error_response(request, version, exc.error_code, str(exc))


def handle(services: BrokerServices, ctx: RequestContext, header: RequestHeader,
           request: UpdateFeaturesRequest) -> Any:
    check_cluster(services, ctx, ALTER)
    if services.kraft is not None:
        return _forward(services, request, header.api_version)
    return _update(services, request, header.api_version)
