"""KIP-612 connection creation rates: `max.connection.creation.rate`, its per-listener override and the
per-IP `connection_creation_rate` quota, on a fake clock and on a real kbroker.

Shows: connections beyond the broker-wide rate are served late (the listener stops starting new ones
for the throttle time, in arrival order) while the inter-broker listener is exempt from the
broker-wide bound; a listener's own bound applies to it alone; an IP over its quota (set with
AlterClientQuotas, `--entity-type ips`) gets its connections closed unanswered, and a quota removed
lets it in again.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator

import pytest

from kbroker.cluster.connection_quotas import ConnectionQuotas, ip_connection_rate
from kbroker.cluster.quotas import QuotaWindow
from kbroker.protocol import RequestHeader, encode_request_frame
from kbroker.protocol.messages.alter_client_quotas import AlterClientQuotasRequest
from kbroker.protocol.messages.api_versions import ApiVersionsRequest
from tests.support.broker import KBroker, free_port
from tests.support.raw_client import RawKafkaClient

INT_MAX = 2**31 - 1
WINDOW = QuotaWindow(2, 1000)  # quota.window.num=2, quota.window.size.seconds=1: a 1 s minimum window


def test_rates_and_throttle_times_on_a_fake_clock() -> None:
    ips: dict[str, float] = {"10.0.0.9": 2.0}
    q = ConnectionQuotas(WINDOW, broker_rate=5, listener_rates={"EXTERNAL": 3}, inter_broker_listener="INTERNAL",
                         ip_quota=ips.get)
    # INTERNAL (inter-broker): exempt from the broker-wide rate, no listener bound
    assert all(q.record("INTERNAL", "10.0.0.1", 0).accept_delay_ms == 0 for _ in range(20))
    # PLAIN: the broker-wide 5/s over a 1 s window; the 6th connection is 1/5 over: 200 ms
    delays = [q.record("PLAIN", "10.0.0.1", 100).accept_delay_ms for _ in range(6)]
    assert delays == [0, 0, 0, 0, 0, 200]
    # EXTERNAL: its own 3/s bound (and the broker's, already over: the larger throttle wins)
    assert q.record("EXTERNAL", "10.0.0.2", 100).accept_delay_ms > 0
    # an IP over its quota: refused, closed after its throttle time, not counted
    assert [q.record("INTERNAL", "10.0.0.9", 0).ip_close_delay_ms for _ in range(3)] == [0, 0, 500]
    assert q.record("INTERNAL", "10.0.0.9", 0).ip_close_delay_ms == 500  # still 2 recorded, 3rd refused
    assert q.record("INTERNAL", "10.0.0.9", 5000).ip_close_delay_ms == 0  # the window moved on


def test_ip_quota_lookup_prefers_the_ip_over_the_default() -> None:
    entities = {(("ip", None),): {"connection_creation_rate": 7.0}, (("ip", "1.2.3.4"),): {"connection_creation_rate": 1.0}}
    assert ip_connection_rate(entities, "1.2.3.4") == 1.0
    assert ip_connection_rate(entities, "5.6.7.8") == 7.0
    assert ip_connection_rate({}, "5.6.7.8") is None


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[KBroker, dict[str, int]]]:
    ports = {"PLAINTEXT": free_port(), "INTERNAL": free_port(), "LIMITED": free_port()}
    kb = KBroker(tmp_path_factory.mktemp("conn-rate"), port=ports["PLAINTEXT"], overrides={
        "listeners": ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items()),
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT,LIMITED:PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL",
        "max.connection.creation.rate": "10",
        "listener.name.limited.max.connection.creation.rate": "4",
        "quota.window.num": "2",
        "quota.window.size.seconds": "1",
    })
    with kb:
        yield kb, ports


_API_VERSIONS = encode_request_frame(RequestHeader(api_key=18, api_version=0, correlation_id=1, client_id="rate"),
                                     ApiVersionsRequest())


def _served_within(port: int, n: int, timeout: float = 15.0) -> tuple[float, int]:
    """Open n connections at once, send ApiVersions on each; (seconds until every answer, answers)."""
    start = time.monotonic()
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        s.sendall(_API_VERSIONS)
        socks.append(s)
    answered = 0
    for s in socks:
        try:
            head = s.recv(4)
            if len(head) == 4 and struct.unpack(">i", head)[0] > 0:
                answered += 1
        except OSError:
            pass
        finally:
            s.close()
    return time.monotonic() - start, answered


@pytest.mark.interop
def test_broker_and_listener_rates_delay_accepts(broker: tuple[KBroker, dict[str, int]]) -> None:
    kb, ports = broker
    time.sleep(2.1)  # a fresh window
    # 30 connections at 10/s with a 1 s minimum window: about 2 s before the last is served
    elapsed, answered = _served_within(ports["PLAINTEXT"], 30)
    assert answered == 30 and elapsed >= 1.5, elapsed
    # the inter-broker listener is exempt from the broker-wide bound
    time.sleep(2.1)
    _served_within(ports["PLAINTEXT"], 15)
    elapsed, answered = _served_within(ports["INTERNAL"], 30)
    assert answered == 30 and elapsed < 1.0, elapsed
    # LIMITED's own 4/s
    time.sleep(2.1)
    elapsed, answered = _served_within(ports["LIMITED"], 12)
    assert answered == 12 and elapsed >= 1.5, elapsed
    assert "Traceback" not in kb.log_text()


def _ip_quota(port: int, value: float | None) -> None:
    with RawKafkaClient(f"127.0.0.1:{port}") as c:
        op = AlterClientQuotasRequest.OpData(key="connection_creation_rate", value=value or 0.0, remove=value is None)
        resp = c.request(49, 1, AlterClientQuotasRequest(entries=[AlterClientQuotasRequest.EntryData(
            entity=[AlterClientQuotasRequest.EntityData(entity_type="ip", entity_name="127.0.0.1")], ops=[op])]))
        assert [e.error_code for e in resp.entries] == [0]


@pytest.mark.interop
def test_ip_quota_closes_connections_over_it(broker: tuple[KBroker, dict[str, int]]) -> None:
    kb, ports = broker
    _ip_quota(ports["INTERNAL"], 3)
    try:
        time.sleep(2.1)
        _, answered = _served_within(ports["INTERNAL"], 10)
        assert 3 <= answered <= 5, answered  # the quota's worth, the rest closed unanswered
        assert "is over its connection_creation_rate quota" in kb.log_text()
    finally:
        time.sleep(1.2)  # let the refused IP's window pass so the request below is accepted
        _ip_quota(ports["INTERNAL"], None)
    time.sleep(2.1)
    _, answered = _served_within(ports["INTERNAL"], 10)
    assert answered == 10
