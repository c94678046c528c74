"""`broker.rack` is read, registered with the controller and reported as Kafka reports it (issue 19, finding 10)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from confluent_kafka.admin import AdminClient

from kbroker.protocol import API_SPECS
from tests.support.broker import KBroker
from tests.support.raw_client import RawKafkaClient

pytestmark = pytest.mark.interop


def test_broker_rack_in_metadata_and_describe_cluster(kbroker_factory: Callable[..., KBroker]) -> None:
    broker = kbroker_factory(broker_rack="rack-a")
    MD, DC = API_SPECS[3].request_class, API_SPECS[60].request_class
    with RawKafkaClient(broker.bootstrap) as c:
        for version in (1, 12, 13):  # the rack field exists from Metadata v1
            md = c.request(3, version, MD(topics=[], allow_auto_topic_creation=version < 4))
            assert [(b.node_id, b.rack) for b in md.brokers] == [(1, "rack-a")]
        dc = c.request(60, 1, DC(include_cluster_authorized_operations=False, endpoint_type=1))
        assert [(b.broker_id, b.rack) for b in dc.brokers] == [(1, "rack-a")]
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    cluster = admin.describe_cluster().result(timeout=30)
    assert [(n.id, n.rack) for n in cluster.nodes] == [(1, "rack-a")]


def test_no_rack_by_default(kbroker: KBroker) -> None:
    with RawKafkaClient(kbroker.bootstrap) as c:
        md = c.request(3, 12, API_SPECS[3].request_class(topics=[], allow_auto_topic_creation=False))
        assert [b.rack for b in md.brokers] == [None]
