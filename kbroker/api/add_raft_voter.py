"""AddRaftVoter (API key 80, v0-1, KIP-853) on a broker listener: forwarded to the active controller.

`kafka-metadata-quorum --bootstrap-server <broker> add-controller` sends it to a broker. Kafka 4.3.1's
broker does not handle it: `KafkaApis` forwards it, as it came, to the active controller in an Envelope
(`forwardToController`), and the controller's `ControllerApis.handleAddRaftVoter` hands it to the Raft
leader (ALTER on the cluster, checked there for the client's principal). kbroker's KRaft broker (and the
broker side of a combined node) does the same (`RemoteController.forward_request`); the answer comes back
once the VotersRecord commits. On the controller listener the Raft client serves it directly
(`kbroker/server/controller_apis.py`). kbroker's embedded single node has no Raft quorum and leaves it out.
"""

from __future__ import annotations

from typing import Any

from kbroker.api.context import BrokerServices, RequestContext
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.headers import RequestHeader
from kbroker.protocol.messages.add_raft_voter import AddRaftVoterRequest, AddRaftVoterResponse

API_KEY = 80
MIN_VERSION = 0
MAX_VERSION = 1
LISTENERS = ("broker",)
KRAFT_BROKER_FORWARDS = True
VERSION_NOTES = ("A KRaft broker forwards it to the active controller (Kafka's KafkaApis.forwardToController); "
                 "served by the Raft leader on controller listeners.")


def error_response(request: AddRaftVoterRequest, version: int, error: ErrorCode) -> AddRaftVoterResponse:
    return AddRaftVoterResponse(throttle_time_ms=0, error_code=int(error), error_message=error.message)


def handle(services: BrokerServices, ctx: RequestContext, header: RequestHeader, request: AddRaftVoterRequest) -> Any:
    assert services.kraft is not None  # KRAFT_BROKER_FORWARDS: served on a KRaft broker only
    return services.kraft.controller.forward_request(ctx, header, request)
