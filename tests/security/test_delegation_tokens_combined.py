"""Delegation tokens on a combined node (process.roles=broker,controller with a one-voter quorum): the
broker side forwards Create/Renew/Expire to its own QuorumController, whose records come back through
the image; a token authenticates (SCRAM-SHA-256, tokenauth=true), a renewal answers the new expiry,
and the controller's sweep (`delegation.token.expiry.check.interval.ms`) removes an expired token.
JVM-free: raw requests (tests/support/raw_client.py), one Python process, a few seconds.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages.create_delegation_token import CreateDelegationTokenRequest
from kbroker.protocol.messages.describe_delegation_token import DescribeDelegationTokenRequest
from kbroker.protocol.messages.expire_delegation_token import ExpireDelegationTokenRequest
from kbroker.protocol.messages.renew_delegation_token import RenewDelegationTokenRequest
from kbroker.security.delegation_token import create_hmac
from tests.security.test_delegation_tokens_vs_kafka import JAAS, SCRAM_JAAS, _login, _token_login
from tests.support.broker import KBroker, free_port

pytestmark = [pytest.mark.interop]

SECRET = "combined-secret"


def test_tokens_on_a_combined_node(tmp_path: Path) -> None:
    port, cport = free_port(), free_port()
    broker = KBroker(tmp_path, port=port, overrides={
        "process.roles": "broker,controller", "node.id": "1",
        "controller.quorum.voters": f"1@127.0.0.1:{cport}", "controller.listener.names": "CONTROLLER",
        "listeners": f"SASL_PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
        "inter.broker.listener.name": "SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": SCRAM_JAAS,
        "delegation.token.secret.key": SECRET,
        "delegation.token.expiry.check.interval.ms": "300",
    })
    with broker, _login(broker.bootstrap, "alice") as alice:
        created = alice.request(38, 3, CreateDelegationTokenRequest(max_lifetime_ms=-1))
        assert created.error_code == 0 and bytes(created.hmac) == create_hmac(created.token_id, SECRET)
        # Read-your-writes: the forwarded create waited until this node's image had the token.
        described = alice.request(41, 3, DescribeDelegationTokenRequest(owners=None))
        assert [t.token_id for t in described.tokens] == [created.token_id]
        token, login = _token_login(broker.bootstrap, created.token_id, bytes(created.hmac))
        token.close()
        assert login[:2] == ("final", 0), login
        renewed = alice.request(39, 2, RenewDelegationTokenRequest(hmac=created.hmac, renew_period_ms=5000))
        assert renewed.error_code == 0 and renewed.expiry_timestamp_ms < created.expiry_timestamp_ms
        expired = alice.request(40, 2, ExpireDelegationTokenRequest(hmac=created.hmac, expiry_time_period_ms=100))
        assert expired.error_code == 0
        deadline = time.monotonic() + 10
        while alice.request(41, 3, DescribeDelegationTokenRequest(owners=None)).tokens:
            assert time.monotonic() < deadline, "the controller's sweep did not remove the expired token"
            time.sleep(0.2)
        again = alice.request(39, 2, RenewDelegationTokenRequest(hmac=created.hmac, renew_period_ms=-1))
        assert again.error_code == ErrorCode.DELEGATION_TOKEN_NOT_FOUND
        token, login = _token_login(broker.bootstrap, created.token_id, bytes(created.hmac))
        token.close()
        assert login[:2] == ("first", ErrorCode.SASL_AUTHENTICATION_FAILED), login
