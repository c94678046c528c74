"""A small KRaft cluster of kbroker nodes over SASL_PLAINTEXT: one controller (process.roles=controller,
node 1) and two brokers (nodes 2 and 3), the controller listener authenticated with PLAIN as `broker`,
the brokers' client listener offering PLAIN and SCRAM-SHA-256.

Shared by the tests that show Kafka's forwarding of security state to the controller
(tests/security/test_delegation_tokens_kraft.py: delegation tokens; tests/security/
test_acl_scram_forwarding_kraft.py: ACLs and SCRAM credentials): each passes its own PLAIN users and the
extra keys of its feature (the token secret, the authorizer), the rest of the set-up is one copy.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.cluster.test_kbroker_quorum import Quorum, _format, running_quorum
from tests.support.broker import KBroker
from tests.support.kafka_cluster import new_cluster_id

PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule required"
BROKER_IDS = (2, 3)


def controller_props(q: Quorum, c: KBroker, users: str, extra: dict[str, str]) -> dict[str, str]:
    """Node 1's keys: a SASL_PLAINTEXT controller listener whose PLAIN users are `users`."""
    return {"process.roles": "controller", "node.id": "1", "controller.quorum.voters": q.voters,
            "controller.listener.names": "CONTROLLER", "listeners": f"CONTROLLER://127.0.0.1:{c.port}",
            "listener.security.protocol.map": "CONTROLLER:SASL_PLAINTEXT",
            "sasl.enabled.mechanisms": "PLAIN", "sasl.mechanism.controller.protocol": "PLAIN",
            "listener.name.controller.plain.sasl.jaas.config":
                f'{PLAIN} username="broker" password="broker-secret" {users};',
            "log.dirs": str(c.log_dir), **extra}


def broker_props(q: Quorum, node_id: int, b: KBroker, users: str, extra: dict[str, str]) -> dict[str, str]:
    """A broker's keys: client listener CLIENTS (SASL_PLAINTEXT, PLAIN users `users` and SCRAM-SHA-256),
    also the inter-broker listener; PLAIN as `broker` towards the controller."""
    return {"process.roles": "broker", "node.id": str(node_id), "controller.quorum.voters": q.voters,
            "controller.listener.names": "CONTROLLER", "listeners": f"CLIENTS://127.0.0.1:{b.port}",
            "listener.security.protocol.map": "CONTROLLER:SASL_PLAINTEXT,CLIENTS:SASL_PLAINTEXT",
            "inter.broker.listener.name": "CLIENTS",
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
            "sasl.mechanism.inter.broker.protocol": "PLAIN", "sasl.mechanism.controller.protocol": "PLAIN",
            "listener.name.clients.plain.sasl.jaas.config":
                f'{PLAIN} username="broker" password="broker-secret" {users};',
            "listener.name.controller.plain.sasl.jaas.config": f'{PLAIN} username="broker" password="broker-secret";',
            "log.dirs": str(b.log_dir), "broker.heartbeat.interval.ms": "500",
            "offsets.topic.replication.factor": "1", **extra}


@contextmanager
def sasl_kraft_quorum(work: Path, users: str, controller_extra: dict[str, str],
                      broker_extra: dict[str, str]) -> Iterator[Quorum]:
    """Formats and starts the controller, waits for it to lead, starts both brokers; stops the brokers,
    then the controller, on the way out (tests/cluster/test_kbroker_quorum.running_quorum)."""
    q = Quorum(new_cluster_id(), work)
    q.controllers[1] = c = KBroker(work / "controller-1")
    for i in BROKER_IDS:
        q.brokers[i] = KBroker(work / f"broker-{i}")
    c.overrides = controller_props(q, c, users, controller_extra)
    _format(q, c, c.overrides)
    for i, b in q.brokers.items():
        b.overrides = broker_props(q, i, b, users, broker_extra)
        _format(q, b, b.overrides)
    with running_quorum(q):
        yield q
