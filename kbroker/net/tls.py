"""TLS for SSL and SASL_SSL listeners: `TlsSettings` (Kafka's `ssl.*` keys) -> `ssl.SSLContext`.

`ssl.keystore.location` is a store of `ssl.keystore.type`: `JKS` (Kafka's default) or `PKCS12`
opened with `ssl.keystore.password` (the key with `ssl.key.password`, else the store's password),
read by kbroker.client.ssl_stores; or `PEM` (KIP-651), one file with the private key and the
certificate chain (`ssl.key.password` decrypts an encrypted key). The PEM text may also be inline in
`ssl.keystore.key` and `ssl.keystore.certificate.chain`. Trusted CAs: `ssl.truststore.location` of
`ssl.truststore.type` (JKS, PKCS12 with an optional `ssl.truststore.password`, PEM) or inline
`ssl.truststore.certificates`. `ssl.client.auth`: `required` (mTLS:
a client without a trusted certificate fails the handshake), `requested` (verified when sent),
`none`. `ssl.enabled.protocols` bounds the TLS versions (TLSv1.2, TLSv1.3); `ssl.cipher.suites`
are OpenSSL names for TLS 1.2.

The fetch path sends file regions with `os.sendfile` on plaintext connections only: bytes on a TLS
connection must pass through OpenSSL, so the response writer reads and writes them (as Kafka does).
"""

from __future__ import annotations

import os
import ssl
import tempfile
from dataclasses import dataclass

from kbroker.client.ssl_stores import SslStoreError, load_keystore_into, load_truststore_into

_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}


@dataclass(frozen=True)
class TlsSettings:
    keystore_location: str | None = None  # ssl.keystore.location (a store of keystore_type)
    key_password: str | None = None  # ssl.key.password
    keystore_type: str = "PEM"  # ssl.keystore.type: JKS, PKCS12, PEM (the wiring passes Kafka's default JKS)
    keystore_password: str | None = None  # ssl.keystore.password (JKS, PKCS12)
    truststore_type: str = "PEM"  # ssl.truststore.type
    truststore_password: str | None = None  # ssl.truststore.password (optional)
    keystore_key: str | None = None  # ssl.keystore.key (inline PEM)
    keystore_certificate_chain: str | None = None  # ssl.keystore.certificate.chain (inline PEM)
    truststore_location: str | None = None  # ssl.truststore.location (PEM)
    truststore_certificates: str | None = None  # ssl.truststore.certificates (inline PEM)
    client_auth: str = "none"  # ssl.client.auth
    enabled_protocols: tuple[str, ...] = ("TLSv1.2", "TLSv1.3")  # ssl.enabled.protocols
    cipher_suites: tuple[str, ...] = ()  # ssl.cipher.suites
    principal_mapping_rules: str = "DEFAULT"  # ssl.principal.mapping.rules


class TlsConfigError(ValueError):
    pass


def build_server_context(settings: TlsSettings) -> ssl.SSLContext:
    """The server-side SSLContext of one listener; raises TlsConfigError naming the bad key."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    versions = [_VERSIONS[p] for p in settings.enabled_protocols if p in _VERSIONS]
    if not versions:
        raise TlsConfigError(f"ssl.enabled.protocols {list(settings.enabled_protocols)}: none of TLSv1.2, TLSv1.3")
    ctx.minimum_version, ctx.maximum_version = min(versions), max(versions)
    if settings.cipher_suites:
        try:
            ctx.set_ciphers(":".join(settings.cipher_suites))
        except ssl.SSLError as e:
            raise TlsConfigError(f"ssl.cipher.suites: {e}") from None
    password = settings.key_password
    try:
        if settings.keystore_location:
            load_keystore_into(ctx, settings.keystore_type, settings.keystore_location,
                               settings.keystore_password, password)
        elif settings.keystore_key and settings.keystore_certificate_chain:
            # The ssl module loads keys from files only: a private temporary file, removed at once.
            fd, path = tempfile.mkstemp(prefix="kbroker-key-", suffix=".pem")
            try:
                with os.fdopen(fd, "w") as f:
                    f.write(settings.keystore_key.strip() + "\n" + settings.keystore_certificate_chain.strip() + "\n")
                ctx.load_cert_chain(path, password=password)
            finally:
                os.unlink(path)
        else:
            raise TlsConfigError("an SSL listener needs ssl.keystore.location or "
                                 "ssl.keystore.key and ssl.keystore.certificate.chain")
    except SslStoreError as e:
        raise TlsConfigError(str(e)) from None
    except (ssl.SSLError, OSError) as e:
        raise TlsConfigError(f"cannot load the keystore (ssl.keystore.*, ssl.key.password): {e}") from None
    try:
        if settings.truststore_location:
            load_truststore_into(ctx, settings.truststore_type, settings.truststore_location,
                                 settings.truststore_password)
        elif settings.truststore_certificates:
            ctx.load_verify_locations(cadata=settings.truststore_certificates)
    except SslStoreError as e:
        raise TlsConfigError(str(e)) from None
    except (ssl.SSLError, OSError) as e:
        raise TlsConfigError(f"cannot load the truststore (ssl.truststore.*): {e}") from None
    auth = settings.client_auth.lower()
    if auth == "required":
        ctx.verify_mode = ssl.CERT_REQUIRED
    elif auth == "requested":
        ctx.verify_mode = ssl.CERT_OPTIONAL
    else:
        ctx.verify_mode = ssl.CERT_NONE
    if ctx.verify_mode != ssl.CERT_NONE and not (settings.truststore_location or settings.truststore_certificates):
        raise TlsConfigError(f"ssl.client.auth={auth} needs a truststore (ssl.truststore.location or "
                             "ssl.truststore.certificates)")
    return ctx
