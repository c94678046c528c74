"""`RemoteController`: the `Controller` of a broker in a KRaft cluster; every change goes to the active
controller (Kafka's forwarding of admin requests from a broker to the controller).

How it forwards: in an Envelope (KIP-590) when a client's request is behind the change. The API
handlers call the `Controller` interface one resource at a time; each call becomes one request (one
topic or config resource) to the active controller, wrapped in an Envelope that carries the client's
principal (serialized as Kafka's `DefaultKafkaPrincipalBuilder` does), its address and its client id
(`CURRENT_REQUEST_ORIGIN`, set by the dispatcher for the request being handled). So the controller --
Kafka's or kbroker's `QuorumController` -- authorizes the client, not the broker, and charges the
client's `controller_mutation_rate`; the broker's own principal needs CLUSTER_ACTION to forward (Kafka's
rule). Work the broker does on its own behalf (auto-created topics, producer id blocks, ISR changes) goes
directly, as the broker. CreateTopics, CreatePartitions, UpdateFeatures, AlterClientQuotas, DeleteTopics,
AlterConfigs and IncrementalAlterConfigs go as Kafka's `ForwardingManager` sends them: the client's whole
request in one Envelope (`forward`), so the controller's per-request bounds (MAX_RECORDS_PER_USER_OP)
count across its topics and its records of one request commit as one batch. (AlterConfigs and
IncrementalAlterConfigs: what the broker answers itself -- duplicates, BROKER_LOGGER, a BROKER resource
naming another broker -- is left out first, as Kafka's `ConfigAdminManager.preprocess`; see
`kbroker.api.incremental_alter_configs.forward_whole`.) For CreateTopics the broker checks its own ACLs
first when it has an authorizer (with the same image, the same answer) and forwards only what the client
may change. The per-resource methods below (`delete_topic`, `alter_topic_configs`, ...) remain the
`Controller` interface's, one resource per Envelope; the API handlers of a KRaft broker do not use them.

Every change waits, after the controller's success, until this broker's image holds it (the
`MetadataFetcher`'s barrier: a fetch sent after the answer, applied up to the high watermark it
reported), so a client's next Metadata on this broker sees it, as Kafka's brokers do.

Errors come back as `KafkaError(error_code, message)` with the controller's code and message;
no answer within `controller.socket.timeout.ms` is REQUEST_TIMED_OUT.

CreateAcls, DeleteAcls, AlterUserScramCredentials and the delegation token changes
(Create/Renew/ExpireDelegationToken) are forwarded as Kafka's `ForwardingManager` does (`forward_request`): the client's request as it came, header and version, in one Envelope; the controller
authorizes the principal the Envelope carries and answers at the client's version; that inner response
is the client's. An Envelope-level error is UNKNOWN_SERVER_ERROR for the client (UNSUPPORTED_VERSION:
the client's connection is closed, so it refreshes its ApiVersions), no answer REQUEST_TIMED_OUT.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TypeVar

from kbroker.api.context import CURRENT_REQUEST_ORIGIN, CloseConnection, RequestContext
from kbroker.client import RequestTimeoutError
from kbroker.controller.client_quota_control import ClientQuotaAlteration, ClientQuotaAlterationResult
from kbroker.controller.controller import Controller, NewTopic, ProducerIdsBlock
from kbroker.metadata.cache import MetadataCache
from kbroker.metadata.views import TopicInfo
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.headers import RequestHeader
from kbroker.protocol.messages.allocate_producer_ids import (
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
)
from kbroker.protocol.messages.alter_client_quotas import AlterClientQuotasRequest, AlterClientQuotasResponse
from kbroker.protocol.messages.alter_configs import AlterConfigsRequest, AlterConfigsResponse
from kbroker.protocol.messages.create_partitions import CreatePartitionsRequest, CreatePartitionsResponse
from kbroker.protocol.messages.create_topics import CreateTopicsRequest, CreateTopicsResponse
from kbroker.protocol.messages.delete_topics import DeleteTopicsRequest, DeleteTopicsResponse
from kbroker.protocol.messages.incremental_alter_configs import (
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from kbroker.security.principal import parse_principal, serialize_principal
from kbroker.server.controller_channel import ControllerChannel, EnvelopeError
from kbroker.server.metadata_follower import MetadataFollower

log = logging.getLogger(__name__)

CREATE_TOPICS = 19
DELETE_TOPICS = 20
ALTER_CONFIGS = 33
CREATE_PARTITIONS = 37
INCREMENTAL_ALTER_CONFIGS = 44
ALTER_CLIENT_QUOTAS = 49
UPDATE_FEATURES = 57
ALLOCATE_PRODUCER_IDS = 67

TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4
GROUP_RESOURCE = 32
OP_SET, OP_DELETE = 0, 1
TOPIC_CONFIG_SOURCE = 1  # DescribeConfigsResponse ConfigSource.TOPIC_CONFIG
ZERO_UUID = uuid.UUID(int=0)


# What Kafka's brokers forward in an Envelope (the client's admin requests).
ENVELOPED_APIS = frozenset({CREATE_TOPICS, DELETE_TOPICS, ALTER_CONFIGS, CREATE_PARTITIONS, INCREMENTAL_ALTER_CONFIGS,
                            ALTER_CLIENT_QUOTAS, UPDATE_FEATURES})
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
T = TypeVar("T")


def _resource_errors(resp: object) -> set[int]:
    """The per-resource error codes of a forwarded admin response."""
    if isinstance(resp, CreateTopicsResponse):
        return {t.error_code for t in resp.topics}
    if isinstance(resp, DeleteTopicsResponse):
        return {t.error_code for t in resp.responses}
    if isinstance(resp, CreatePartitionsResponse):
        return {t.error_code for t in resp.results}
    if isinstance(resp, IncrementalAlterConfigsResponse | AlterConfigsResponse):
        return {r.error_code for r in resp.responses}
    if isinstance(resp, AlterClientQuotasResponse):
        return {e.error_code for e in resp.entries}
    code = getattr(resp, "error_code", 0)
    return {code} if isinstance(code, int) else set()


def _any_success(resp: object) -> bool:
    """Whether a forwarded ACL, SCRAM or delegation token response changed anything (then this broker
    waits for it). A response without per-resource results (the token APIs) has one top-level error."""
    if not hasattr(resp, "results") and not hasattr(resp, "filter_results"):
        return getattr(resp, "error_code", 1) == 0
    results = getattr(resp, "results", None) or getattr(resp, "filter_results", None) or ()
    return any(getattr(r, "error_code", 1) == 0 for r in results)


def _raise_for(code: int, message: str | None) -> None:
    if code == ErrorCode.NONE:
        return
    try:
        error = ErrorCode(code)
    except ValueError:
        error = ErrorCode.UNKNOWN_SERVER_ERROR
    raise KafkaError(message or None, error_code=error)


class RemoteController(Controller):
    """Forwards every metadata change to the active controller of the KRaft quorum."""

    def __init__(self, *, node_id: int, channel: ControllerChannel, fetcher: MetadataFollower, cache: MetadataCache,
                 broker_epoch: Callable[[], int], request_timeout_ms: int = 30000) -> None:
        self.node_id = node_id
        self.channel = channel
        self.fetcher = fetcher
        self.cache = cache
        self.broker_epoch = broker_epoch
        self.request_timeout_ms = request_timeout_ms

    # -- plumbing ------------------------------------------------------------------------------------

    async def _forward(self, api_key: int, body: object, response_type: type[T], version: int | None = None,
                       as_broker: bool = False) -> T:
        """In an Envelope with the client's principal when a client's request is being handled (and the
        API is one Kafka forwards), else directly."""
        origin = None if as_broker else CURRENT_REQUEST_ORIGIN.get()
        if origin is None or api_key not in ENVELOPED_APIS:
            return await self.channel.send(api_key, body, response_type, version=version)
        try:
            principal = serialize_principal(parse_principal(origin.principal))
            address = ipaddress.ip_address(origin.host).packed
        except ValueError:
            return await self.channel.send(api_key, body, response_type, version=version)
        try:
            return await self.channel.send_envelope(api_key, body, response_type, principal=principal,
                                                    client_address=address, client_id=origin.client_id,
                                                    version=version)
        except EnvelopeError as exc:
            try:
                code = ErrorCode(exc.error_code)
            except ValueError:
                code = ErrorCode.UNKNOWN_SERVER_ERROR
            raise KafkaError(f"The controller refused the forwarded request: {code.name}", error_code=code) from exc

    async def _send(self, api_key: int, body: object, response_type: type[T], version: int | None = None,
                    as_broker: bool = False) -> T:
        """Send to the active controller. Kafka's controller answers NOT_CONTROLLER per resource (not at
        the top level) when it lost the leadership meanwhile, or has won the Raft election but not yet
        claimed the controller's leadership (it names itself): then the request goes to the active
        controller again, with backoff, until `controller.socket.timeout.ms` runs out -- as Kafka's
        `NodeToControllerRequestThread` requeues a NOT_CONTROLLER answer, so a client never sees
        NOT_CONTROLLER for a forwarded request (a request still unanswered at the deadline is
        REQUEST_TIMED_OUT, Kafka's `ForwardingManager` timeout)."""
        deadline = time.monotonic() + self.request_timeout_ms / 1000
        attempt = 0
        while True:
            try:
                resp = await self._forward(api_key, body, response_type, version, as_broker)
            except (RequestTimeoutError, TimeoutError) as exc:
                raise KafkaError(f"The active controller did not answer: {exc}",
                                 error_code=ErrorCode.REQUEST_TIMED_OUT) from exc
            if ErrorCode.NOT_CONTROLLER not in _resource_errors(resp):
                return resp
            leader = self.fetcher.leader.leader_id
            log.info("Controller %d is not the active controller; sending api %d again", leader, api_key)
            self.fetcher.forget_leader(leader)
            backoff = min(1.0, self.channel.retry_backoff_ms / 1000 * (2 ** min(attempt, 10)))
            attempt += 1
            if time.monotonic() + backoff >= deadline:
                raise KafkaError(f"No active controller answered api {api_key} within "
                                 f"{self.request_timeout_ms} ms", error_code=ErrorCode.REQUEST_TIMED_OUT)
            await asyncio.sleep(backoff)

    async def _caught_up(self, done: Callable[[], bool] | None = None) -> None:
        """Wait until this broker's image holds what the controller just committed."""
        try:
            await self.fetcher.barrier(self.request_timeout_ms / 1000, done)
        except TimeoutError as exc:
            raise KafkaError("The change was made but this broker's metadata has not caught up with it yet",
                             error_code=ErrorCode.REQUEST_TIMED_OUT) from exc

    async def forward(self, api_key: int, request: object, response_type: type[T], *, version: int,
                      validate_only: bool) -> T:
        """Kafka's `ForwardingManager`: the client's whole request to the active controller in one
        Envelope, its answer back unchanged, so what the controller counts per request (CreateTopics' and
        CreatePartitions' MAX_RECORDS_PER_USER_OP, duplicate names, the client's mutation quota) is
        counted over the request, not per resource. Unless `validate_only` and when something
        succeeded, it returns once this broker's image holds what the controller committed. `version`:
        the client's, at which the controller reads it and answers (capped at the controller's)."""
        resp = await self._send(api_key, request, response_type, version)
        if not validate_only and ErrorCode.NONE in _resource_errors(resp):
            await self._caught_up()
        return resp

    # -- topics --------------------------------------------------------------------------------------

    async def create_new_topic(self, new: NewTopic, validate_only: bool = False) -> TopicInfo:
        name, assignments = new.name, new.assignments
        topic = CreateTopicsRequest.CreatableTopic(
            # As asked, also with assignments: the controller answers INVALID_REQUEST when a manual
            # assignment comes with a partition count or replication factor (Kafka's ReplicationControlManager).
            name=name, num_partitions=new.num_partitions, replication_factor=new.replication_factor,
            assignments=[CreateTopicsRequest.CreatableReplicaAssignment(partition_index=p, broker_ids=list(b))
                         for p, b in sorted((assignments or {}).items())],
            configs=[CreateTopicsRequest.CreatableTopicConfig(name=k, value=v)
                     for k, v in (new.configs or {}).items()],
        )
        req = CreateTopicsRequest(topics=[topic], timeout_ms=self.request_timeout_ms, validate_only=validate_only)
        # An internal topic (__consumer_offsets, __transaction_state, __share_group_state) is created by the
        # broker as itself, whoever's request needed it (Kafka's AutoTopicCreationManager gets no request
        # context for them): a consumer may not CREATE topics.
        resp = await self._send(CREATE_TOPICS, req, CreateTopicsResponse, as_broker=name in INTERNAL_TOPICS)
        result = next((r for r in resp.topics if r.name == name), None)
        if result is None:
            raise KafkaError("The controller's answer did not name the topic", error_code=ErrorCode.UNKNOWN_SERVER_ERROR)
        _raise_for(result.error_code, result.error_message)
        overrides = {c.name: c.value for c in (result.configs or [])
                     if c.config_source == TOPIC_CONFIG_SOURCE and c.value is not None}
        described = TopicInfo(name=name, topic_id=result.topic_id, num_partitions=result.num_partitions,
                              replication_factor=result.replication_factor, configs=overrides)
        if validate_only:
            return described
        topic_id = result.topic_id

        def created() -> bool:
            info = self.cache.topic(name)
            return info is not None and info.topic_id == topic_id

        await self._caught_up(created)
        return self.cache.topic(name) or described

    async def _delete(self, state: DeleteTopicsRequest.DeleteTopicState, known: TopicInfo | None) -> TopicInfo:
        req = DeleteTopicsRequest(topics=[state], topic_names=[state.name] if state.name else [],
                                  timeout_ms=self.request_timeout_ms)
        resp = await self._send(DELETE_TOPICS, req, DeleteTopicsResponse)
        if not resp.responses:
            raise KafkaError("The controller's answer named no topic", error_code=ErrorCode.UNKNOWN_SERVER_ERROR)
        result = resp.responses[0]
        _raise_for(result.error_code, result.error_message)
        topic_id = result.topic_id if result.topic_id != ZERO_UUID else (known.topic_id if known else ZERO_UUID)
        await self._caught_up(lambda: self.cache.topic_by_id(topic_id) is None)
        if known is not None:
            return known
        return TopicInfo(name=result.name or "", topic_id=topic_id, num_partitions=0)

    async def delete_topic(self, name: str) -> TopicInfo:
        return await self._delete(DeleteTopicsRequest.DeleteTopicState(name=name, topic_id=ZERO_UUID),
                                  self.cache.topic(name))

    async def delete_topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo:
        return await self._delete(DeleteTopicsRequest.DeleteTopicState(name=None, topic_id=topic_id),
                                  self.cache.topic_by_id(topic_id))

    async def create_partitions(
        self, name: str, new_total: int, validate_only: bool = False,
        assignments: Sequence[Sequence[int]] | None = None, records_in_request: int = 0,
    ) -> TopicInfo:
        topic = CreatePartitionsRequest.CreatePartitionsTopic(
            name=name, count=new_total,
            assignments=None if assignments is None else [
                CreatePartitionsRequest.CreatePartitionsAssignment(broker_ids=list(a)) for a in assignments])
        req = CreatePartitionsRequest(topics=[topic], timeout_ms=self.request_timeout_ms, validate_only=validate_only)
        resp = await self._send(CREATE_PARTITIONS, req, CreatePartitionsResponse)
        if not resp.results:
            raise KafkaError("The controller's answer named no topic", error_code=ErrorCode.UNKNOWN_SERVER_ERROR)
        _raise_for(resp.results[0].error_code, resp.results[0].error_message)
        before = self.cache.topic(name)
        if not validate_only:
            def grown() -> bool:
                info = self.cache.topic(name)
                return info is not None and info.num_partitions >= new_total

            await self._caught_up(grown)
        info = self.cache.topic(name) or before
        if info is None:
            raise KafkaError(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        if validate_only:
            return TopicInfo(info.name, info.topic_id, new_total, info.replication_factor, dict(info.configs),
                             info.is_internal)
        return info

    # -- configs -------------------------------------------------------------------------------------

    async def _config_change_done(
        self, responses: Sequence[AlterConfigsResponse.AlterConfigsResourceResponse]
        | Sequence[IncrementalAlterConfigsResponse.AlterConfigsResourceResponse], validate_only: bool,
    ) -> None:
        """The controller's answer for the one resource changed: its error raised, else (unless only
        validated) wait until this broker's image holds the change."""
        if not responses:
            raise KafkaError("The controller's answer named no resource", error_code=ErrorCode.UNKNOWN_SERVER_ERROR)
        _raise_for(responses[0].error_code, responses[0].error_message)
        if not validate_only:
            await self._caught_up()

    def _topic_info(self, name: str) -> TopicInfo:
        info = self.cache.topic(name)
        if info is None:
            raise KafkaError(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        return info

    async def _incremental(self, resource_type: int, resource_name: str,
                           ops: Iterable[tuple[str, int, str | None]], validate_only: bool) -> None:
        res = IncrementalAlterConfigsRequest.AlterConfigsResource(
            resource_type=resource_type, resource_name=resource_name,
            configs=[IncrementalAlterConfigsRequest.AlterableConfig(name=k, config_operation=op, value=v)
                     for k, op, v in ops])
        req = IncrementalAlterConfigsRequest(resources=[res], validate_only=validate_only)
        resp = await self._send(INCREMENTAL_ALTER_CONFIGS, req, IncrementalAlterConfigsResponse)
        await self._config_change_done(resp.responses, validate_only)

    async def incremental_alter_topic_configs(
        self, name: str, ops: Iterable[tuple[str, int, str | None]], validate_only: bool = False
    ) -> TopicInfo:
        await self._incremental(TOPIC_RESOURCE, name, ops, validate_only)
        return self._topic_info(name)

    async def alter_topic_configs(
        self, name: str, configs: Mapping[str, str | None], validate_only: bool = False
    ) -> TopicInfo:
        res = AlterConfigsRequest.AlterConfigsResource(
            resource_type=TOPIC_RESOURCE, resource_name=name,
            configs=[AlterConfigsRequest.AlterableConfig(name=k, value=v) for k, v in configs.items()])
        req = AlterConfigsRequest(resources=[res], validate_only=validate_only)
        resp = await self._send(ALTER_CONFIGS, req, AlterConfigsResponse)
        await self._config_change_done(resp.responses, validate_only)
        return self._topic_info(name)

    async def incremental_alter_group_configs(
        self, group_id: str, ops: Iterable[tuple[str, int, str | None]], validate_only: bool = False
    ) -> None:
        await self._incremental(GROUP_RESOURCE, group_id, ops, validate_only)

    async def alter_broker_configs(
        self, default: bool, changes: Mapping[str, str | None], validate_only: bool = False,
        broker_id: int | None = None,
    ) -> None:
        ops = [(k, OP_SET if v is not None else OP_DELETE, v) for k, v in changes.items()]
        name = "" if default else str(self.node_id if broker_id is None else broker_id)
        await self._incremental(BROKER_RESOURCE, name, ops, validate_only)

    # -- client quotas -------------------------------------------------------------------------------

    async def alter_client_quotas(
        self, alterations: Sequence[ClientQuotaAlteration], validate_only: bool = False
    ) -> list[ClientQuotaAlterationResult]:
        req = AlterClientQuotasRequest(validate_only=validate_only, entries=[
            AlterClientQuotasRequest.EntryData(
                entity=[AlterClientQuotasRequest.EntityData(entity_type=t, entity_name=n) for t, n in a.entity],
                ops=[AlterClientQuotasRequest.OpData(key=k, value=0.0 if v is None else v, remove=v is None)
                     for k, v in a.ops])
            for a in alterations])
        resp = await self._send(ALTER_CLIENT_QUOTAS, req, AlterClientQuotasResponse)
        # The controller's entries as it answered them, as Kafka's broker relays the forwarded response: an
        # entity named twice is answered once (INVALID_REQUEST "Ignoring duplicate entity ...").
        results = [ClientQuotaAlterationResult(tuple((e.entity_type, e.entity_name) for e in entry.entity),
                                               entry.error_code, entry.error_message)
                   for entry in resp.entries]
        if not validate_only and any(r.error_code == 0 for r in results):
            await self._caught_up()
        return results

    # -- brokers and producer ids --------------------------------------------------------------------

    def register_broker(self, listeners: Sequence[tuple[str, str, int, str]], rack: str | None) -> int:
        """Registration is the `BrokerLifecycleManager`'s (asynchronous, heartbeated); this is the epoch
        it holds (-1 before the controller accepted it)."""
        return self.broker_epoch()

    async def allocate_producer_ids(self, broker_id: int, broker_epoch: int) -> ProducerIdsBlock:
        # The lifecycle's current epoch: the one passed in may predate a re-registration.
        req = AllocateProducerIdsRequest(broker_id=self.node_id, broker_epoch=self.broker_epoch())
        resp = await self._send(ALLOCATE_PRODUCER_IDS, req, AllocateProducerIdsResponse)
        _raise_for(resp.error_code, None)
        return ProducerIdsBlock(self.node_id, int(resp.producer_id_start), int(resp.producer_id_len))

    # -- requests forwarded as they came (ACLs, SCRAM credentials) ---------------------------------

    async def forward_request(self, ctx: RequestContext, header: RequestHeader, request: object) -> object:
        """Kafka's `KafkaApis.forwardToController`: the client's request, unchanged, to the active
        controller in an Envelope carrying the client's principal and address; the controller's inner
        response, at the client's version, is the answer. A success waits until this broker's image
        holds what the controller committed (read-your-writes on this broker, as for every change here)."""
        try:
            principal = serialize_principal(parse_principal(ctx.principal))
            address = ipaddress.ip_address(ctx.peer[0]).packed
        except ValueError as exc:
            raise KafkaError(f"Cannot forward the request of {ctx.principal}@{ctx.peer[0]}: {exc}",
                             error_code=ErrorCode.UNKNOWN_SERVER_ERROR) from exc
        try:
            response = await self.channel.forward(header, request, principal=principal, client_address=address)
        except (RequestTimeoutError, TimeoutError) as exc:
            raise KafkaError(f"The active controller did not answer: {exc}",
                             error_code=ErrorCode.REQUEST_TIMED_OUT) from exc
        except EnvelopeError as exc:
            if exc.error_code == ErrorCode.UNSUPPORTED_VERSION:
                # ForwardingManager: the controller changed and speaks other versions; the client
                # reconnects and asks ApiVersions again.
                raise CloseConnection("the controller does not support the forwarded request's version") from exc
            log.warning("The controller refused the Envelope of api %d: error %d", header.api_key, exc.error_code)
            raise KafkaError("The controller refused the forwarded request",
                             error_code=ErrorCode.UNKNOWN_SERVER_ERROR) from exc
        if _any_success(response):
            await self._caught_up()
        return response

    def close(self) -> None:
        """Connections close with the broker's cluster links (`KRaftBrokerLinks.shutdown`)."""
