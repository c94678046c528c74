"""The `Controller` interface: what the admin APIs ask of the metadata owner.

Kafka's `Controller` (QuorumController implements it): every method that changes metadata answers
only once the records it produced are durable in `__cluster_metadata` and applied to the image the
brokers serve, so a client that gets a success back and then asks any API sees the change. Errors are
`KafkaError`s carrying Kafka's code and message; the API layer turns them into per-resource results.
Methods are per resource (one topic, one config resource): the API handlers loop over a request's
resources as Kafka's `ControllerApis` does, and each resource's records commit on their own (Kafka's
CreateTopics is not atomic across topics either). DeleteTopics, AlterConfigs and IncrementalAlterConfigs
are whole-request operations (`delete_topics`, `alter_configs`): Kafka's `QuorumController.deleteTopics`
/ `incrementalAlterConfigs` / `legacyAlterConfigs` are one controller event each, whose records (of every
resource that passed its checks) are appended as one batch and commit together; each resource gets its
own error. Here the default runs the per-resource methods one after the other; `QuorumController`
overrides them with the one write.

The cluster-side operations (`process_broker_registration`, `process_broker_heartbeat`,
`alter_partition`, `unregister_broker`) are what brokers ask of the active controller of a KRaft
quorum (`QuorumController`); a single-node `LocalController` registers its own broker and refuses
them with NOT_CONTROLLER (no other broker can join it). `elect_leaders` is answered by both.
"""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from kbroker.controller.acl_control import AclCreateResult, AclDeleteResult
from kbroker.controller.broker_heartbeat_manager import BrokerHeartbeatReply
from kbroker.controller.client_quota_control import ClientQuotaAlteration, ClientQuotaAlterationResult
from kbroker.controller.cluster_control import BrokerRegistrationReply
from kbroker.metadata.views import TopicInfo
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.messages.alter_partition import AlterPartitionRequest, AlterPartitionResponse
from kbroker.protocol.messages.alter_partition_reassignments import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
)
from kbroker.protocol.messages.alter_user_scram_credentials import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
)
from kbroker.protocol.messages.broker_heartbeat import BrokerHeartbeatRequest
from kbroker.protocol.messages.broker_registration import BrokerRegistrationRequest
from kbroker.protocol.messages.create_delegation_token import (
    CreateDelegationTokenRequest,
    CreateDelegationTokenResponse,
)
from kbroker.protocol.messages.elect_leaders import ElectLeadersRequest, ElectLeadersResponse
from kbroker.protocol.messages.expire_delegation_token import (
    ExpireDelegationTokenRequest,
    ExpireDelegationTokenResponse,
)
from kbroker.protocol.messages.list_partition_reassignments import (
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
)
from kbroker.protocol.messages.renew_delegation_token import (
    RenewDelegationTokenRequest,
    RenewDelegationTokenResponse,
)
from kbroker.security.acl import AclFilter, StandardAcl


@dataclass(frozen=True, slots=True)
class ProducerIdsBlock:
    """A block of producer ids handed to one broker (Kafka's `ProducerIdsBlock`)."""

    assigned_broker_id: int
    first_producer_id: int
    size: int

    @property
    def next_block_first_id(self) -> int:
        return self.first_producer_id + self.size


