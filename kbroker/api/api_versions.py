"""ApiVersions (key 18): the version ranges we serve and the cluster's finalized features.

Advertises exactly the discovered handler modules' ranges (see dispatcher.py). Features: we
support and finalize `metadata.version` (Kafka 4.3's production level) and `group.version`
(supported 0-1, finalized 1: the KIP-848 consumer protocol, ConsumerGroupHeartbeat/Describe, is on,
as in Kafka 4.x) and `share.version` (supported 0-1, finalized 1, Kafka 4.3's production level SV_1:
KIP-932 share groups, ShareGroupHeartbeat/Describe and ShareFetch/ShareAcknowledge, are on; their
state is not durable yet, docs/share-groups.md). `transaction.version` is supported 0-2 and finalized at
the level of the metadata image (a new cluster bootstraps 2, as Kafka 4.3's does; a data directory
from before has none, 0): a Kafka 4.x producer reads finalized `transaction.version >= 2` to switch to
transactions version 2 (Produce v12, EndTxn v5, TxnOffsetCommit v5, KIP-890 part 2, docs/transactions.md);
a level of 0 is not listed, as Kafka lists only finalized levels above 0. `kraft.version` (KIP-853) is
supported 0-1 and finalized at the Raft layer's level, not the image's (the latest KRaftVersionRecord of
the node's metadata log: 0 for a static controller.quorum.voters quorum, so not listed; 1 for a dynamic
one or after `kafka-features upgrade --feature kraft.version=1`), as Kafka's KRaftMetadataCache.features
and the controller's ApiVersions report it. KAFKA-17011: before
ApiVersions v4, a supported feature whose minimum is 0 is left out (older clients reject it).
"""

from __future__ import annotations

import re
from typing import Any

from kbroker.api.context import BrokerServices, RequestContext
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.headers import API_VERSIONS_KEY, RequestHeader
from kbroker.protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse

API_KEY = 18
MIN_VERSION = 0
MAX_VERSION = 4
VERSION_NOTES = (
    "Finalized features: metadata.version, group.version=1 (KIP-848), share.version=1 (KIP-932) and "
    "transaction.version from the metadata image (2 on a new cluster: KIP-890 part 2); kraft.version supported 0-1, "
    "finalized at the Raft layer's level when above 0 (KIP-853). Unknown versions get a v0 UNSUPPORTED_VERSION answer (KIP-511)."
)

# MetadataVersion of Apache Kafka 4.3: MINIMUM_VERSION 3.3-IV3 (level 7), LATEST_PRODUCTION 4.3-IV0
# (level 30).
METADATA_VERSION_FEATURE = "metadata.version"
METADATA_VERSION_MIN = 7
METADATA_VERSION_LEVEL = 30
# GroupVersion of Apache Kafka 4.3: GV_1 (the consumer rebalance protocol) is the production level.
GROUP_VERSION_FEATURE = "group.version"
GROUP_VERSION_MIN = 0
GROUP_VERSION_LEVEL = 1
# ShareVersion of Apache Kafka 4.3: SV_1 (share groups, KIP-932) is the production level.
SHARE_VERSION_FEATURE = "share.version"
SHARE_VERSION_MIN = 0
SHARE_VERSION_LEVEL = 1
# TransactionVersion of Apache Kafka 4.3: TV_2 (KIP-890 part 2) is the production level; the finalized
# level is the metadata image's.
TRANSACTION_VERSION_FEATURE = "transaction.version"
TRANSACTION_VERSION_MIN = 0
TRANSACTION_VERSION_MAX = 2
# EligibleLeaderReplicasVersion of Apache Kafka 4.3: ELRV_1 (KIP-966); the finalized level is the image's.
ELIGIBLE_LEADER_REPLICAS_VERSION_FEATURE = "eligible.leader.replicas.version"
ELIGIBLE_LEADER_REPLICAS_VERSION_MIN = 0
ELIGIBLE_LEADER_REPLICAS_VERSION_MAX = 1
# KRaftVersion of Apache Kafka 4.3: KRAFT_VERSION_1 (KIP-853 dynamic quorums) is the latest level.
KRAFT_VERSION_FEATURE = "kraft.version"
KRAFT_VERSION_MIN = 0
KRAFT_VERSION_MAX = 1
# The finalized-features epoch is the metadata log offset in Kafka (the image's last offset here); at
# least 1, a valid epoch, before the image has any.
FINALIZED_FEATURES_EPOCH = 1

# KIP-511: client software name and version must match this (ApiVersionsRequest.isValid).
_SOFTWARE_RE = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


def _api_keys(services: BrokerServices) -> list[Any]:
    return [
        ApiVersionsResponse.ApiVersion(api_key=k, min_version=lo, max_version=hi)
        for k, (lo, hi) in sorted(services.api_ranges.items())
    ]


