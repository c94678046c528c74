"""Spark's own Kafka source reads a kbroker SASL_SSL listener with `kafka.`-prefixed options (issue 15).

A kbroker with a PLAINTEXT listener (inter-broker, and where the SCRAM user is created with
AlterUserScramCredentials) and a SASL_SSL listener (PEM keystore from tests/security/certs.py,
SCRAM-SHA-512 only). confluent-kafka produces a known set of records over SASL_SSL; one
spark-submit of tests/spark/sasl_ssl_job.py then batch-reads the topic with
`kafka.security.protocol=SASL_SSL`, `kafka.sasl.mechanism=SCRAM-SHA-512`, `kafka.sasl.jaas.config`
(ScramLoginModule) and a PKCS12 truststore made by `keytool`, and every record (value, partition,
offset) must come back exactly once. In the same job a wrong password must make the read fail with
Kafka's authentication error within a bounded time (not hang).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.security.certs import Pki, make_pki
from tests.spark.spark_helpers import spark_submit
from tests.support.broker import KBroker, free_port

pytestmark = pytest.mark.spark

JOB = Path(__file__).resolve().parent / "sasl_ssl_job.py"
USER, PASSWORD = "spark-reader", "spark-s3cret"
TRUST_PASSWORD = "trust-secret"
TOPIC = "sasl-ssl-source"
PARTITIONS = 3
RECORDS = 60


def _jaas(password: str) -> str:
    return (f'org.apache.kafka.common.security.scram.ScramLoginModule required username="{USER}" '
            f'password="{password}";')


@dataclass
class SecureBroker:
    broker: KBroker
    pki: Pki
    sasl_ssl_port: int

    @property
    def sasl_ssl(self) -> str:
        return f"127.0.0.1:{self.sasl_ssl_port}"

    def client_conf(self) -> dict[str, str]:
        return {"bootstrap.servers": self.sasl_ssl, "security.protocol": "SASL_SSL",
                "ssl.ca.location": str(self.pki.ca_cert), "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.username": USER, "sasl.password": PASSWORD}


@pytest.fixture(scope="module")
def secure(spark_ready: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    d = tmp_path_factory.mktemp("spark-sasl-ssl")
    pki = make_pki(d / "pki")
    plain_port, sasl_port = free_port(), free_port()
    overrides = {
        "listeners": f"PLAINTEXT://127.0.0.1:{plain_port},SASL_SSL://127.0.0.1:{sasl_port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL",
        "inter.broker.listener.name": "PLAINTEXT",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(pki.broker_keystore),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(pki.ca_cert),
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "num.partitions": str(PARTITIONS),
    }
    broker = KBroker(d, overrides=overrides, port=plain_port)
    with broker:
        yield SecureBroker(broker, pki, sasl_port)


def _create_user_and_topic(secure: SecureBroker) -> None:
    from confluent_kafka.admin import (
        AdminClient,
        NewTopic,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient({"bootstrap.servers": secure.broker.bootstrap})
    upsert = UserScramCredentialUpsertion(USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192),
                                          PASSWORD.encode())
    for fut in admin.alter_user_scram_credentials([upsert]).values():
        fut.result(30)
    # Created over SASL_SSL as the SCRAM user (no authorizer: any authenticated user may).
    secure_admin = AdminClient(secure.client_conf())
    secure_admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(30)


def _produce_over_sasl_ssl(secure: SecureBroker) -> list[tuple[int, int, str]]:
    from confluent_kafka import Producer

    producer = Producer({**secure.client_conf(), "enable.idempotence": True})
    done: list[tuple[int, int, str]] = []
    errors: list[str] = []

    def cb(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            done.append((msg.partition(), msg.offset(), msg.value().decode()))

    for i in range(RECORDS):
        producer.produce(TOPIC, value=f"record-{i}-{'x' * (i % 7)}".encode(), partition=i % PARTITIONS,
                         on_delivery=cb)
    assert producer.flush(60) == 0 and not errors, errors
    return sorted(done)


def _pkcs12_truststore(secure: SecureBroker, d: Path) -> Path:
    if shutil.which("keytool") is None:
        pytest.skip("keytool (a JDK) is not on PATH")
    store = d / "truststore.p12"
    subprocess.run(["keytool", "-importcert", "-alias", "ca", "-file", str(secure.pki.ca_cert), "-noprompt",
                    "-storetype", "PKCS12", "-keystore", str(store), "-storepass", TRUST_PASSWORD],
                   check=True, capture_output=True, timeout=120)
    return store


def test_spark_kafka_source_reads_sasl_ssl_with_kafka_prefixed_options(secure: SecureBroker, tmp_path: Path) -> None:
    _create_user_and_topic(secure)
    produced = _produce_over_sasl_ssl(secure)
    assert len(produced) == RECORDS and {p for p, _, _ in produced} == set(range(PARTITIONS))
    truststore = _pkcs12_truststore(secure, tmp_path)
    security = {
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": _jaas(PASSWORD),
        "kafka.ssl.truststore.location": str(truststore),
        "kafka.ssl.truststore.password": TRUST_PASSWORD,
        "kafka.ssl.truststore.type": "PKCS12",
    }
    out = tmp_path / "result.json"
    # kbroker's pre-flight check probes the PLAINTEXT listener; the job itself only uses SASL_SSL.
    spark_submit(secure.broker.bootstrap, str(JOB),
                 [secure.sasl_ssl, TOPIC, json.dumps(security), _jaas("wrong-password"), str(out)],
                 tmp_path / "spark.log")
    result = json.loads(out.read_text())
    got = sorted((r["partition"], r["offset"], r["value"]) for r in result["rows"])
    assert got == produced  # every record, exactly once, with its offset and value

    wrong = result["wrong_password"]
    assert wrong["error"] is not None, f"a wrong password read {wrong.get('rows')} rows"
    assert "org.apache.kafka.common.errors.SaslAuthenticationException" in wrong["error"], wrong
    assert "SCRAM-SHA-512" in wrong["error"], wrong
    assert wrong["seconds"] < 60, wrong  # fails at once (1-2 s here), not after retries or a hang
    assert "Traceback" not in secure.broker.log_text()
