"""AlterClientQuotas and DescribeClientQuotas answered as Apache Kafka 4.3.1 answers them.

The same sequence of raw requests (valid and invalid alterations, then filters) goes to the reference
Kafka and to kbroker; the answers (entries compared as sets: Kafka lists them from hash maps) must be
equal, error codes and messages included."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from kbroker.protocol.messages.alter_client_quotas import AlterClientQuotasRequest
from kbroker.protocol.messages.describe_client_quotas import DescribeClientQuotasRequest
from tests.support.broker import KBroker, free_port
from tests.support.raw_client import RawKafkaClient
from tests.support.reference_kafka import reference_unavailable_reason, start_reference_kafka

pytestmark = [pytest.mark.interop, pytest.mark.reference]

Entity = tuple[tuple[str, str | None], ...]
Op = tuple[str, float | None]

# Each request: a list of (entity, ops) entries and validate_only.
ALTERATIONS: list[tuple[list[tuple[Entity, list[Op]]], bool]] = [
    ([((("client-id", "x"),), [("producer_byte_rate", 1024.0)])], False),
    ([((("client-id", None),), [("consumer_byte_rate", 2048.0)])], False),
    ([((("user", "alice"), ("client-id", "x")), [("request_percentage", 50.5)])], False),
    ([((("user", None),), [("controller_mutation_rate", 10.0)])], False),
    ([((("user", None), ("client-id", None)), [("producer_byte_rate", 4096.0)])], False),
    ([((("ip", "127.0.0.1"),), [("connection_creation_rate", 5.0)])], False),
    ([((("ip", None),), [("connection_creation_rate", 7.0)])], False),
    ([((), [("producer_byte_rate", 1.0)])], False),
    ([((("group", "g"),), [("producer_byte_rate", 1.0)])], False),
    ([((("user", ""),), [("producer_byte_rate", 1.0)])], False),
    ([((("ip", "127.0.0.1"), ("user", "bob")), [("connection_creation_rate", 1.0)])], False),
    ([((("ip", "not a host!!"),), [("connection_creation_rate", 1.0)])], False),
    ([((("client-id", "y"),), [("foo", 1.0)])], False),
    ([((("client-id", "y"),), [("producer_byte_rate", 0.0)])], False),
    ([((("client-id", "y"),), [("producer_byte_rate", -5.0)])], False),
    ([((("client-id", "y"),), [("producer_byte_rate", 10.5)])], False),
    ([((("client-id", "y"),), [("producer_byte_rate", 1e19)])], False),
    ([((("ip", "10.0.0.1"),), [("connection_creation_rate", 3e9)])], False),
    ([((("ip", "10.0.0.1"),), [("connection_creation_rate", 2.5)])], False),
    ([((("client-id", "y"),), [("producer_byte_rate", 1.0), ("producer_byte_rate", 2.0)])], False),
    ([((("client-id", "y"),), [("connection_creation_rate", 1.0)])], False),
    ([((("user", "carol"),), [("SCRAM-SHA-256", 1.0)])], False),
    ([((("client-id", "y"),), [("consumer_byte_rate", None)])], False),
    ([((("client-id", "z"),), [("producer_byte_rate", 100.0)])], True),
    ([((("client-id", "a"),), [("producer_byte_rate", 100.0)]),
      ((("client-id", "b"),), [("producer_byte_rate", 1.5)])], False),
    ([((("client-id", "x"),), [("producer_byte_rate", 1024.0), ("consumer_byte_rate", 99.0)])], False),
    ([((("client-id", "x"),), [("producer_byte_rate", None)])], False),
    ([((("user", "alice"), ("user", "dave")), [("producer_byte_rate", 8.0)])], False),
    ([((("client-id", "twice"),), [("producer_byte_rate", 5.0)]),
      ((("client-id", "twice"),), [("consumer_byte_rate", 6.0)])], False),
    ([((("user", "u1"), ("client-id", "c1")), [("producer_byte_rate", 5.0)]),
      ((("client-id", "c1"), ("user", "u1")), [("producer_byte_rate", 6.0)])], False),
]

# (components: (entity_type, match_type, match), strict)
FILTERS: list[tuple[list[tuple[str, int, str | None]], bool]] = [
    ([], False),
    ([], True),
    ([("client-id", 0, "x")], False),
    ([("client-id", 0, "x")], True),
    ([("client-id", 1, None)], False),
    ([("client-id", 2, None)], False),
    ([("user", 2, None)], False),
    ([("user", 1, None)], True),
    ([("user", 0, "alice"), ("client-id", 2, None)], True),
    ([("ip", 2, None)], False),
    ([("ip", 1, None)], False),
    ([("", 2, None)], False),
    ([("user", 2, None), ("user", 1, None)], False),
    ([("group", 2, None)], False),
    ([("user", 0, None)], False),
    ([("user", 1, "x")], False),
    ([("user", 2, "x")], False),
    ([("user", 7, None)], False),
    ([("ip", 2, None), ("user", 2, None)], False),
    ([("client-id", 0, "nobody")], False),
]


def _entity(entity: Any) -> tuple[tuple[str, str | None], ...]:
    return tuple(sorted(((e.entity_type, e.entity_name) for e in entity), key=repr))


def _answers(bootstrap: str) -> list[Any]:
    out: list[Any] = []
    with RawKafkaClient(bootstrap, client_id="quota-diff") as c:
        for entries, validate_only in ALTERATIONS:
            req = AlterClientQuotasRequest(validate_only=validate_only, entries=[
                AlterClientQuotasRequest.EntryData(
                    entity=[AlterClientQuotasRequest.EntityData(entity_type=t, entity_name=n) for t, n in entity],
                    ops=[AlterClientQuotasRequest.OpData(key=k, value=0.0 if v is None else v, remove=v is None)
                         for k, v in ops])
                for entity, ops in entries])
            resp = c.request(49, 1, req)
            out.append(("alter", sorted(((_entity(e.entity), e.error_code, e.error_message) for e in resp.entries),
                                       key=repr)))
        # Kafka answers AlterClientQuotas once the controller committed; its broker's image follows a
        # moment later. Let it catch up before reading.
        time.sleep(1.0)
        for components, strict in FILTERS:
            req = DescribeClientQuotasRequest(strict=strict, components=[
                DescribeClientQuotasRequest.ComponentData(entity_type=t, match_type=m, match=s)
                for t, m, s in components])
            resp = c.request(48, 1, req)
            entries = None if resp.entries is None else sorted(
                ((_entity(e.entity), sorted((v.key, v.value) for v in e.values)) for e in resp.entries), key=repr)
            out.append(("describe", components, strict, resp.error_code, resp.error_message, entries))
    return out


def test_client_quota_apis_answered_as_kafka(tmp_path: Path) -> None:
    reason = reference_unavailable_reason()
    if reason:
        pytest.skip(reason)
    port = free_port()
    _, stop = start_reference_kafka(tmp_path / "kafka", port=port)
    try:
        kafka = _answers(f"127.0.0.1:{port}")
    finally:
        stop()
    with KBroker(tmp_path / "kbroker") as broker:
        ours = _answers(broker.bootstrap)
    mismatches = [(k, o) for k, o in zip(kafka, ours, strict=True) if k != o]
    assert not mismatches, "\n".join(f"kafka: {k}\nours:  {o}" for k, o in mismatches)
    # The table exercises both outcomes.
    assert any(e[1] == 0 for a in kafka if a[0] == "alter" for e in a[1])
    assert any(e[1] != 0 for a in kafka if a[0] == "alter" for e in a[1])
