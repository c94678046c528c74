"""DeleteTopics and (Incremental)AlterConfigs are one controller write per request (issue 12), as
Kafka's `QuorumController.deleteTopics` / `incrementalAlterConfigs` / `legacyAlterConfigs` are one
event each: the records of every resource that passed its checks are appended as one batch (so they
commit together), a resource that fails gets its own error without stopping the others, nothing is
answered before the batch commits, and validate-only appends nothing."""

from __future__ import annotations

import asyncio

from kbroker.controller.controller import (
    BrokerConfigsAlteration,
    GroupConfigsAlteration,
    TopicConfigsAlteration,
)
from kbroker.metadata.image import ConfigResource, ConfigResourceType
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.metadata_records import ConfigRecord, RemoveTopicRecord
from tests.controller.quorum_fakes import FakeClock, InMemoryRaftLog, join, new_controller

SET, DELETE = 0, 1


def _cluster():  # type: ignore[no-untyped-def]
    controller, raft = new_controller(FakeClock())
    for b in (1, 2, 3):
        join(controller, raft, b)
    for name in ("a", "b", "c"):
        async def create(name: str = name) -> None:
            task = asyncio.ensure_future(controller.create_topic(name, 2, 3))
            await asyncio.sleep(0)
            raft.commit()
            await task
        asyncio.run(create())
    return controller, raft


def _configs(controller, topic: str) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return dict(controller.committed_image.configs.config_map(ConfigResource(ConfigResourceType.TOPIC, topic)))


def _answered_on_commit(raft: InMemoryRaftLog, coro):  # type: ignore[no-untyped-def]
    """Run `coro`; it must not answer before the log commits. (appends it made, its answer)"""
    async def run():  # type: ignore[no-untyped-def]
        before = raft.appends
        task = asyncio.ensure_future(coro)
        await asyncio.sleep(0)
        appended = raft.appends - before
        if appended:
            assert not task.done(), "answered before its records committed"
        raft.commit()
        return appended, await task
    return asyncio.run(run())


def test_delete_topics_is_one_batch_and_unknown_topics_answer_alone() -> None:
    controller, raft = _cluster()
    ids = {n: controller.image.topic(n).id for n in ("a", "b", "c")}  # type: ignore[union-attr]
    appends, outcomes = _answered_on_commit(raft, controller.delete_topics(["a", "b", "nope", "c"]))
    assert appends == 1
    batch = raft.batches[-1]
    assert [type(r) for r in batch.records] == [RemoveTopicRecord] * 3
    assert {r.topic_id for r in batch.records} == set(ids.values())
    assert outcomes[0] is None and outcomes[1] is None and outcomes[3] is None
    assert isinstance(outcomes[2], KafkaError) and outcomes[2].error_code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert all(controller.committed_image.topic(n) is None for n in ("a", "b", "c"))


def test_incremental_alter_configs_of_three_resources_is_one_batch() -> None:
    controller, raft = _cluster()
    alterations = [
        TopicConfigsAlteration("a", ((("retention.ms", SET, "1000")),)),
        TopicConfigsAlteration("b", (("cleanup.policy", SET, "compact"),)),
        TopicConfigsAlteration("missing", (("retention.ms", SET, "5"),)),
        TopicConfigsAlteration("c", (("retention.ms", SET, "not-a-number"),)),
        GroupConfigsAlteration("g1", (("consumer.session.timeout.ms", SET, "50000"),)),
        BrokerConfigsAlteration(True, {"log.cleaner.threads": "2"}),
    ]
    appends, outcomes = _answered_on_commit(raft, controller.alter_configs(alterations))
    assert appends == 1
    records = raft.batches[-1].records
    assert all(isinstance(r, ConfigRecord) for r in records)
    assert {(r.resource_type, r.resource_name, r.name, r.value) for r in records} == {
        (2, "a", "retention.ms", "1000"), (2, "b", "cleanup.policy", "compact"),
        (32, "g1", "consumer.session.timeout.ms", "50000"), (4, "", "log.cleaner.threads", "2")}
    assert [o is None for o in outcomes] == [True, True, False, False, True, True]
    assert outcomes[2] is not None and outcomes[2].error_code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert outcomes[3] is not None and outcomes[3].error_code is ErrorCode.INVALID_CONFIG
    assert _configs(controller, "a")["retention.ms"] == "1000"


def test_legacy_alter_configs_is_one_batch_and_validate_only_writes_nothing() -> None:
    controller, raft = _cluster()
    replace = [TopicConfigsAlteration("a", replace={"retention.ms": "7"}),
               TopicConfigsAlteration("b", replace={"retention.ms": "8"})]
    appends, outcomes = _answered_on_commit(raft, controller.alter_configs(replace, validate_only=True))
    assert appends == 0 and outcomes == [None, None]
    assert "retention.ms" not in _configs(controller, "a")
    bad = [TopicConfigsAlteration("a", replace={"retention.ms": "x"})]
    appends, outcomes = _answered_on_commit(raft, controller.alter_configs(bad, validate_only=True))
    assert appends == 0 and outcomes[0] is not None and outcomes[0].error_code is ErrorCode.INVALID_CONFIG
    appends, outcomes = _answered_on_commit(raft, controller.alter_configs(replace))
    assert appends == 1 and outcomes == [None, None] and len(raft.batches[-1].records) == 2
    assert _configs(controller, "b") == {"retention.ms": "8"}
