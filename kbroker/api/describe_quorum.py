"""DescribeQuorum (API key 55, v0-2, KIP-595 / KIP-853) on a broker listener: forwarded to the active controller.

`kafka-metadata-quorum --bootstrap-server <broker> describe --status / --replication` sends it to a broker.
Kafka 4.3.1's broker forwards it, as it came, to the active controller in an Envelope
(`KafkaApis.forwardToController`); the controller's `ControllerApis.handleDescribeQuorum` answers from the
Raft leader (DESCRIBE on the cluster, checked there for the client's principal). kbroker's KRaft broker (and
the broker side of a combined node) does the same (`RemoteController.forward_request`). On the controller
listener the Raft client answers it directly (`kbroker/server/controller_apis.py`). kbroker's embedded
single node has no Raft quorum and leaves it out.
"""

from __future__ import annotations

from typing import Any

from kbroker.api.context import BrokerServices, RequestContext
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.headers import RequestHeader
from kbroker.protocol.messages.describe_quorum import DescribeQuorumRequest, DescribeQuorumResponse

API_KEY = 55
MIN_VERSION = 0
MAX_VERSION = 2
LISTENERS = ("broker",)
KRAFT_BROKER_FORWARDS = True
VERSION_NOTES = ("A KRaft broker forwards it to the active controller (Kafka's KafkaApis.forwardToController); "
                 "answered by the Raft leader on controller listeners.")


def error_response(request: DescribeQuorumRequest, version: int, error: ErrorCode) -> DescribeQuorumResponse:
    return DescribeQuorumResponse(error_code=int(error), error_message=error.message if version >= 2 else None)


def handle(services: BrokerServices, ctx: RequestContext, header: RequestHeader,
           request: DescribeQuorumRequest) -> Any:
    assert services.kraft is not None  # KRAFT_BROKER_FORWARDS: served on a KRaft broker only
    return services.kraft.controller.forward_request(ctx, header, request)
