"""BrokerTopicMetrics' share-group meters (KIP-932), recorded as Kafka 4.3.1 records them: once per
topic of a request, broker-wide and per topic.

- TotalShareFetchRequestsPerSec: each topic a ShareFetch fetches (the share session's partitions;
  Kafka's SharePartitionManager.fetchMessages);
- FailedShareFetchRequestsPerSec: each topic with a partition answered with an error (Kafka's
  ShareFetch.addErroneousToResponse);
- TotalShareAcknowledgementRequestsPerSec: each topic acknowledged, by ShareAcknowledge or within a
  ShareFetch (Kafka's SharePartitionManager.acknowledge);
- FailedShareAcknowledgementRequestsPerSec: each topic with an acknowledgement that failed (Kafka's
  failedShareAcknowledgeMetricsHandler).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from kbroker.api.context import BrokerServices
from kbroker.coord.share_partition_manager import ShareFetchOutcome
from kbroker.protocol.errors import ErrorCode


def _mark(services: BrokerServices, topic_ids: Iterable[uuid.UUID], field: str) -> None:
    metrics = services.metrics
    if metrics is None:
        return
    for tid in set(topic_ids):
        info = services.metadata.topic_by_id(tid)
        if info is not None:
            stats = metrics.topic(info.name)
            setattr(stats, field, getattr(stats, field) + 1)


def share_fetch_started(services: BrokerServices, outcome: ShareFetchOutcome, fetching: bool,
                        acknowledged: Iterable[uuid.UUID]) -> None:
    """A ShareFetch was accepted: its fetched topics (`fetching`: not a final-epoch close) and the
    topics it acknowledges."""
    if outcome.error != ErrorCode.NONE:
        return
    if fetching and outcome.session is not None:
        _mark(services, (tid for tid, _p in outcome.session.partitions), "total_share_fetch_requests")
    _mark(services, acknowledged, "total_share_acknowledgement_requests")


def share_fetch_answered(services: BrokerServices, outcome: ShareFetchOutcome) -> None:
    if outcome.error != ErrorCode.NONE:
        return
    _mark(services, (k[0] for k, r in outcome.partitions.items() if r.error != ErrorCode.NONE),
          "failed_share_fetch_requests")
    share_acknowledge_answered(services, outcome)


def share_acknowledge_answered(services: BrokerServices, outcome: ShareFetchOutcome) -> None:
    _mark(services, (k[0] for k, r in outcome.partitions.items()
                     if r.acknowledged and r.acknowledge_error != ErrorCode.NONE),
          "failed_share_acknowledgement_requests")
