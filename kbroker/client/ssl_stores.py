"""Java key and trust stores (JKS, PKCS12) and PEM, read into what Python's `ssl` module loads.

Kafka's `DefaultSslEngineFactory` opens `ssl.keystore.location` / `ssl.truststore.location` as a
`java.security.KeyStore` of `ssl.keystore.type` / `ssl.truststore.type` (`JKS` by default, `PKCS12`,
or `PEM` since KIP-651). Python's `ssl` loads PEM only, and keys only from a file, so a store is read
here into PEM text:

- PKCS12 (RFC 7292): the `cryptography` package (OpenSSL's PKCS12 parser: PBES2/AES and the legacy
  3DES/RC2 bags, MACs with SHA-1 or SHA-256, as `keytool` writes them).
- JKS (Sun's proprietary format): read here, it is small. Magic 0xFEEDFEED, version 1 or 2, entries
  (private key: an EncryptedPrivateKeyInfo under Sun's key protector, OID 1.3.6.1.4.1.42.2.17.1.1,
  a SHA-1 keystream; trusted certificate: DER), then SHA-1(password UTF-16BE, "Mighty Aphrodite",
  the bytes) guarding the whole file. JCEKS (0xCECECECE) is not read.

Passwords as Kafka: a keystore needs `ssl.keystore.password` ("SSL key store is specified, but key
store password is not specified"); the key's password is `ssl.key.password`, else the keystore's.
A truststore password is optional: without one a JKS's integrity is not checked (as Java does).
A bad password or a damaged store raises `SslStoreError` naming the file and type (Kafka's
"Failed to load SSL keystore <path> of type <type>"), never a traceback.

The private key never reaches the disk in clear: `load_key_material_into` writes it re-encrypted
under a one-time random password to a private (0600) temporary file that is removed as soon as
OpenSSL has read it.

Why in client/: both the listeners (net/tls.py) and the outbound channels (client/security.py)
read stores, and client/ is the lower layer. Imports nothing of kbroker.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import ssl
import struct
import tempfile
from dataclasses import dataclass

JKS, PKCS12, PEM = "JKS", "PKCS12", "PEM"
STORE_TYPES = (JKS, PKCS12, PEM)

_JKS_MAGIC = 0xFEEDFEED
_JCEKS_MAGIC = 0xCECECECE
_JKS_PRIVATE_KEY, _JKS_TRUSTED_CERT = 1, 2
# Sun's JKS key protector (sun.security.provider.KeyProtector).
_SUN_KEY_PROTECTOR_OID = bytes.fromhex("2b060104012a02110101")  # 1.3.6.1.4.1.42.2.17.1.1 (DER body)


class SslStoreError(ValueError):
    """A store that cannot be read: wrong password, wrong type, damaged or missing file."""


@dataclass(frozen=True)
class KeyMaterial:
    """A private key (PKCS#8 PEM, unencrypted, kept in memory) and its certificate chain (PEM, leaf first)."""

    key_pem: bytes
    chain_pem: bytes

    def __repr__(self) -> str:  # never print a key
        return f"KeyMaterial(chain={self.chain_pem.count(b'BEGIN CERTIFICATE')} certificates)"


def normalize_store_type(store_type: str | None, default: str = JKS) -> str:
    t = (store_type or default).strip().upper()
    return "PKCS12" if t in ("PKCS12", "P12", "PFX") else t


# --- JKS ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class JksStore:
    private_keys: tuple[tuple[str, bytes, tuple[bytes, ...]], ...]  # alias, protected key, DER chain
    trusted_certs: tuple[tuple[str, bytes], ...]  # alias, DER certificate


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise SslStoreError("truncated store")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def u16(self) -> int:
        return int(struct.unpack(">H", self.take(2))[0])

    def u32(self) -> int:
        return int(struct.unpack(">I", self.take(4))[0])

    def utf(self) -> str:
        return self.take(self.u16()).decode("utf-8", "replace")  # Java's modified UTF-8: ASCII aliases agree


def _password_bytes(password: str) -> bytes:
    return password.encode("utf-16-be")


def parse_jks(data: bytes, store_password: str | None) -> JksStore:
    """The entries of a JKS file; its integrity digest is checked when a password is given."""
    r = _Reader(data)
    magic = r.u32()
    if magic == _JCEKS_MAGIC:
        raise SslStoreError("a JCEKS store (kbroker reads JKS and PKCS12)")
    if magic != _JKS_MAGIC:
        raise SslStoreError("not a JKS store (bad magic number)")
    version = r.u32()
    if version not in (1, 2):
        raise SslStoreError(f"unknown JKS version {version}")
    keys: list[tuple[str, bytes, tuple[bytes, ...]]] = []
    trusted: list[tuple[str, bytes]] = []
    for _ in range(r.u32()):
        tag, alias = r.u32(), r.utf()
        r.take(8)  # creation date
        if tag == _JKS_PRIVATE_KEY:
            protected = r.take(r.u32())
            chain = []
            for _ in range(r.u32()):
                if version == 2:
                    r.utf()  # certificate type, "X.509"
                chain.append(r.take(r.u32()))
            keys.append((alias, protected, tuple(chain)))
        elif tag == _JKS_TRUSTED_CERT:
            if version == 2:
                r.utf()
            trusted.append((alias, r.take(r.u32())))
        else:
            raise SslStoreError(f"unknown JKS entry tag {tag}")
    body_end = r.pos
    digest = r.take(20)
    if store_password is not None:
        expected = hashlib.sha1(_password_bytes(store_password) + b"Mighty Aphrodite" + data[:body_end]).digest()
        if not hmac.compare_digest(expected, digest):
            raise SslStoreError("Keystore was tampered with, or password was incorrect")
    return JksStore(tuple(keys), tuple(trusted))


def _der_tlv(data: bytes, pos: int) -> tuple[int, int, int]:
    """(tag, start of the value, end of the value) of the DER element at `pos`."""
    if pos + 2 > len(data):
        raise SslStoreError("truncated DER")
    tag, length = data[pos], data[pos + 1]
    pos += 2
    if length & 0x80:
        n = length & 0x7F
        if n == 0 or n > 4 or pos + n > len(data):
            raise SslStoreError("bad DER length")
        length = int.from_bytes(data[pos:pos + n], "big")
        pos += n
    if pos + length > len(data):
        raise SslStoreError("truncated DER")
    return tag, pos, pos + length


def recover_jks_key(protected: bytes, key_password: str) -> bytes:
    """The PKCS#8 PrivateKeyInfo (DER) under Sun's key protector: EncryptedPrivateKeyInfo
    { AlgorithmIdentifier { 1.3.6.1.4.1.42.2.17.1.1 }, OCTET STRING salt(20) | key XOR stream | check(20) }."""
    tag, start, end = _der_tlv(protected, 0)
    if tag != 0x30:
        raise SslStoreError("bad protected key")
    tag, alg_start, alg_end = _der_tlv(protected, start)
    otag, ostart, oend = _der_tlv(protected, alg_start)
    if tag != 0x30 or otag != 0x06 or protected[ostart:oend] != _SUN_KEY_PROTECTOR_OID:
        raise SslStoreError("the key is protected by an algorithm other than Sun's JKS key protector")
    tag, enc_start, enc_end = _der_tlv(protected, alg_end)
    if tag != 0x04:
        raise SslStoreError("bad protected key")
    encrypted = protected[enc_start:enc_end]
    if len(encrypted) < 40:
        raise SslStoreError("bad protected key")
    salt, body, check = encrypted[:20], encrypted[20:-20], encrypted[-20:]
    password = _password_bytes(key_password)
    stream = bytearray()
    digest = salt
    while len(stream) < len(body):
        digest = hashlib.sha1(password + digest).digest()
        stream += digest
    plain = bytes(a ^ b for a, b in zip(body, stream, strict=False))
    if not hmac.compare_digest(hashlib.sha1(password + plain).digest(), check):
        raise SslStoreError("Cannot recover key: the key password (ssl.key.password) is incorrect")
    return plain


# --- loading -----------------------------------------------------------------------------------


def _der_cert_to_pem(der: bytes) -> bytes:
    return ssl.DER_cert_to_PEM_cert(der).encode("ascii")


def _read(location: str) -> bytes:
    try:
        with open(location, "rb") as f:
            return f.read()
    except OSError as e:
        raise SslStoreError(e.strerror or str(e)) from None


def load_key_material(store_type: str | None, location: str, store_password: str | None,
                      key_password: str | None) -> KeyMaterial:
    """The private key and chain of a JKS or PKCS12 keystore (the first private-key entry)."""
    t = normalize_store_type(store_type)
    if store_password is None:
        raise SslStoreError("SSL key store is specified, but key store password is not specified.")
    key_pw = key_password if key_password is not None else store_password
    try:
        data = _read(location)
        if t == JKS:
            return _jks_key_material(data, store_password, key_pw)
        if t == PKCS12:
            return _pkcs12_key_material(data, store_password, key_pw)
        raise SslStoreError(f"unknown keystore type (kbroker reads {', '.join(STORE_TYPES)})")
    except SslStoreError as e:
        raise SslStoreError(f"Failed to load SSL keystore {location} of type {t}: {e}") from None


def _jks_key_material(data: bytes, store_password: str, key_password: str) -> KeyMaterial:
    from cryptography.hazmat.primitives import serialization

    store = parse_jks(data, store_password)
    if not store.private_keys:
        raise SslStoreError("the keystore has no private key entry")
    _, protected, chain = store.private_keys[0]
    der = recover_jks_key(protected, key_password)
    try:
        key = serialization.load_der_private_key(der, password=None)
    except ValueError as e:
        raise SslStoreError(f"unreadable private key: {e}") from None
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return KeyMaterial(key_pem, b"".join(_der_cert_to_pem(c) for c in chain))


def _pkcs12(data: bytes, password: str | None) -> object:
    from cryptography.hazmat.primitives.serialization import pkcs12

    try:
        return pkcs12.load_pkcs12(data, password.encode("utf-8") if password is not None else None)
    except ValueError:
        raise SslStoreError("keystore password was incorrect (or the file is not PKCS12)") from None


def _pkcs12_key_material(data: bytes, store_password: str, key_password: str) -> KeyMaterial:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization.pkcs12 import PKCS12KeyAndCertificates

    # A PKCS12 store has one password in practice (keytool refuses a different key password).
    try:
        p12 = _pkcs12(data, store_password)
    except SslStoreError:
        if key_password == store_password:
            raise
        p12 = _pkcs12(data, key_password)
    assert isinstance(p12, PKCS12KeyAndCertificates)
    if p12.key is None or p12.cert is None:
        raise SslStoreError("the keystore has no private key entry")
    key_pem = p12.key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption())
    certs = [p12.cert.certificate, *(c.certificate for c in p12.additional_certs)]
    pems = dict.fromkeys(c.public_bytes(serialization.Encoding.PEM) for c in certs)  # the CA may be there twice
    return KeyMaterial(key_pem, b"".join(pems))


