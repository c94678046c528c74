"""`RemoteController._send` on a per-resource NOT_CONTROLLER (the controller lost the leadership, or won
the Raft election but has not claimed the controller yet): it forwards again with backoff until
`controller.socket.timeout.ms`, as Kafka's `NodeToControllerRequestThread` requeues the request, so the
client never sees NOT_CONTROLLER; past the deadline the client's answer is REQUEST_TIMED_OUT."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from kbroker.metadata.cache import MetadataCache
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.messages.create_topics import CreateTopicsRequest, CreateTopicsResponse
from kbroker.server.metadata_fetcher import LeaderAndEpoch
from kbroker.server.remote_controller import CREATE_TOPICS, RemoteController


class FakeFollower:
    def __init__(self) -> None:
        self.leader = LeaderAndEpoch(1, 1, None)
        self.forgotten: list[int] = []

    def forget_leader(self, leader_id: int) -> None:
        self.forgotten.append(leader_id)

    async def barrier(self, timeout_s: float, done: Callable[[], bool] | None = None) -> None:
        return None


class FakeChannel:
    """Answers per-topic NOT_CONTROLLER `not_active` times, then success."""

    retry_backoff_ms = 5

    def __init__(self, not_active: int) -> None:
        self.not_active = not_active
        self.sent = 0

    async def send(self, api_key: int, body: object, response_type: type[object], *,
                   version: int | None = None) -> object:
        self.sent += 1
        code = ErrorCode.NOT_CONTROLLER if self.sent <= self.not_active else ErrorCode.NONE
        return CreateTopicsResponse(topics=[CreateTopicsResponse.CreatableTopicResult(
            name="t", error_code=int(code), configs=[])])


def _controller(channel: FakeChannel, timeout_ms: int) -> RemoteController:
    return RemoteController(node_id=1, channel=channel, fetcher=FakeFollower(),  # type: ignore[arg-type]
                            cache=MetadataCache(1), broker_epoch=lambda: 1, request_timeout_ms=timeout_ms)


def _request() -> CreateTopicsRequest:
    return CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
        name="t", num_partitions=1, replication_factor=1, assignments=[], configs=[])])


def test_a_long_controller_change_is_waited_for_not_answered_not_controller() -> None:
    channel = FakeChannel(not_active=12)
    resp = asyncio.run(_controller(channel, 30000).forward(CREATE_TOPICS, _request(), CreateTopicsResponse,
                                                            version=7, validate_only=False))
    assert [t.error_code for t in resp.topics] == [0]
    assert channel.sent == 13


def test_no_active_controller_until_the_deadline_is_request_timed_out() -> None:
    channel = FakeChannel(not_active=10**9)
    with pytest.raises(KafkaError) as err:
        asyncio.run(_controller(channel, 300).forward(CREATE_TOPICS, _request(), CreateTopicsResponse,
                                                      version=7, validate_only=False))
    assert err.value.error_code == ErrorCode.REQUEST_TIMED_OUT
    assert channel.sent > 1


def test_the_controller_lifts_an_inner_not_controller_to_the_envelope() -> None:
    """Kafka's RequestChannel.buildResponseSend: a NOT_CONTROLLER anywhere in the inner response makes the
    Envelope's error NOT_CONTROLLER (the forwarding broker then sends again to the active controller)."""
    from kbroker.server.controller_apis import carries_error

    def resp(*codes: int) -> CreateTopicsResponse:
        return CreateTopicsResponse(topics=[CreateTopicsResponse.CreatableTopicResult(
            name=f"t{i}", error_code=c, configs=[]) for i, c in enumerate(codes)])

    assert carries_error(resp(0, int(ErrorCode.NOT_CONTROLLER)), ErrorCode.NOT_CONTROLLER)
    assert not carries_error(resp(0, int(ErrorCode.TOPIC_ALREADY_EXISTS)), ErrorCode.NOT_CONTROLLER)
    assert not carries_error(resp(), ErrorCode.NOT_CONTROLLER)
