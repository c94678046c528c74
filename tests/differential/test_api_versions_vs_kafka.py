"""Differential test: ApiVersions, ListConfigResources and a broker's static configs, Kafka 4.3.1 vs kbroker.

Clients infer the broker's release from the advertised ranges and choose features by it (kafka-python
infers "4.3" from Kafka 4.3.1), so for every API kbroker serves the range must be Kafka's. The whole
response is compared: an API Kafka advertises and kbroker does not is listed in ABSENT_APIS with its
reason, a supported feature kbroker leaves out in ABSENT_FEATURES; the test checks that exactly those
differ, so neither list can go stale (docs/compatibility.md carries the same lists).

Both brokers get the same static server.properties keys (those of benchmarks/reference/kafka.sh), so
DescribeConfigs sources are comparable: every static key must come back with Kafka's source
(STATIC_BROKER_CONFIG), type and read-only flag.
"""

from __future__ import annotations

import socket
import struct
from pathlib import Path
from typing import Any

import pytest

from kbroker.protocol import API_SPECS
from tests.differential.test_vs_kafka import SAME_STATIC_CONFIG
from tests.support.raw_client import RawKafkaClient
from tests.support.reference_kafka import reference_unavailable_reason, start_reference_kafka

pytestmark = [pytest.mark.reference, pytest.mark.interop]

_STREAMS = "streams groups (KIP-1071) are not implemented"
_RAFT = "no Raft metadata quorum (issue 13)"

# APIs Kafka 4.3.1 advertises on a broker listener that kbroker does not serve, and why. A client
# reads their absence from ApiVersions and fails at once (Java: UnsupportedVersionException,
# librdkafka: _UNSUPPORTED_FEATURE, kafka-python: IncompatibleBrokerVersion); one sent anyway closes
# the connection, as Kafka does for an API not enabled on the listener.
ABSENT_APIS: dict[int, str] = {
    64: "single node: no broker to unregister",  # UnregisterBroker
    88: _STREAMS,  # StreamsGroupHeartbeat
    89: _STREAMS,  # StreamsGroupDescribe
}

# Supported features Kafka 4.3.1 reports (and finalizes) that kbroker does not, and why.
ABSENT_FEATURES: dict[str, str] = {
    "streams.version": _STREAMS,
}

