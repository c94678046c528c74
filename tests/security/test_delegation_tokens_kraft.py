"""Delegation tokens in a KRaft cluster of kbroker nodes: one controller (process.roles=controller) and
two brokers, every node with the same `delegation.token.secret.key`.

As in Kafka, a broker forwards CreateDelegationToken / RenewDelegationToken / ExpireDelegationToken to
the active controller in an Envelope (KIP-590) with the client's principal; the QuorumController writes
the DelegationTokenRecord, and every broker learns the token from its metadata image: a token created
through broker A is described on broker B with the same HMAC, authenticates a client on B
(SCRAM-SHA-256, tokenauth=true), is renewed through B, and once expired through A (-1) is refused on
B. A token given a one-second expiry is removed by the controller's sweep
(`delegation.token.expiry.check.interval.ms`) on every broker. Kafka's own `kafka-delegation-tokens.sh`
and `kafka-topics.sh` are the clients.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.test_kbroker_quorum import Quorum
from tests.security.test_delegation_tokens_interop import AUTH_FAILED, SCRAM, TOKENS_TOOL, rows
from tests.support.java import java_unavailable_reason, run_java_main
from tests.support.sasl_kraft_cluster import PLAIN, sasl_kraft_quorum

pytestmark = [pytest.mark.interop, pytest.mark.java]

USERS = 'user_broker="broker-secret" user_alice="alice-secret"'
SECRET = "kraft-delegation-secret"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Quorum]:
    reason = java_unavailable_reason()
    if reason:
        pytest.skip(reason)
    token_keys = {"delegation.token.secret.key": SECRET}
    with sasl_kraft_quorum(tmp_path_factory.mktemp("tokens-kraft"), USERS,
                           {**token_keys, "delegation.token.expiry.check.interval.ms": "300"}, token_keys) as q:
        yield q


def _tool(bootstrap: str, config: Path, *args: str) -> tuple[int, str]:
    r = run_java_main(TOKENS_TOOL, ["--bootstrap-server", bootstrap, "--command-config", str(config), *args],
                      timeout=120)
    return r.returncode, r.stdout + r.stderr


def _list_topics(bootstrap: str, config: Path) -> tuple[int, str]:
    r = run_java_main("kafka-topics", ["--bootstrap-server", bootstrap, "--list", "--command-config", str(config)],
                      timeout=120)
    return r.returncode, r.stdout + r.stderr


def _eventually_rows(bootstrap: str, config: Path, owner: str, want: int, timeout: float = 20) -> str:
    deadline = time.monotonic() + timeout
    while True:
        rc, out = _tool(bootstrap, config, "--describe", "--owner-principal", owner)
        if rc == 0 and len(rows(out)) == want:
            return out
        assert time.monotonic() < deadline, out
        time.sleep(0.5)


def test_tokens_are_forwarded_to_the_controller_and_served_by_every_broker(cluster: Quorum, tmp_path: Path) -> None:
    a, b = cluster.brokers[2].bootstrap, cluster.brokers[3].bootstrap
    alice = tmp_path / "alice.properties"
    alice.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                     f'sasl.jaas.config={PLAIN} username="alice" password="alice-secret";\n')
    rc, out = _tool(a, alice, "--create", "--max-life-time-period", "-1")
    assert rc == 0, out
    [row] = rows(out)
    assert (row.owner, row.requester) == ("User:alice", "User:alice")
    # Broker B learnt it from its image: same id and HMAC (every node derives it from the secret).
    out = _eventually_rows(b, alice, "User:alice", 1)
    assert [(r.token_id, r.hmac) for r in rows(out)] == [(row.token_id, row.hmac)]
    token = tmp_path / "token.properties"
    token.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
                     f'sasl.jaas.config={SCRAM} username="{row.token_id}" password="{row.hmac}" tokenauth="true";\n')
    rc, out = _list_topics(b, token)
    assert rc == 0, out
    rc, out = _tool(b, alice, "--renew", "--hmac", row.hmac, "--renew-time-period", "-1")
    assert rc == 0 and "Completed renew operation" in out, out
    rc, out = _tool(a, alice, "--expire", "--hmac", row.hmac, "--expiry-time-period", "-1")
    assert rc == 0, out
    _eventually_rows(b, alice, "User:alice", 0)
    rc, out = _list_topics(b, token)
    assert rc != 0 and AUTH_FAILED in out, out

    # The active controller sweeps a token whose expiry passed; both brokers drop it.
    rc, out = _tool(b, alice, "--create", "--max-life-time-period", "-1")
    assert rc == 0, out
    [second] = rows(out)
    rc, out = _tool(a, alice, "--expire", "--hmac", second.hmac, "--expiry-time-period", "1000")
    assert rc == 0, out
    time.sleep(1.5)
    _eventually_rows(a, alice, "User:alice", 0)
    _eventually_rows(b, alice, "User:alice", 0)
