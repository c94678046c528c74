"""Kafka's ForwardingManager on a KRaft broker (`RemoteController.forward`, `ControllerChannel.forward`):
the client's request goes in the Envelope as it came -- its api version, correlation id and client
id -- with the client's principal (DefaultPrincipalData) and address; the inner response is decoded at
the client's version and is the client's answer. Envelope-level errors map as Kafka's: NOT_CONTROLLER
goes to the next leader, UNSUPPORTED_VERSION closes the client's connection, anything else is
UNKNOWN_SERVER_ERROR for the client. The controller is a scripted fake connection here; the real
processes are in tests/security/test_acl_scram_forwarding_kraft.py."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from kbroker.api.context import CloseConnection, RequestContext
from kbroker.metadata.cache import MetadataCache
from kbroker.protocol import RequestHeader, decode_request_frame, encode_response_frame
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.messages.create_acls import CreateAclsRequest, CreateAclsResponse
from kbroker.protocol.messages.envelope import EnvelopeRequest, EnvelopeResponse
from kbroker.security.principal import KafkaPrincipal, deserialize_principal
from kbroker.server.metadata_fetcher import LeaderAndEpoch
from kbroker.server.remote_controller import RemoteController
from kbroker.server.settings import QuorumNode
from tests.server.test_controller_channel import make

CREATE_ACLS = 30


def _inner_response(version: int, correlation_id: int, codes: list[int]) -> bytes:
    body = CreateAclsResponse(throttle_time_ms=0, results=[
        CreateAclsResponse.AclCreationResult(error_code=c, error_message=None) for c in codes])
    parts = encode_response_frame(CREATE_ACLS, version, correlation_id, body)
    return b"".join(bytes(p) for p in parts if isinstance(p, bytes | bytearray | memoryview))[4:]


def _request() -> CreateAclsRequest:
    return CreateAclsRequest(creations=[CreateAclsRequest.AclCreation(
        resource_type=2, resource_name="orders", resource_pattern_type=3, principal="User:bob", host="*",
        operation=3, permission_type=3)])


def _controller(tmp_path: Path, script: list[object]) -> tuple[RemoteController, list[tuple[int, int, object]],
                                                               list[str]]:
    fetcher, channel, sent = make(tmp_path, script)
    fetcher._set_leader(LeaderAndEpoch(1, 5, QuorumNode(1, "h", 9001)))
    controller = RemoteController(node_id=3, channel=channel, fetcher=fetcher, cache=MetadataCache(3),
                                  broker_epoch=lambda: 21, request_timeout_ms=2000)
    waited: list[str] = []

    async def caught_up(done: object = None) -> None:
        waited.append("barrier")

    controller._caught_up = caught_up  # type: ignore[method-assign,assignment]
    return controller, sent, waited


CTX = RequestContext(client_id="adminclient-1", listener_name="CLIENTS", peer=("10.0.0.7", 51000),
                     principal="User:alice")


def test_the_clients_request_is_forwarded_as_it_came(tmp_path: Path) -> None:
    header = RequestHeader(api_key=CREATE_ACLS, api_version=1, correlation_id=77, client_id="adminclient-1")
    controller, sent, waited = _controller(tmp_path, [
        EnvelopeResponse(error_code=0, response_data=_inner_response(1, 77, [0]))])
    resp = asyncio.run(controller.forward_request(CTX, header, _request()))
    assert isinstance(resp, CreateAclsResponse) and [r.error_code for r in resp.results] == [0]
    [(port, key, envelope)] = sent
    assert (port, key) == (9001, 58) and isinstance(envelope, EnvelopeRequest)
    inner_header, inner_body = decode_request_frame(bytes(envelope.request_data))
    assert (inner_header.api_key, inner_header.api_version, inner_header.correlation_id,
            inner_header.client_id) == (CREATE_ACLS, 1, 77, "adminclient-1")
    assert inner_body == _request()
    assert deserialize_principal(bytes(envelope.request_principal or b"")) == KafkaPrincipal.user("alice")
    assert bytes(envelope.client_host_address) == bytes([10, 0, 0, 7])
    assert waited == ["barrier"]  # a success waits for this broker's image


def test_a_refused_creation_does_not_wait_for_the_image(tmp_path: Path) -> None:
    header = RequestHeader(api_key=CREATE_ACLS, api_version=3, correlation_id=5, client_id="c")
    controller, _, waited = _controller(tmp_path, [EnvelopeResponse(
        error_code=0, response_data=_inner_response(3, 5, [int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)]))])
    resp = asyncio.run(controller.forward_request(CTX, header, _request()))
    assert isinstance(resp, CreateAclsResponse)
    assert [r.error_code for r in resp.results] == [ErrorCode.CLUSTER_AUTHORIZATION_FAILED]
    assert waited == []


def test_envelope_errors_map_as_kafkas_forwarding_manager(tmp_path: Path) -> None:
    header = RequestHeader(api_key=CREATE_ACLS, api_version=2, correlation_id=9, client_id="c")
    # NOT_CONTROLLER on the Envelope: the next leader gets it.
    controller, sent, _ = _controller(tmp_path / "a", [
        EnvelopeResponse(error_code=int(ErrorCode.NOT_CONTROLLER), response_data=None),
        EnvelopeResponse(error_code=0, response_data=_inner_response(2, 9, [0]))])

    async def failover() -> object:
        async def new_leader() -> None:
            await asyncio.sleep(0.05)
            controller.fetcher._set_leader(LeaderAndEpoch(2, 6, QuorumNode(2, "h", 9002)))  # type: ignore[attr-defined]

        task = asyncio.get_running_loop().create_task(new_leader())
        resp = await controller.forward_request(CTX, header, _request())
        await task
        return resp

    assert isinstance(asyncio.run(failover()), CreateAclsResponse)
    assert [port for port, _, _ in sent] == [9001, 9002]
    # The broker may not forward (no CLUSTER_ACTION there): UNKNOWN_SERVER_ERROR for the client.
    controller, _, _ = _controller(tmp_path / "b", [
        EnvelopeResponse(error_code=int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED), response_data=None)])
    with pytest.raises(KafkaError) as info:
        asyncio.run(controller.forward_request(CTX, header, _request()))
    assert info.value.error_code == ErrorCode.UNKNOWN_SERVER_ERROR
    # The controller does not speak the client's version: the client's connection is closed.
    controller, _, _ = _controller(tmp_path / "c", [
        EnvelopeResponse(error_code=int(ErrorCode.UNSUPPORTED_VERSION), response_data=None)])
    with pytest.raises(CloseConnection):
        asyncio.run(controller.forward_request(CTX, header, _request()))


def test_internal_topics_are_created_as_the_broker_not_in_the_clients_envelope(tmp_path: Path) -> None:
    """Kafka's AutoTopicCreationManager creates `__consumer_offsets` (and the other internal topics) as
    the broker: a consumer whose FindCoordinator needed it may not CREATE topics. A user topic auto-created
    for a client goes in the client's Envelope."""
    from kbroker.api.context import CURRENT_REQUEST_ORIGIN, RequestOrigin
    from kbroker.controller.controller import NewTopic
    from kbroker.protocol.messages.create_topics import CreateTopicsResponse

    def created(name: str) -> CreateTopicsResponse:
        return CreateTopicsResponse(throttle_time_ms=0, topics=[CreateTopicsResponse.CreatableTopicResult(
            name=name, topic_id=uuid.uuid4(), error_code=int(ErrorCode.TOPIC_ALREADY_EXISTS),
            error_message="exists", num_partitions=1, replication_factor=1, configs=[])])

    controller, sent, _ = _controller(tmp_path, [created("__consumer_offsets")])
    token = CURRENT_REQUEST_ORIGIN.set(RequestOrigin(principal="User:alice", host="10.0.0.7", client_id="consumer-1"))
    try:
        with pytest.raises(KafkaError):
            asyncio.run(controller.create_new_topic(NewTopic("__consumer_offsets", 50, 1)))
    finally:
        CURRENT_REQUEST_ORIGIN.reset(token)
    [(_, key, _body)] = sent
    assert key == 19  # CreateTopics itself, not an Envelope (58) carrying alice
