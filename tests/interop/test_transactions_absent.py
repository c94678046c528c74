"""Transactional producers fail at once while kbroker has no transaction coordinator (issue 19, finding 10).

FindCoordinator for a TRANSACTION key (and InitProducerId with a transactional id) answer
TRANSACTIONAL_ID_AUTHORIZATION_FAILED, which librdkafka and the Java client treat as fatal: a stock
transactional producer's `init_transactions()` raises within seconds with that error, instead of
retrying the retriable COORDINATOR_NOT_AVAILABLE until `max.block.ms` / its timeout.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer

from kbroker.protocol import API_SPECS
from tests.support.broker import KBroker
from tests.support.raw_client import RawKafkaClient

pytestmark = pytest.mark.interop

TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53


def test_find_coordinator_for_a_transactional_id_is_fatal_not_retriable(kbroker: KBroker) -> None:
    FC = API_SPECS[10].request_class
    with RawKafkaClient(kbroker.bootstrap) as c:
        v3 = c.request(10, 3, FC(key="tx", key_type=1))
        assert (v3.error_code, v3.node_id) == (TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1)
        assert "does not implement transactions" in v3.error_message
        v4 = c.request(10, 4, FC(key_type=1, coordinator_keys=["a", "b"]))
        assert [(x.key, x.error_code) for x in v4.coordinators] == [
            ("a", TRANSACTIONAL_ID_AUTHORIZATION_FAILED), ("b", TRANSACTIONAL_ID_AUTHORIZATION_FAILED)]


def test_confluent_transactional_producer_fails_fast_with_a_clear_error(kbroker: KBroker) -> None:
    producer = Producer({"bootstrap.servers": kbroker.bootstrap, "transactional.id": "tx-absent",
                         "transaction.timeout.ms": 60000})
    started = time.monotonic()
    with pytest.raises(KafkaException) as raised:
        producer.init_transactions(60)  # seconds; the default max.block.ms-like bound
    elapsed = time.monotonic() - started
    error = raised.value.args[0]
    assert error.code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, error
    assert error.fatal(), error
    assert elapsed < 10, f"init_transactions took {elapsed:.1f} s"
