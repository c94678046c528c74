"""WriteTxnMarkers (key 27): append COMMIT/ABORT control batches to partitions this broker leads.

Versions 1-2 (Kafka 4 removed v0). The transaction coordinator sends it to every partition leader of a
completing transaction (`kbroker/coord/transaction_marker_channel.py`; for partitions led by the
coordinator's own broker it calls the same code in-process). Each marker is appended with acks=all
(Kafka's requiredAcks -1): a partition answers once the high watermark passed its marker, so an
acknowledged marker survives a leader change. Errors, as Kafka's `handleWriteTxnMarkersRequest`: a
partition not led here NOT_LEADER_OR_FOLLOWER, an unknown one UNKNOWN_TOPIC_OR_PARTITION, a marker
with an older producer epoch than the partition saw INVALID_PRODUCER_EPOCH, and one from an older
coordinator epoch than this producer's last marker TRANSACTION_COORDINATOR_FENCED (Kafka's
`ProducerAppendInfo.checkCoordinatorEpoch`: a zombie coordinator cannot write). From v2 a marker carries
its transaction version (KIP-1228; 0 below v2): a version-2 marker at the epoch the partition already
has is refused too while the producer's transaction there is open (a late marker would end the next
transaction, which writes at that epoch).
"""

from __future__ import annotations

from typing import Any

from kbroker.api._authz import authorize_cluster, check_cluster
from kbroker.api._groups import gather, then
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
    answers = []
    for m in request.markers:
        for t in m.topics:
            for p in t.partition_indexes:
                answers.append(txn.write_marker_replicated(t.name, p, m.producer_id, m.producer_epoch,
                                                           m.coordinator_epoch, m.transaction_result,
                                                           m.transaction_version))

    def respond(errors: list[ErrorCode]) -> WriteTxnMarkersResponse:
        it = iter(errors)
        return R(markers=[R.WritableTxnMarkerResult(producer_id=m.producer_id, topics=[
            R.WritableTxnMarkerTopicResult(name=t.name, partitions=[
                R.WritableTxnMarkerPartitionResult(partition_index=p, error_code=next(it))
                for p in t.partition_indexes]) for t in m.topics]) for m in request.markers])

    return then(gather(answers), respond)