def load_trusted_certificates(store_type: str | None, location: str, password: str | None) -> str:
    """The trusted certificates of a JKS or PKCS12 truststore, as PEM text (`cadata`)."""
    t = normalize_store_type(store_type)
    try:
        data = _read(location)
        if t == JKS:
            store = parse_jks(data, password)
            ders = [der for _, der in store.trusted_certs] or [c for _, _, chain in store.private_keys for c in chain]
        elif t == PKCS12:
            from cryptography.hazmat.primitives import serialization
            from cryptography.hazmat.primitives.serialization.pkcs12 import PKCS12KeyAndCertificates

            p12 = _pkcs12(data, password)
            assert isinstance(p12, PKCS12KeyAndCertificates)
            certs = ([p12.cert] if p12.cert is not None else []) + list(p12.additional_certs)
            ders = [c.certificate.public_bytes(serialization.Encoding.DER) for c in certs]
        else:
            raise SslStoreError(f"unknown truststore type (kbroker reads {', '.join(STORE_TYPES)})")
        if not ders:
            raise SslStoreError("the truststore holds no certificate")
        return "".join(ssl.DER_cert_to_PEM_cert(d) for d in ders)
    except SslStoreError as e:
        raise SslStoreError(f"Failed to load SSL truststore {location} of type {t}: {e}") from None


