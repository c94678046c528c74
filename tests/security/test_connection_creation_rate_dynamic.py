"""`max.connection.creation.rate` is a dynamic broker config, as in Kafka (DynamicConnectionQuota):
an IncrementalAlterConfigs of the broker (or of the cluster default) bounds the next connections
without a restart, and removing it lifts the bound. On a fake clock, then on a real kbroker."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from kbroker.cluster.connection_quotas import INT_MAX, ConnectionQuotas
from kbroker.cluster.quotas import QuotaWindow
from kbroker.protocol.messages.incremental_alter_configs import IncrementalAlterConfigsRequest
from tests.security.test_connection_creation_rate import _served_within
from tests.support.broker import KBroker, free_port
from tests.support.raw_client import RawKafkaClient

BROKER_RESOURCE = 4
OP_SET, OP_DELETE = 0, 1


def test_the_bound_is_read_at_each_connection() -> None:
    bound = [INT_MAX]
    q = ConnectionQuotas(QuotaWindow(2, 1000), broker_rate=INT_MAX, listener_rates={},
                         inter_broker_listener="INTERNAL", ip_quota=lambda ip: None,
                         broker_rate_source=lambda: bound[0])
    assert all(q.record("PLAIN", "10.0.0.1", 0).accept_delay_ms == 0 for _ in range(20))
    bound[0] = 5  # the dynamic config arrives: counted from the next connection on
    delays = [q.record("PLAIN", "10.0.0.1", 100).accept_delay_ms for _ in range(6)]
    assert delays[:5] == [0] * 5 and delays[5] > 0
    bound[0] = INT_MAX  # removed
    assert q.record("PLAIN", "10.0.0.1", 100).accept_delay_ms == 0


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KBroker]:
    port, internal = free_port(), free_port()
    # The inter-broker listener is exempt from the broker-wide bound: clients use another one.
    kb = KBroker(tmp_path_factory.mktemp("conn-rate-dynamic"), port=port, overrides={
        "listeners": f"PLAINTEXT://127.0.0.1:{port},INTERNAL://127.0.0.1:{internal}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL",
        "quota.window.num": "2", "quota.window.size.seconds": "1"})
    with kb:
        yield kb


def _alter(kb: KBroker, resource_name: str, value: str | None) -> None:
    config = IncrementalAlterConfigsRequest.AlterableConfig(
        name="max.connection.creation.rate", config_operation=OP_SET if value is not None else OP_DELETE,
        value=value)
    with RawKafkaClient(kb.bootstrap) as c:
        resp = c.request(44, 1, IncrementalAlterConfigsRequest(resources=[
            IncrementalAlterConfigsRequest.AlterConfigsResource(
                resource_type=BROKER_RESOURCE, resource_name=resource_name, configs=[config])], validate_only=False))
        assert [r.error_code for r in resp.responses] == [0], resp


@pytest.mark.interop
@pytest.mark.parametrize("resource_name", ["1", ""], ids=["per-broker", "cluster-default"])
def test_incremental_alter_configs_bounds_new_connections(broker: KBroker, resource_name: str) -> None:
    time.sleep(2.1)
    elapsed, answered = _served_within(broker.port, 20)
    assert answered == 20 and elapsed < 1.0, elapsed  # no bound yet
    _alter(broker, resource_name, "8")
    try:
        time.sleep(2.1)  # a fresh window
        # 20 connections at 8/s with a 1 s minimum window: more than a second before the last is served
        elapsed, answered = _served_within(broker.port, 20)
        assert answered == 20 and elapsed >= 1.0, elapsed
    finally:
        time.sleep(2.1)
        _alter(broker, resource_name, None)
    time.sleep(2.1)
    elapsed, answered = _served_within(broker.port, 20)
    assert answered == 20 and elapsed < 1.0, elapsed
    assert "Traceback" not in broker.log_text()
