"""Topic administration through kafka-python's KafkaAdminClient and aiokafka's AIOKafkaAdminClient.

The two clients pick different versions of the same APIs (kafka-python 3.0: CreateTopics v7,
CreatePartitions v3, flexible DescribeConfigs; aiokafka 0.14: CreateTopics v3, CreatePartitions v1,
DescribeConfigs v2, AlterConfigs v1, DeleteTopics v3), so together they cover old and new encodings.
"""

from __future__ import annotations

import asyncio

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin import NewPartitions as AioNewPartitions
from aiokafka.admin import NewTopic as AioNewTopic
from aiokafka.admin.config_resource import ConfigResource as AioConfigResource
from aiokafka.admin.config_resource import ConfigResourceType as AioConfigResourceType
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewPartitions, NewTopic
from kafka.errors import InvalidConfigurationError, TopicAlreadyExistsError

from tests.support.broker import KBroker

pytestmark = pytest.mark.interop


def test_kafka_python_admin(kbroker: KBroker) -> None:
    admin = KafkaAdminClient(bootstrap_servers=kbroker.bootstrap)
    try:
        created = admin.create_topics([NewTopic("kp", 2, 1, topic_configs={"retention.ms": "1000"})])
        [result] = created["topics"]
        assert (result["error_code"], result["num_partitions"], result["replication_factor"]) == (0, 2, 1)
        assert result["configs"]["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
        with pytest.raises(TopicAlreadyExistsError):
            admin.create_topics([NewTopic("kp", 1, 1)])
        with pytest.raises(InvalidConfigurationError):
            admin.create_topics([NewTopic("kp-bad", 1, 1, topic_configs={"retention.ms": "never"})])
        admin.create_partitions({"kp": NewPartitions(4)})
        assert len(admin.describe_topics(["kp"])[0]["partitions"]) == 4
        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "kp", configs={"retention.ms": "2000"})])
        described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "kp")])
        assert described["topic"]["kp"]["retention.ms"]["value"] == "2000"
        cluster = admin.describe_cluster()
        assert cluster["controller_id"] == 1 and [b["broker_id"] for b in cluster["brokers"]] == [1]
        admin.delete_topics(["kp"])
        assert "kp" not in admin.list_topics()
    finally:
        admin.close()


def test_aiokafka_admin(kbroker: KBroker) -> None:
    async def run() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=kbroker.bootstrap)
        await admin.start()
        try:
            resp = await admin.create_topics([AioNewTopic("ak", 2, 1, topic_configs={"retention.ms": "1000"})])
            assert [e[1] for e in resp.topic_errors] == [0]
            resp = await admin.create_topics([AioNewTopic("ak", 2, 1)])
            assert [e[1] for e in resp.topic_errors] == [36]  # TOPIC_ALREADY_EXISTS
            resp = await admin.create_partitions({"ak": AioNewPartitions(3)})
            assert [e[1] for e in resp.topic_errors] == [0]
            [described] = await admin.describe_configs([AioConfigResource(AioConfigResourceType.TOPIC, "ak")])
            entries = {e[0]: e for e in described.resources[0][4]}
            assert entries["retention.ms"][1] == "1000" and entries["retention.ms"][3] == 1
            assert entries["segment.bytes"][3] == 5
            await admin.alter_configs([AioConfigResource(AioConfigResourceType.TOPIC, "ak",
                                                         configs={"retention.ms": "2000"})])
            [described] = await admin.describe_configs([AioConfigResource(AioConfigResourceType.TOPIC, "ak")])
            assert {e[0]: e[1] for e in described.resources[0][4]}["retention.ms"] == "2000"
            resp = await admin.delete_topics(["ak"])
            assert [e[1] for e in resp.topic_error_codes] == [0]
            assert "ak" not in await admin.list_topics()
        finally:
            await admin.close()

    asyncio.run(run())
