"""Client quotas in a KRaft cluster of kbroker nodes: a process.roles=broker node forwards
AlterClientQuotas to the active QuorumController (process.roles=controller), answers with the
controller's results, serves DescribeClientQuotas from its fetched image at once, and throttles from
it. JVM-free: one kbroker controller, one kbroker broker."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kbroker.protocol.messages.alter_client_quotas import AlterClientQuotasRequest
from kbroker.protocol.messages.describe_client_quotas import DescribeClientQuotasRequest
from kbroker.protocol.messages.produce import ProduceRequest
from kbroker.protocol.records import SimpleRecord, build_batch
from tests.cluster.test_kbroker_quorum import Quorum, _common, _format, stop_nodes
from tests.support.broker import KBroker
from tests.support.kafka_cluster import new_cluster_id
from tests.support.raw_client import RawKafkaClient

# Two processes and a Raft election: ~15 s, so outside the default suite.
pytestmark = [pytest.mark.interop, pytest.mark.slow]


@pytest.fixture(scope="module")
def quorum(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Quorum]:
    work = tmp_path_factory.mktemp("quota-kraft")
    q = Quorum(new_cluster_id(), work)
    q.controllers[1] = c = KBroker(work / "controller-1")
    q.brokers[2] = b = KBroker(work / "broker-2")
    c.overrides = {**_common(q), "process.roles": "controller", "node.id": "1",
                   "listeners": f"CONTROLLER://127.0.0.1:{c.port}", "log.dirs": str(c.log_dir)}
    _format(q, c, c.overrides)
    b.overrides = {**_common(q), "process.roles": "broker", "node.id": "2",
                   "listeners": f"PLAINTEXT://127.0.0.1:{b.port}", "log.dirs": str(b.log_dir),
                   "broker.heartbeat.interval.ms": "500", "offsets.topic.replication.factor": "1",
                   "quota.window.num": "4"}
    _format(q, b, b.overrides)
    try:
        c.start(timeout=60)
        q.wait_leader()
        b.start(timeout=60)
        yield q
    finally:
        stop_nodes([b], [c])


def _alter(c: RawKafkaClient, client_id: str, key: str, value: float) -> list[tuple[int, str | None]]:
    resp = c.request(49, 1, AlterClientQuotasRequest(entries=[AlterClientQuotasRequest.EntryData(
        entity=[AlterClientQuotasRequest.EntityData(entity_type="client-id", entity_name=client_id)],
        ops=[AlterClientQuotasRequest.OpData(key=key, value=value)])]))
    return [(e.error_code, e.error_message) for e in resp.entries]


def test_broker_forwards_alter_client_quotas_and_enforces_them(quorum: Quorum) -> None:
    broker = quorum.brokers[2]
    with RawKafkaClient(broker.bootstrap, client_id="kq") as c:
        assert _alter(c, "kq", "producer_byte_rate", 10_000) == [(0, None)]
        # The controller's own validation, relayed.
        assert _alter(c, "kq", "producer_byte_rate", 1.5) == [(42, "producer_byte_rate cannot be a fractional value.")]
        described = c.request(48, 1, DescribeClientQuotasRequest(components=[
            DescribeClientQuotasRequest.ComponentData(entity_type="client-id", match_type=0, match="kq")]))
        assert [(e.entity[0].entity_name, [(v.key, v.value) for v in e.values]) for e in described.entries] == [
            ("kq", [("producer_byte_rate", 10_000.0)])]
        # The broker throttles from the image it fetched: 60 kB at 10 kB/s over a 3 s window.
        batch = bytes(build_batch([SimpleRecord(value=b"q" * 60_000)]))
        resp = c.request(0, 11, ProduceRequest(transactional_id=None, acks=1, timeout_ms=10_000, topic_data=[
            ProduceRequest.TopicProduceData(name="kraft-quota", partition_data=[
                ProduceRequest.PartitionProduceData(index=0, records=batch)])]))
    assert resp.throttle_time_ms > 1000
    assert "Traceback" not in broker.log_text()
