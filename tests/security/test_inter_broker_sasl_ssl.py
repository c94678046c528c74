"""Two kbroker brokers replicating over a SASL_SSL inter-broker listener, under an Apache Kafka 4.3.1
controller whose controller listener is SASL_PLAINTEXT, with ACLs on every node.

What a Kafka operator writes (docs/security.md, "Inter-broker and controller connections"):
`inter.broker.listener.name=INTERNAL` (SASL_SSL, `sasl.mechanism.inter.broker.protocol=PLAIN`, the
login in `listener.name.internal.plain.sasl.jaas.config`), `controller.listener.names=CONTROLLER`
(SASL_PLAINTEXT, `sasl.mechanism.controller.protocol=PLAIN`), `StandardAuthorizer` with
`super.users=User:broker`. So:

- each kbroker broker registers and heartbeats through Kafka's controller as `User:broker` (Kafka's
  ControllerApis needs CLUSTER_ACTION: with an anonymous or failed login there is no registration);
- followers fetch from the leader over TLS + SASL as `User:broker` (kbroker's Fetch needs
  CLUSTER_ACTION for a follower), so records written with acks=all reach both logs and the ISR holds
  both replicas;
- a broker whose inter-broker password is wrong registers (its controller login is right) but never
  joins the ISR of a partition it follows: its fetcher is refused and logs why;
- KIP-590: a kbroker broker without an authorizer forwards CreateTopics in an Envelope carrying the
  client's principal, so Kafka's controller (super.users=User:broker;User:admin) refuses alice, who has
  no CREATE, with TOPIC_AUTHORIZATION_FAILED and lets admin create; forwarded as the broker, both would
  have been allowed.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.security.certs import Pki, make_pki
from tests.support.kafka_cluster import KafkaCluster, cluster_unavailable_reason

pytestmark = [pytest.mark.interop, pytest.mark.java]

PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule required"
USERS = 'user_broker="broker-secret" user_admin="admin-secret" user_alice="alice-secret"'
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


def _broker_overrides(pki: Pki, port: int, *, inter_broker_password: str = "broker-secret") -> dict[str, str]:
    return {
        "listeners": f"INTERNAL://127.0.0.1:{port}",
        "listener.security.protocol.map": "CONTROLLER:SASL_PLAINTEXT,INTERNAL:SASL_SSL",
        "inter.broker.listener.name": "INTERNAL",
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "sasl.mechanism.controller.protocol": "PLAIN",
        "listener.name.internal.plain.sasl.jaas.config":
            f'{PLAIN} username="broker" password="{inter_broker_password}" {USERS};',
        "listener.name.controller.plain.sasl.jaas.config": f'{PLAIN} username="broker" password="broker-secret";',
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.broker_keystore),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca_cert),
        "authorizer.class.name": AUTHORIZER,
        "super.users": "User:broker;User:admin",
        "replica.fetch.backoff.ms": "200",
        "replica.lag.time.max.ms": "3000",
        "offsets.topic.replication.factor": "1",
    }


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[KafkaCluster, Pki]]:
    reason = cluster_unavailable_reason()
    if reason:
        pytest.skip(reason)
    work: Path = tmp_path_factory.mktemp("inter-broker-sasl-ssl")
    pki = make_pki(work / "pki")
    c = KafkaCluster(work, controller_overrides={
        "listener.security.protocol.map": "CONTROLLER:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.mechanism.controller.protocol": "PLAIN",
        "listener.name.controller.plain.sasl.jaas.config":
            f'{PLAIN} username="broker" password="broker-secret" {USERS};',
        "authorizer.class.name": AUTHORIZER,
        "super.users": "User:broker;User:admin",
    })
    try:
        c.start_controllers()
        for node_id in (2, 3):
            kb = c.kbroker(node_id)
            kb.overrides.update(_broker_overrides(pki, kb.port))
            kb.start(timeout=90)
        yield c, pki
    finally:
        c.stop_all()


def _client(pki: Pki, port: int, user: str = "admin") -> dict[str, str]:
    return {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(pki.ca_cert), "sasl.mechanism": "PLAIN",
            "sasl.username": user, "sasl.password": f"{user}-secret"}


def _wait_isr(admin: AdminClient, topic: str, isr: set[int], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        md = admin.list_topics(topic, timeout=10).topics[topic]
        last = {p: set(pm.isrs) for p, pm in md.partitions.items()} if md.error is None else md.error
        if isinstance(last, dict) and last and all(s == isr for s in last.values()):
            return
        time.sleep(0.3)
    raise AssertionError(f"{topic}: ISR {sorted(isr)} not reached: {last}")


def test_replication_over_sasl_ssl_with_acls(cluster: tuple[KafkaCluster, Pki]) -> None:
    c, pki = cluster
    b2, b3 = c.kbrokers
    conf = _client(pki, b2.port)
    admin = AdminClient(conf)
    # Both brokers registered through the SASL controller listener (Kafka's controller authorized them).
    md = admin.list_topics(timeout=15)
    assert sorted(md.brokers) == [2, 3]
    topic = "replicated-sasl-ssl"
    admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=2,
                                  config={"min.insync.replicas": "2"})])[topic].result(30)
    _wait_isr(admin, topic, {2, 3})
    producer = Producer({**conf, "acks": "all", "enable.idempotence": "true"})
    for i in range(200):
        producer.produce(topic, key=str(i % 2).encode(), value=f"v{i}".encode(), partition=i % 2)
    assert producer.flush(30) == 0
    # acks=all with min.insync.replicas=2 succeeded, so both replicas hold the records; read them from
    # the broker that follows each partition as well as from the leader (the same log end).
    for kb in (b2, b3):
        consumer = Consumer({**_client(pki, kb.port), "group.id": f"g-{kb.port}", "auto.offset.reset": "earliest",
                             "enable.auto.commit": "false"})
        consumer.subscribe([topic])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < 200 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
        consumer.close()
        assert sorted(got) == sorted(f"v{i}".encode() for i in range(200))
    # The followers' data on disk: both brokers' logs of partition 0 hold the 100 records.
    for kb in (b2, b3):
        seg = next((kb.log_dir / f"{topic}-0").glob("*.log"))
        assert seg.stat().st_size > 100 * 10, f"{kb.log_dir}: {seg.stat().st_size}"
    for kb in (b2, b3):
        assert "Traceback" not in kb.log_text()


def test_wrong_inter_broker_password_never_joins_the_isr(cluster: tuple[KafkaCluster, Pki]) -> None:
    c, pki = cluster
    b2 = c.kbrokers[0]
    bad = c.kbroker(4)
    bad.overrides.update(_broker_overrides(pki, bad.port, inter_broker_password="wrong"))
    bad.start(timeout=90)
    admin = AdminClient(_client(pki, b2.port))
    deadline = time.monotonic() + 30
    while 4 not in admin.list_topics(timeout=10).brokers:
        assert time.monotonic() < deadline, "broker 4 did not register"
        time.sleep(0.3)
    topic = "bad-follower"
    admin.create_topics([NewTopic(topic, num_partitions=1, replica_assignment=[[2, 4]])])[topic].result(30)
    producer = Producer({**_client(pki, b2.port), "acks": "1"})
    producer.produce(topic, value=b"x")
    assert producer.flush(30) == 0
    # Created with ISR {2, 4}; the leader drops 4 once it has not fetched for replica.lag.time.max.ms.
    _wait_isr(admin, topic, {2}, timeout=30)
    assert admin.list_topics(topic, timeout=10).topics[topic].partitions[0].leader == 2
    deadline = time.monotonic() + 30
    while "Invalid username or password" not in bad.log_text():
        assert time.monotonic() < deadline, bad.log_text()[-3000:]
        time.sleep(0.3)
    assert "Traceback" not in bad.log_text()
    bad.stop()


def test_envelope_carries_the_client_principal_to_kafkas_controller(cluster: tuple[KafkaCluster, Pki]) -> None:
    c, pki = cluster
    open_broker = c.kbroker(5)
    overrides = _broker_overrides(pki, open_broker.port)
    del overrides["authorizer.class.name"], overrides["super.users"]  # no ACLs on this broker
    open_broker.overrides.update(overrides)
    open_broker.start(timeout=90)
    try:
        alice = AdminClient(_client(pki, open_broker.port, "alice"))
        refused = alice.create_topics([NewTopic("alice-topic", 1, 1)], operation_timeout=10)["alice-topic"]
        with pytest.raises(KafkaException) as info:
            refused.result(30)
        assert info.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, info.value
        admin = AdminClient(_client(pki, open_broker.port, "admin"))
        admin.create_topics([NewTopic("admin-topic", 1, 1)], operation_timeout=10)["admin-topic"].result(30)
        md = admin.list_topics(timeout=10).topics
        assert "admin-topic" in md and "alice-topic" not in md
        assert "Traceback" not in open_broker.log_text()
    finally:
        open_broker.stop()
