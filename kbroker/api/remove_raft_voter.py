"""RemoveRaftVoter (API key 81, v0, KIP-853) on a broker listener: forwarded to the active controller.

`kafka-metadata-quorum --bootstrap-server <broker> remove-controller` sends it to a broker; Kafka 4.3.1's
`KafkaApis` forwards it to the active controller in an Envelope (`forwardToController`), and so does a
kbroker KRaft broker (`RemoteController.forward_request`); the Raft leader answers once the VotersRecord
without the voter commits. On the controller listener the Raft client serves it directly
(`kbroker/server/controller_apis.py`). kbroker's embedded single node has no Raft quorum and leaves it out.
UpdateRaftVoter (82) is not served on broker listeners, as in Kafka (a voter sends it to the leader).
"""

from __future__ import annotations

from typing import Any

from kbroker.api.context import BrokerServices, RequestContext
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.headers import RequestHeader
from kbroker.protocol.messages.remove_raft_voter import RemoveRaftVoterRequest, RemoveRaftVoterResponse

API_KEY = 81
MIN_VERSION = 0
MAX_VERSION = 0
LISTENERS = ("broker",)
KRAFT_BROKER_FORWARDS = True
VERSION_NOTES = ("A KRaft broker forwards it to the active controller (Kafka's KafkaApis.forwardToController); "
                 "served by the Raft leader on controller listeners.")


def error_response(request: RemoveRaftVoterRequest, version: int, error: ErrorCode) -> RemoveRaftVoterResponse:
    return RemoveRaftVoterResponse(throttle_time_ms=0, error_code=int(error), error_message=error.message)


def handle(services: BrokerServices, ctx: RequestContext, header: RequestHeader,
           request: RemoveRaftVoterRequest) -> Any:
    assert services.kraft is not None  # KRAFT_BROKER_FORWARDS: served on a KRaft broker only
    return services.kraft.controller.forward_request(ctx, header, request)