def unsupported_version_response(services: BrokerServices) -> ApiVersionsResponse:
    """The v0 body Kafka sends for an ApiVersions version it does not know (KIP-511): UNSUPPORTED_VERSION
    and one entry, ApiVersions' own range (ApiVersionsRequest.getErrorResponse), so the client retries
    with a version it shares. Listing every API here instead made franz-go take the v0 table (which has
    no finalized features) as the answer: its first transaction then ran on transactions version 1."""
    lo, hi = services.api_ranges[API_VERSIONS_KEY]
    return ApiVersionsResponse(error_code=ErrorCode.UNSUPPORTED_VERSION, api_keys=[
        ApiVersionsResponse.ApiVersion(api_key=API_VERSIONS_KEY, min_version=lo, max_version=hi)])


def error_response(request: Any, version: int, error: ErrorCode) -> ApiVersionsResponse:
    return ApiVersionsResponse(error_code=error)


def kraft_version(services: BrokerServices) -> int:
    """The finalized kraft.version: the Raft client's on a controller (and a combined node), the broker's
    metadata log's on a process.roles=broker node, 0 on the in-process single node (no Raft)."""
    if services.kraft_controller is not None:
        return services.kraft_controller.kraft_version()
    if services.kraft is not None:
        return services.kraft.kraft_version()
    return 0


def handle(
    services: BrokerServices, ctx: RequestContext, header: RequestHeader, request: ApiVersionsRequest
) -> ApiVersionsResponse:
    version = header.api_version
    if version >= 3:
        name = request.client_software_name
        sw_version = request.client_software_version
        if not (_SOFTWARE_RE.fullmatch(name or "") and _SOFTWARE_RE.fullmatch(sw_version or "")):
            # Kafka answers INVALID_REQUEST (with no api keys) and keeps the connection.
            return ApiVersionsResponse(error_code=ErrorCode.INVALID_REQUEST)
        ctx.client_software_name = name
        ctx.client_software_version = sw_version
    response = ApiVersionsResponse(error_code=ErrorCode.NONE, api_keys=_api_keys(services), throttle_time_ms=0)
    if version >= 3:
        supported = [(METADATA_VERSION_FEATURE, METADATA_VERSION_MIN, METADATA_VERSION_LEVEL),
                     (ELIGIBLE_LEADER_REPLICAS_VERSION_FEATURE, ELIGIBLE_LEADER_REPLICAS_VERSION_MIN,
                      ELIGIBLE_LEADER_REPLICAS_VERSION_MAX),
                     (GROUP_VERSION_FEATURE, GROUP_VERSION_MIN, GROUP_VERSION_LEVEL),
                     (KRAFT_VERSION_FEATURE, KRAFT_VERSION_MIN, KRAFT_VERSION_MAX),
                     (SHARE_VERSION_FEATURE, SHARE_VERSION_MIN, SHARE_VERSION_LEVEL),
                     (TRANSACTION_VERSION_FEATURE, TRANSACTION_VERSION_MIN, TRANSACTION_VERSION_MAX)]
        response.supported_features = [
            ApiVersionsResponse.SupportedFeatureKey(name=name, min_version=lo, max_version=hi)
            for name, lo, hi in supported if version >= 4 or lo > 0
        ]
        # Kafka's epoch is the metadata image's offset: a client keeps the finalized features of the
        # highest epoch it saw, so a feature change (UpdateFeatures) must raise it.
        response.finalized_features_epoch = max(FINALIZED_FEATURES_EPOCH,
                                                services.metadata.image.provenance.last_contained_offset)
        finalized = [(METADATA_VERSION_FEATURE, METADATA_VERSION_LEVEL), (GROUP_VERSION_FEATURE, GROUP_VERSION_LEVEL),
                     (SHARE_VERSION_FEATURE, SHARE_VERSION_LEVEL)]
        transaction_version = min(services.transaction_coordinator.transaction_version(), TRANSACTION_VERSION_MAX)
        if transaction_version > 0:
            finalized.append((TRANSACTION_VERSION_FEATURE, transaction_version))
        elr_version = min(services.metadata.image.features.finalized_versions.get(
            ELIGIBLE_LEADER_REPLICAS_VERSION_FEATURE, 0), ELIGIBLE_LEADER_REPLICAS_VERSION_MAX)
        if elr_version > 0:
            finalized.append((ELIGIBLE_LEADER_REPLICAS_VERSION_FEATURE, elr_version))
        kraft_level = min(kraft_version(services), KRAFT_VERSION_MAX)
        if kraft_level > 0:
            finalized.append((KRAFT_VERSION_FEATURE, kraft_level))
        response.finalized_features = [
            ApiVersionsResponse.FinalizedFeatureKey(name=name, max_version_level=level, min_version_level=level)
            for name, level in finalized
        ]
    return response
