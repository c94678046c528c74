"""Java key and trust stores made with the JDK's `keytool`, as Kafka's documentation makes them:
a CA (PKCS12), then for the broker and a client a keystore in PKCS12 and in JKS (key pair, CSR
signed by the CA, the CA and the signed certificate imported), and truststores holding the CA."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

STORE_PASSWORD = "store-secret"
JKS_KEY_PASSWORD = "jks-key-secret"  # a JKS key may have its own password (ssl.key.password)
CA_PASSWORD = "ca-secret"


@dataclass(frozen=True)
class Stores:
    ca_pem: Path
    broker_p12: Path
    broker_jks: Path
    client_p12: Path
    client_jks: Path
    client_cert_pem: Path
    client_key_pem: Path
    trust_p12: Path
    trust_jks: Path


def keytool_unavailable_reason() -> str | None:
    return None if shutil.which("keytool") else "keytool (a JDK) is not on PATH"


def _keytool(*args: str) -> None:
    r = subprocess.run(["keytool", *args], capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise RuntimeError(f"keytool {' '.join(args[:1])} failed: {r.stdout}{r.stderr}")


def _keystore(d: Path, name: str, store_type: str, dname: str, key_password: str, ca: Path) -> Path:
    ext = "p12" if store_type == "PKCS12" else "jks"
    ks, csr, crt = d / f"{name}.{ext}", d / f"{name}-{ext}.csr", d / f"{name}-{ext}.crt"
    base = ["-keystore", str(ks), "-storepass", STORE_PASSWORD]
    _keytool("-genkeypair", "-alias", name, "-keyalg", "RSA", "-keysize", "2048", "-dname", dname, "-validity", "2",
             "-storetype", store_type, "-keypass", key_password, *base)
    _keytool("-certreq", "-alias", name, "-file", str(csr), "-keypass", key_password, *base)
    _keytool("-gencert", "-alias", "ca", "-keystore", str(ca), "-storepass", CA_PASSWORD, "-infile", str(csr),
             "-outfile", str(crt), "-rfc", "-validity", "2", "-ext", "SAN=dns:localhost,ip:127.0.0.1")
    _keytool("-importcert", "-alias", "ca", "-file", str(d / "ca.pem"), "-noprompt", *base)
    _keytool("-importcert", "-alias", name, "-file", str(crt), "-keypass", key_password, "-noprompt", *base)
    return ks


def make_stores(d: Path) -> Stores:
    d.mkdir(parents=True, exist_ok=True)
    ca = d / "ca.p12"
    _keytool("-genkeypair", "-alias", "ca", "-keyalg", "RSA", "-keysize", "2048", "-dname", "CN=test-ca",
             "-ext", "bc:c", "-validity", "2", "-storetype", "PKCS12", "-keystore", str(ca),
             "-storepass", CA_PASSWORD)
    _keytool("-exportcert", "-rfc", "-alias", "ca", "-keystore", str(ca), "-storepass", CA_PASSWORD,
             "-file", str(d / "ca.pem"))
    broker_p12 = _keystore(d, "broker", "PKCS12", "CN=localhost", STORE_PASSWORD, ca)
    broker_jks = _keystore(d, "broker", "JKS", "CN=localhost", JKS_KEY_PASSWORD, ca)
    client_p12 = _keystore(d, "client", "PKCS12", "CN=alice,OU=Eng,O=Acme", STORE_PASSWORD, ca)
    client_jks = _keystore(d, "client", "JKS", "CN=alice,OU=Eng,O=Acme", JKS_KEY_PASSWORD, ca)
    trust = {}
    for store_type, ext in (("PKCS12", "p12"), ("JKS", "jks")):
        trust[ext] = d / f"truststore.{ext}"
        _keytool("-importcert", "-alias", "ca", "-file", str(d / "ca.pem"), "-noprompt", "-storetype", store_type,
                 "-keystore", str(trust[ext]), "-storepass", STORE_PASSWORD)
    # librdkafka reads PEM: the client's key and certificate, exported with openssl from the PKCS12.
    client_key, client_cert = d / "client.key", d / "client-p12.crt"
    subprocess.run(["openssl", "pkcs12", "-in", str(client_p12), "-nocerts", "-nodes", "-out", str(client_key),
                    "-passin", f"pass:{STORE_PASSWORD}"], check=True, capture_output=True)
    return Stores(d / "ca.pem", broker_p12, broker_jks, client_p12, client_jks, client_cert, client_key,
                  trust["p12"], trust["jks"])
