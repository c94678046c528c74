"""Test certificates made on the fly with the openssl command line: a CA, a broker and client certs.

`make_pki(dir)` writes PEM files (no new Python package needed) and returns their paths. The broker's
keystore is Kafka's PEM form (`ssl.keystore.type=PEM`): private key and certificate in one file.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Pki:
    ca_cert: Path
    ca_key: Path
    broker_keystore: Path  # key + cert (PEM)
    broker_key: Path
    broker_cert: Path
    client_key: Path
    client_cert: Path
    encrypted_broker_keystore: Path  # key encrypted with KEY_PASSWORD + cert
    other_client_key: Path  # signed by another CA: untrusted
    other_client_cert: Path


KEY_PASSWORD = "key-secret"
CLIENT_SUBJECT = "/C=US/ST=CA/L=Palo Alto/O=Acme/OU=Eng/CN=alice"


def _run(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def _sign(d: Path, name: str, subject: str, ca_cert: Path, ca_key: Path, san: str | None = None) -> tuple[Path, Path]:
    key, csr, cert = d / f"{name}.key", d / f"{name}.csr", d / f"{name}.crt"
    _run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr), "-subj", subject)
    args = ["x509", "-req", "-in", str(csr), "-CA", str(ca_cert), "-CAkey", str(ca_key), "-CAcreateserial",
            "-out", str(cert), "-days", "2", "-sha256"]
    if san:
        ext = d / f"{name}.ext"
        ext.write_text(f"subjectAltName={san}\n")
        args += ["-extfile", str(ext)]
    _run(*args)
    return key, cert


def _ca(d: Path, name: str) -> tuple[Path, Path]:
    key, cert = d / f"{name}.key", d / f"{name}.crt"
    _run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
         "-days", "2", "-subj", f"/CN={name}")
    return key, cert


def make_pki(d: Path) -> Pki:
    d.mkdir(parents=True, exist_ok=True)
    ca_key, ca_cert = _ca(d, "test-ca")
    broker_key, broker_cert = _sign(d, "broker", "/CN=localhost", ca_cert, ca_key,
                                    san="DNS:localhost,IP:127.0.0.1")
    client_key, client_cert = _sign(d, "client", CLIENT_SUBJECT, ca_cert, ca_key)
    other_ca_key, other_ca_cert = _ca(d, "other-ca")
    other_key, other_cert = _sign(d, "other-client", "/CN=mallory", other_ca_cert, other_ca_key)
    keystore = d / "broker-keystore.pem"
    keystore.write_text(broker_key.read_text() + broker_cert.read_text())
    enc_key = d / "broker-enc.key"
    _run("pkcs8", "-topk8", "-in", str(broker_key), "-out", str(enc_key), "-passout", f"pass:{KEY_PASSWORD}")
    enc_keystore = d / "broker-enc-keystore.pem"
    enc_keystore.write_text(enc_key.read_text() + broker_cert.read_text())
    return Pki(ca_cert, ca_key, keystore, broker_key, broker_cert, client_key, client_cert, enc_keystore,
               other_key, other_cert)