# DescribeConfigs (BROKER resource) keys whose read-only flag differs from Kafka's, and why.
KNOWN_READ_ONLY_DIFFERENCES: dict[str, str] = {
    "listeners": "Kafka can add listeners at runtime; kbroker binds its listeners once at start-up",
}
# Static keys of the reference server.properties that kbroker does not know, and why.
ABSENT_STATIC_KEYS: dict[str, str] = {}
# Keys whose values differ by nature (ports, paths, the controller listener Kafka binds and kbroker does not).
VALUE_DIFFERS = {"listeners", "advertised.listeners", "log.dirs", "controller.quorum.voters"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _static_props(port: int, controller_port: int) -> dict[str, str]:
    """benchmarks/reference/kafka.sh's server.properties, for kbroker (its CONTROLLER listener is not bound)."""
    return {
        **SAME_STATIC_CONFIG,
        # benchmarks/reference/kafka.sh sets these for the reference broker too.
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "broker.rack": "rack-a",
    }


def _kafka_python_version(bootstrap: str) -> Any:
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
    try:
        return tuple(admin._client.check_version(timeout_ms=10000))  # what kafka-python inferred
    finally:
        admin.close()


def observe(bootstrap: str) -> dict[str, Any]:
    S = API_SPECS
    out: dict[str, Any] = {}
    with RawKafkaClient(bootstrap) as c:
        r = c.request(18, 4, S[18].request_class(client_software_name="kbroker-tests", client_software_version="1"))
        out["error"] = r.error_code
        out["apis"] = {a.api_key: (a.min_version, a.max_version) for a in r.api_keys}
        out["supported"] = {f.name: (f.min_version, f.max_version) for f in r.supported_features}
        out["finalized"] = {f.name: (f.min_version_level, f.max_version_level) for f in r.finalized_features}
        CT = S[19].request_class
        c.request(19, 7, CT(topics=[CT.CreatableTopic(name="lcr-topic", num_partitions=1, replication_factor=1,
                                                      assignments=[], configs=[])], timeout_ms=30000))
        LCR = S[74].request_class
        out["lcr_v0"] = _resources(c.request(74, 0, LCR()))
        for name, types in {"all": [], "topics": [2], "brokers": [4, 8], "groups": [32], "unknown": [2, 99],
                            "client_metrics": [16]}.items():
            out[f"lcr_v1_{name}"] = _resources(c.request(74, 1, LCR(resource_types=types)))
        D = S[32].request_class
        r = c.request(32, 4, D(resources=[D.DescribeConfigsResource(resource_type=4, resource_name="1",
                                                                    configuration_keys=None)],
                               include_synonyms=False, include_documentation=False))
        out["unsupported"] = _unsupported_paths(c, bootstrap)
        out["broker_configs"] = {x.name: (x.value, x.read_only, x.config_source, x.is_sensitive, x.config_type)
                                 for x in r.results[0].configs}
    out["kafka_python_version"] = _kafka_python_version(bootstrap)
    return out


def _closes(bootstrap: str, frame_body: bytes) -> bool:
    """Send one raw request (header + body, no size prefix) on a new connection: closed without an answer?"""
    with RawKafkaClient(bootstrap, timeout=10) as c:
        c.send_raw(struct.pack(">i", len(frame_body)) + frame_body)
        return c.is_closed_by_peer(5.0)


def _header(api_key: int, version: int, flexible: bool) -> bytes:
    # Request header v1 (client id as a nullable string), v2 adds an empty tagged-field section.
    return struct.pack(">hhih", api_key, version, 99, 5) + b"probe" + (b"\x00" if flexible else b"")


def _unsupported_paths(c: RawKafkaClient, bootstrap: str) -> dict[str, Any]:
    """How the broker answers what it does not serve (issue 19: clients must get a clear error)."""
    S = API_SPECS
    out: dict[str, Any] = {
        "unknown_api_key": _closes(bootstrap, _header(200, 0, False)),
        # BrokerRegistration (62) is a controller API: not enabled on a broker listener.
        "controller_only_api": _closes(bootstrap, _header(62, 0, True) + b"\x00" * 64),
        "metadata_version_too_high": _closes(bootstrap, _header(3, 99, True) + b"\x00" * 8),
    }
    DA, CA, XA = S[29].request_class, S[30].request_class, S[31].request_class
    for v in (1, 3):
        r = c.request(29, v, DA(resource_type_filter=1, pattern_type_filter=3, operation=1, permission_type=1))
        out[f"describe_acls_v{v}"] = (r.error_code, r.error_message, r.resources)
    creations = [CA.AclCreation(resource_type=2, resource_name=n, resource_pattern_type=3, principal="User:a",
                                host="*", operation=3, permission_type=3) for n in ("t", "u")]
    out["create_acls"] = [(x.error_code, x.error_message) for x in c.request(30, 3, CA(creations=creations)).results]
    filters = [XA.DeleteAclsFilter(resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
                                   principal_filter=None, host_filter=None, operation=1, permission_type=1)]
    out["delete_acls"] = [(x.error_code, x.error_message, x.matching_acls)
                          for x in c.request(31, 3, XA(filters=filters)).filter_results]
    with RawKafkaClient(bootstrap, timeout=10) as bad:
        bad.send(29, 3, DA(resource_type_filter=0, pattern_type_filter=3, operation=1, permission_type=1))
        out["describe_acls_unknown_filter_closes"] = bad.is_closed_by_peer(5.0)
    return out


def _resources(r: Any) -> tuple[int, list[tuple[int, str]]]:
    # Kafka lists topics in its hash set's order: compare the topics as a sorted run.
    return r.error_code, sorted((x.resource_type, x.resource_name) for x in r.config_resources)


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    why = reference_unavailable_reason()
    if why:
        pytest.fail(f"the reference Kafka broker is needed for the differential suite: {why}")
    bootstrap, stop = start_reference_kafka(tmp_path_factory.mktemp("kafka"), overrides={"broker.rack": "rack-a"})
    try:
        return observe(bootstrap)
    finally:
        stop()


@pytest.fixture(scope="module")
def ours(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from tests.support.broker import KBroker

    port = _free_port()
    broker = KBroker(Path(tmp_path_factory.mktemp("kbroker")), _static_props(port, _free_port()), port=port)
    broker.start()
    try:
        return observe(broker.bootstrap)
    finally:
        broker.stop()


def test_every_api_kbroker_serves_has_kafkas_range(kafka: dict[str, Any], ours: dict[str, Any]) -> None:
    assert ours["error"] == kafka["error"] == 0
    extra = set(ours["apis"]) - set(kafka["apis"])
    assert not extra, f"kbroker advertises APIs Kafka 4.3.1 does not: {sorted(extra)}"
    differing = {API_SPECS[k].name: (ours["apis"][k], kafka["apis"][k])
                 for k in ours["apis"] if ours["apis"][k] != kafka["apis"][k]}
    assert not differing, f"(kbroker, Kafka) ranges differ: {differing}"


def test_the_apis_kbroker_leaves_out_are_exactly_the_listed_ones(kafka: dict[str, Any], ours: dict[str, Any]) -> None:
    absent = set(kafka["apis"]) - set(ours["apis"])
    assert {API_SPECS[k].name for k in absent - set(ABSENT_APIS)} == set(), "unlisted absent APIs"
    assert {API_SPECS[k].name for k in set(ABSENT_APIS) - absent} == set(), "ABSENT_APIS is stale"


def test_features(kafka: dict[str, Any], ours: dict[str, Any]) -> None:
    for kind in ("supported", "finalized"):
        common = set(ours[kind]) & set(kafka[kind])
        assert {k: ours[kind][k] for k in common} == {k: kafka[kind][k] for k in common}, kind
        assert not set(ours[kind]) - set(kafka[kind]), kind
    assert set(kafka["supported"]) - set(ours["supported"]) == set(ABSENT_FEATURES)
    assert set(kafka["finalized"]) - set(ours["finalized"]) <= set(ABSENT_FEATURES)


def test_kafka_python_infers_the_same_release(kafka: dict[str, Any], ours: dict[str, Any]) -> None:
    assert kafka["kafka_python_version"] == (4, 3)
    assert ours["kafka_python_version"] == kafka["kafka_python_version"]


@pytest.mark.parametrize("key", ["lcr_v0", "lcr_v1_all", "lcr_v1_topics", "lcr_v1_brokers", "lcr_v1_groups",
                                 "lcr_v1_unknown", "lcr_v1_client_metrics"])
def test_list_config_resources(key: str, kafka: dict[str, Any], ours: dict[str, Any]) -> None:
    assert ours[key] == kafka[key]


def test_broker_static_configs_have_kafkas_source_type_and_read_only_flag(
    kafka: dict[str, Any], ours: dict[str, Any]
) -> None:
    theirs, mine = kafka["broker_configs"], ours["broker_configs"]
    static = {k for k, v in theirs.items() if v[2] == 4}  # STATIC_BROKER_CONFIG in Kafka's answer
    assert "advertised.listeners" in static and "broker.rack" in static
    missing = static - set(mine)
    assert missing == set(ABSENT_STATIC_KEYS), f"static keys kbroker does not report: {sorted(missing)}"
    for name in sorted(static - missing - {"min.insync.replicas"}):  # ELR writes a cluster default in Kafka (test_vs_kafka)
        value, read_only, source, sensitive, config_type = mine[name]
        k_value, k_read_only, k_source, k_sensitive, k_config_type = theirs[name]
        assert (source, config_type, sensitive) == (k_source, k_config_type, k_sensitive), name
        if name not in KNOWN_READ_ONLY_DIFFERENCES:
            assert read_only == k_read_only, name
        if name not in VALUE_DIFFERS:
            assert value == k_value, name
    # Every key both report has Kafka's type, read-only flag and sensitivity.
    for name in sorted(set(theirs) & set(mine)):
        flags = (mine[name][1], mine[name][3], mine[name][4])
        k_flags = (theirs[name][1], theirs[name][3], theirs[name][4])
        if name in KNOWN_READ_ONLY_DIFFERENCES:
            flags, k_flags = flags[1:], k_flags[1:]
        assert flags == k_flags, name
    assert {n for n in KNOWN_READ_ONLY_DIFFERENCES if mine[n][1] == theirs[n][1]} == set(), "stale difference"


def test_what_is_not_served_fails_as_on_kafka(kafka: dict[str, Any], ours: dict[str, Any]) -> None:
    """An unknown API key, an API not enabled on a broker listener and a version above the range close
    the connection on both; ACL requests without an authorizer answer SECURITY_DISABLED on both."""
    assert kafka["unsupported"]["unknown_api_key"] is True
    assert ours["unsupported"] == kafka["unsupported"]
