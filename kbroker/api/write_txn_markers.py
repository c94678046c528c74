"""WriteTxnMarkers (key 27): append COMMIT/ABORT control batches to partitions this broker leads.

Versions 1-2 (Kafka 4 removed v0). Kafka's transaction coordinator sends it to every partition
leader of a completing transaction; kbroker's coordinator, hosting every partition, writes the same
markers in-process (`TransactionCoordinatorService.write_marker`, what this handler calls), so the
API serves other tools and a future multi-broker coordinator. A partition not led here is
NOT_LEADER_OR_FOLLOWER, an unknown one UNKNOWN_TOPIC_OR_PARTITION, a marker with an older producer
epoch than the partition saw INVALID_PRODUCER_EPOCH.
"""

from __future__ import annotations

from typing import Any

from kbroker.api._authz import authorize_cluster, check_cluster
from kbroker.api.context import BrokerServices, RequestContext
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.headers import RequestHeader
from kbroker.protocol.messages.write_txn_markers import WriteTxnMarkersRequest, WriteTxnMarkersResponse
from kbroker.security.acl import ALTER, CLUSTER_ACTION

API_KEY = 27
MIN_VERSION = 1
MAX_VERSION = 2

R = WriteTxnMarkersResponse


def error_response(request: WriteTxnMarkersRequest, version: int, error: ErrorCode) -> WriteTxnMarkersResponse:
    return R(markers=[R.WritableTxnMarkerResult(producer_id=m.producer_id, topics=[
        R.WritableTxnMarkerTopicResult(name=t.name, partitions=[
            R.WritableTxnMarkerPartitionResult(partition_index=p, error_code=error) for p in t.partition_indexes])
        for t in m.topics]) for m in request.markers])


def handle(services: BrokerServices, ctx: RequestContext, header: RequestHeader,
           request: WriteTxnMarkersRequest) -> Any:
    if services.authorizer is not None and not authorize_cluster(services, ctx, ALTER):
        # KafkaApis: ALTER on the cluster, or else CLUSTER_ACTION (CLUSTER_AUTHORIZATION_FAILED everywhere).
        check_cluster(services, ctx, CLUSTER_ACTION)
    txn = services.transaction_coordinator
    results = []
    for m in request.markers:
        topics = []
        for t in m.topics:
            parts = [R.WritableTxnMarkerPartitionResult(partition_index=p, error_code=txn.write_marker(
                t.name, p, m.producer_id, m.producer_epoch, m.coordinator_epoch, m.transaction_result))
                for p in t.partition_indexes]
            topics.append(R.WritableTxnMarkerTopicResult(name=t.name, partitions=parts))
        results.append(R.WritableTxnMarkerResult(producer_id=m.producer_id, topics=topics))
    return R(markers=results)