def load_key_material_into(ctx: ssl.SSLContext, material: KeyMaterial) -> None:
    """`ctx.load_cert_chain` from memory: the key re-encrypted under a one-time password in a private
    temporary file (mkstemp: 0600), removed once OpenSSL has read it."""
    from cryptography.hazmat.primitives import serialization

    one_time = secrets.token_hex(16)
    key = serialization.load_pem_private_key(material.key_pem, password=None)
    encrypted = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.BestAvailableEncryption(one_time.encode("ascii")))
    fd, path = tempfile.mkstemp(prefix="kbroker-key-", suffix=".pem")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(encrypted + material.chain_pem)
        ctx.load_cert_chain(path, password=one_time)
    finally:
        os.unlink(path)


def load_keystore_into(ctx: ssl.SSLContext, store_type: str | None, location: str, store_password: str | None,
                       key_password: str | None) -> None:
    """Load `ssl.keystore.location` of `ssl.keystore.type` (PEM: one file, key + chain) into `ctx`."""
    if normalize_store_type(store_type) == PEM:
        ctx.load_cert_chain(location, password=key_password)
    else:
        load_key_material_into(ctx, load_key_material(store_type, location, store_password, key_password))


def load_truststore_into(ctx: ssl.SSLContext, store_type: str | None, location: str, password: str | None) -> None:
    """Trust the certificates of `ssl.truststore.location` of `ssl.truststore.type`."""
    if normalize_store_type(store_type) == PEM:
        ctx.load_verify_locations(cafile=location)
    else:
        ctx.load_verify_locations(cadata=load_trusted_certificates(store_type, location, password))