@dataclass(frozen=True, slots=True)
class NewTopic:
    """One topic of a CreateTopics request (Kafka's `CreatableTopic`): -1 partitions or replication
    factor take the broker defaults; `assignments` (partition -> replicas) replaces both."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    configs: Mapping[str, str | None] | None = None
    assignments: Mapping[int, Sequence[int]] | None = None


@dataclass(frozen=True, slots=True)
class CreatePartitionsTopic:
    """One topic of a CreatePartitions request (Kafka's `CreatePartitionsTopic`): grow `name` to
    `count` partitions, optionally with the new partitions' replicas."""

    name: str
    count: int
    assignments: Sequence[Sequence[int]] | None = None


# Kafka's `ControllerRequestContext.applyPartitionChangeQuota`: called with the partitions a topic
# adds once the topic passed its checks; raising a KafkaError (THROTTLING_QUOTA_EXCEEDED) fails it.
PartitionChangeQuota = Callable[[int], None]


@dataclass(frozen=True, slots=True)
class TopicConfigsAlteration:
    """One TOPIC resource of an IncrementalAlterConfigs (`ops`: (key, AlterConfigOp, value)) or, with
    `replace` set, of a legacy AlterConfigs (the given set replaces every override)."""

    name: str
    ops: tuple[tuple[str, int, str | None], ...] = ()
    replace: Mapping[str, str | None] | None = None


@dataclass(frozen=True, slots=True)
class GroupConfigsAlteration:
    """One GROUP resource of an IncrementalAlterConfigs (KIP-848 / KIP-932 group configs)."""

    group_id: str
    ops: tuple[tuple[str, int, str | None], ...] = ()


@dataclass(frozen=True, slots=True)
class BrokerConfigsAlteration:
    """One BROKER resource: dynamic configs set (value) or deleted (None), cluster-wide (`default`) or
    per broker (`broker_id`; None: this node)."""

    default: bool
    changes: Mapping[str, str | None]
    broker_id: int | None = None


ConfigAlteration = TopicConfigsAlteration | GroupConfigsAlteration | BrokerConfigsAlteration


class Controller(ABC):
    """The metadata owner: validates admin requests and commits their records."""

    async def delete_topics(self, names: Sequence[str]) -> list[KafkaError | None]:
        """DeleteTopics of these topics (by name, each once): per topic None (deleted) or its error.
        Default: one `delete_topic` after the other."""
        outcomes: list[KafkaError | None] = []
        for name in names:
            try:
                await self.delete_topic(name)
            except KafkaError as e:
                outcomes.append(e)
            else:
                outcomes.append(None)
        return outcomes

    async def alter_configs(self, alterations: Sequence[ConfigAlteration],
                            validate_only: bool = False) -> list[KafkaError | None]:
        """(Incremental)AlterConfigs of these resources (each once): per resource None or its error.
        Default: one per-resource method after the other."""
        outcomes: list[KafkaError | None] = []
        for a in alterations:
            try:
                if isinstance(a, TopicConfigsAlteration):
                    if a.replace is not None:
                        await self.alter_topic_configs(a.name, a.replace, validate_only)
                    else:
                        await self.incremental_alter_topic_configs(a.name, a.ops, validate_only)
                elif isinstance(a, GroupConfigsAlteration):
                    await self.incremental_alter_group_configs(a.group_id, a.ops, validate_only)
                else:
                    await self.alter_broker_configs(a.default, a.changes, validate_only, a.broker_id)
            except KafkaError as e:
                outcomes.append(e)
            else:
                outcomes.append(None)
        return outcomes

    async def create_topics(self, topics: Sequence[NewTopic], validate_only: bool = False,
                            quota: PartitionChangeQuota | None = None) -> list[TopicInfo | KafkaError]:
        """CreateTopics of these topics (distinct names): per topic its description or its error.

        Default (a controller that forwards, like RemoteController): one `create_new_topic` after the
        other, `quota` left to the controller forwarded to. The LocalController and QuorumController
        write the request as one batch (`topic_batches.create_topics`), applying `quota`."""
        outcomes: list[TopicInfo | KafkaError] = []
        for t in topics:
            try:
                outcomes.append(await self.create_new_topic(t, validate_only))
            except KafkaError as e:
                outcomes.append(e)
        return outcomes

    async def create_partitions_all(self, topics: Sequence[CreatePartitionsTopic], validate_only: bool = False,
                                    quota: PartitionChangeQuota | None = None) -> list[TopicInfo | KafkaError]:
        """CreatePartitions of these topics (distinct names): per topic its grown description or its
        error; the partitions the request adds count together towards MAX_RECORDS_PER_USER_OP.

        Default (a forwarding controller): one `create_partitions` after the other, `quota` left to the
        controller forwarded to; the LocalController and QuorumController write one batch."""
        outcomes: list[TopicInfo | KafkaError] = []
        for t in topics:
            try:
                outcomes.append(await self.create_partitions(t.name, t.count, validate_only, t.assignments))
            except KafkaError as e:
                outcomes.append(e)
        return outcomes

    async def create_topic(
        self,
        name: str,
        num_partitions: int = -1,
        replication_factor: int = -1,
        configs: Mapping[str, str | None] | None = None,
        validate_only: bool = False,
        assignments: Mapping[int, Sequence[int]] | None = None,
    ) -> TopicInfo:
        """Create a topic (validate only: check and describe it, write nothing)."""
        return await self.create_new_topic(NewTopic(name, num_partitions, replication_factor, configs, assignments),
                                           validate_only)

    @abstractmethod
    async def create_new_topic(self, topic: NewTopic, validate_only: bool = False) -> TopicInfo:
        """What `create_topic` does, for each controller."""

    @abstractmethod
    async def delete_topic(self, name: str) -> TopicInfo:
        """Delete a topic by name; UNKNOWN_TOPIC_OR_PARTITION when it does not exist."""

    @abstractmethod
    async def delete_topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo:
        """Delete a topic by id; UNKNOWN_TOPIC_ID when it does not exist."""

    @abstractmethod
    async def create_partitions(
        self, name: str, new_total: int, validate_only: bool = False,
        assignments: Sequence[Sequence[int]] | None = None, records_in_request: int = 0,
    ) -> TopicInfo:
        """Grow a topic to `new_total` partitions (`records_in_request`: partitions the same request
        added before this topic, bounded by MAX_RECORDS_PER_USER_OP)."""

    @abstractmethod
    async def incremental_alter_topic_configs(
        self, name: str, ops: Iterable[tuple[str, int, str | None]], validate_only: bool = False
    ) -> TopicInfo:
        """IncrementalAlterConfigs (KIP-339) on one topic."""

    @abstractmethod
    async def alter_topic_configs(
        self, name: str, configs: Mapping[str, str | None], validate_only: bool = False
    ) -> TopicInfo:
        """Legacy AlterConfigs on one topic: the given set replaces every override."""

    @abstractmethod
    async def incremental_alter_group_configs(
        self, group_id: str, ops: Iterable[tuple[str, int, str | None]], validate_only: bool = False
    ) -> None:
        """IncrementalAlterConfigs on one GROUP resource (KIP-848 / KIP-932 group configs)."""

    @abstractmethod
    async def alter_broker_configs(
        self, default: bool, changes: Mapping[str, str | None], validate_only: bool = False,
        broker_id: int | None = None,
    ) -> None:
        """Set (value) or delete (None) dynamic broker configs, per broker or cluster-wide (`default`);
        `broker_id`: whose (default: this node; a controller serving a forwarded request: the sender's)."""

    async def update_features(self, updates: Mapping[str, tuple[int, int]], validate_only: bool = False) -> None:
        """UpdateFeatures: `{feature: (level, upgrade type)}` (Kafka's FeatureControlManager; upgrade type
        1 UPGRADE, 2 SAFE_DOWNGRADE, 3 UNSAFE_DOWNGRADE). Only kbroker's single node implements it."""
        raise KafkaError("UpdateFeatures is not implemented by this controller", error_code=ErrorCode.UNSUPPORTED_VERSION)

    @abstractmethod
    def register_broker(self, listeners: Sequence[tuple[str, str, int, str]], rack: str | None) -> int:
        """Register this node's broker (BrokerRegistration) and unfence it; the new broker epoch."""

    @abstractmethod
    def close(self) -> None:
        """Release the metadata log."""

    @abstractmethod
    async def allocate_producer_ids(self, broker_id: int, broker_epoch: int) -> ProducerIdsBlock:
        """The next block of producer ids for a broker (AllocateProducerIds)."""

    # -- the cluster side (KRaft): what brokers ask of the active controller ---------------------------

    async def process_broker_registration(self, request: BrokerRegistrationRequest) -> BrokerRegistrationReply:
        """BrokerRegistration: register (or amend) a broker; its broker epoch."""
        raise _not_a_quorum_controller()

    async def process_broker_heartbeat(self, request: BrokerHeartbeatRequest) -> BrokerHeartbeatReply:
        """BrokerHeartbeat: keep the session, fence/unfence, controlled shutdown."""
        raise _not_a_quorum_controller()

    async def alter_partition(self, request: AlterPartitionRequest, version: int) -> AlterPartitionResponse:
        """AlterPartition: a partition leader's ISR change (request-level errors raise KafkaError)."""
        raise _not_a_quorum_controller()

    async def unregister_broker(self, broker_id: int) -> None:
        """UnregisterBroker: remove a broker's registration (and it from every ISR)."""
        raise _not_a_quorum_controller()

    async def elect_leaders(self, request: ElectLeadersRequest) -> ElectLeadersResponse:
        """ElectLeaders: preferred or unclean leader election (request-level errors raise KafkaError)."""
        raise _not_a_quorum_controller()

    async def alter_partition_reassignments(
        self, request: AlterPartitionReassignmentsRequest
    ) -> AlterPartitionReassignmentsResponse:
        """AlterPartitionReassignments (KIP-455): start or cancel reassignments."""
        raise _not_a_quorum_controller()

    async def alter_user_scram_credentials(
        self, request: AlterUserScramCredentialsRequest
    ) -> AlterUserScramCredentialsResponse:
        """AlterUserScramCredentials (KIP-554): upsert and delete SCRAM credentials."""
        raise KafkaError("This controller does not store SCRAM credentials.",
                         error_code=ErrorCode.UNSUPPORTED_VERSION)

    async def create_delegation_token(
        self, requester: str, request: CreateDelegationTokenRequest
    ) -> CreateDelegationTokenResponse:
        """CreateDelegationToken (KIP-48) for `requester` ("User:alice"), already authorized by the API layer."""
        raise KafkaError("This controller does not store delegation tokens.",
                         error_code=ErrorCode.UNSUPPORTED_VERSION)

    async def renew_delegation_token(
        self, principal: str, request: RenewDelegationTokenRequest
    ) -> RenewDelegationTokenResponse:
        """RenewDelegationToken (KIP-48): the owner or a renewer extends the token's expiry."""
        raise KafkaError("This controller does not store delegation tokens.",
                         error_code=ErrorCode.UNSUPPORTED_VERSION)

    async def expire_delegation_token(
        self, principal: str, request: ExpireDelegationTokenRequest
    ) -> ExpireDelegationTokenResponse:
        """ExpireDelegationToken (KIP-48): the owner or a renewer sets a new expiry, or removes it (< 0)."""
        raise KafkaError("This controller does not store delegation tokens.",
                         error_code=ErrorCode.UNSUPPORTED_VERSION)

    def sweep_expired_delegation_tokens(self) -> None:
        """Remove expired delegation tokens now (the single node's `delegation.token.expiry.check.interval.ms`
        timer; a `QuorumController` schedules its own sweep in `poll`)."""
        return None

    async def alter_client_quotas(
        self, alterations: Sequence[ClientQuotaAlteration], validate_only: bool = False
    ) -> list[ClientQuotaAlterationResult]:
        """AlterClientQuotas (KIP-546): one result per entity, in order; the changes commit together."""
        raise KafkaError("This controller does not store client quotas.", error_code=ErrorCode.UNSUPPORTED_VERSION)

    async def create_acls(self, acls: Sequence[StandardAcl]) -> list[AclCreateResult]:
        """CreateAcls: one result per ACL, in order."""
        raise KafkaError("This controller does not store ACLs.", error_code=ErrorCode.UNSUPPORTED_VERSION)

    async def delete_acls(self, filters: Sequence[AclFilter]) -> list[AclDeleteResult]:
        """DeleteAcls: one result (the ACLs removed) per filter, in order."""
        raise KafkaError("This controller does not store ACLs.", error_code=ErrorCode.UNSUPPORTED_VERSION)

    async def list_partition_reassignments(
        self, request: ListPartitionReassignmentsRequest
    ) -> ListPartitionReassignmentsResponse:
        """ListPartitionReassignments: the ongoing reassignments (committed state)."""
        raise _not_a_quorum_controller()


def _not_a_quorum_controller() -> KafkaError:
    return KafkaError("This node runs a single-node controller; brokers cannot join it.",
                      error_code=ErrorCode.NOT_CONTROLLER)
