"""KIP-590 on kbroker's side: the principal an Envelope carries and kbroker's controller running the
inner request as that principal.

- `serialize_principal` writes the bytes Kafka 4.3.1's `DefaultKafkaPrincipalBuilder.serialize`
  writes (the hex strings below were printed by that method: `User:alice`, and a token-authenticated
  `User:CN=böb,O=x`), and `deserialize_principal` reads them back; malformed bytes are refused.
- kbroker's `ControllerApis.envelope`: an inner CreateTopics from a principal without CREATE is
  answered TOPIC_AUTHORIZATION_FAILED inside the Envelope even though the forwarding broker may do
  anything; a super user's reaches the controller; a malformed principal or address is INVALID_REQUEST.
- The forwarding side (a kbroker broker to Kafka's controller) is in test_inter_broker_sasl_ssl.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kbroker.config import KafkaConfig
from kbroker.protocol import RequestHeader, decode_response_frame, encode_request_frame
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages.create_topics import CreateTopicsRequest, CreateTopicsResponse
from kbroker.protocol.messages.envelope import EnvelopeRequest
from kbroker.security.acl import ALLOW, CLUSTER, CLUSTER_ACTION, CLUSTER_NAME, LITERAL
from kbroker.security.principal import (
    KafkaPrincipal,
    PrincipalSerdeError,
    deserialize_principal,
    serialize_principal,
)
from kbroker.server.controller_apis import ControllerApis
from tests.security.test_authz_unit import _authorizer, _call, _Raft, _services

JAVA_ALICE = "0000055573657206616c6963650000"
JAVA_BOB_TOKEN = "000005557365720c434e3d62c3b6622c4f3d780100"


def test_principal_bytes_equal_kafkas() -> None:
    assert serialize_principal(KafkaPrincipal.user("alice")).hex() == JAVA_ALICE
    assert serialize_principal(KafkaPrincipal.user("CN=böb,O=x"), token_authenticated=True).hex() == JAVA_BOB_TOKEN
    assert deserialize_principal(bytes.fromhex(JAVA_ALICE)) == KafkaPrincipal.user("alice")
    assert deserialize_principal(bytes.fromhex(JAVA_BOB_TOKEN)) == KafkaPrincipal.user("CN=böb,O=x")
    for bad in (b"", b"\x00", b"\x00\x01" + bytes.fromhex(JAVA_ALICE)[2:], bytes.fromhex(JAVA_ALICE)[:-2],
                b"\x00\x00\x7f", b"\x00\x00\xff\xff\xff\xff\xff\xff"):
        with pytest.raises(PrincipalSerdeError):
            deserialize_principal(bad)


def _envelope(principal: bytes, address: bytes = b"\x0a\x00\x00\x07") -> EnvelopeRequest:
    inner = CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
        name="orders", num_partitions=1, replication_factor=1)], timeout_ms=1000)
    frame = encode_request_frame(RequestHeader(api_key=19, api_version=7, correlation_id=9, client_id="app"), inner)
    return EnvelopeRequest(request_data=frame[4:], request_principal=principal, client_host_address=address)


def _inner(response: object) -> CreateTopicsResponse:
    data = getattr(response, "response_data", None)
    assert getattr(response, "error_code", None) == 0 and data is not None, response
    cid, body = decode_response_frame(19, 7, memoryview(data))
    assert cid == 9 and isinstance(body, CreateTopicsResponse)
    return body


def test_inner_request_runs_as_the_enveloped_principal(tmp_path: Path) -> None:
    # The forwarding broker may CLUSTER_ACTION (and so forward); User:admin is a super user.
    authorizer = _authorizer((CLUSTER, CLUSTER_NAME, LITERAL, "User:broker", CLUSTER_ACTION, ALLOW))
    services = _services(authorizer)
    services.config = KafkaConfig({"log.dirs": str(tmp_path)})
    apis = ControllerApis(services, _Raft())  # type: ignore[arg-type]
    alice = _call(apis, "User:broker", 58, 0, _envelope(serialize_principal(KafkaPrincipal.user("alice"))))
    assert [t.error_code for t in _inner(alice).topics] == [ErrorCode.TOPIC_AUTHORIZATION_FAILED]
    admin = _call(apis, "User:broker", 58, 0, _envelope(serialize_principal(KafkaPrincipal.user("admin"))))
    # past the check: the stub controller answers NOT_CONTROLLER, which the Envelope carries (Kafka's
    # RequestChannel.buildResponseSend), so the forwarding broker looks for the active controller
    assert admin.error_code == ErrorCode.NOT_CONTROLLER and admin.response_data is None
    for bad in (_envelope(b"\x00\x01garbage"), _envelope(serialize_principal(KafkaPrincipal.user("a")), b"\x01\x02")):
        assert _call(apis, "User:broker", 58, 0, bad).error_code == ErrorCode.INVALID_REQUEST
