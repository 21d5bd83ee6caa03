"""Kafka's key and trust stores, read into PEM: a keystore gives this side's certificate
chain and private key, a truststore the certificates that peers' chains must lead to.

Types (ssl.keystore.type / ssl.truststore.type):
- PEM: a file (`*.location`) or the text itself (`ssl.keystore.certificate.chain` with
  `ssl.keystore.key`, `ssl.truststore.certificates`); an encrypted key is opened with
  ssl.key.password;
- PKCS12: a file opened with `*.password` (ssl.key.password, when given, for the key).
JKS, Java's own format, is refused: convert it with
`keytool -importkeystore -srckeystore x.jks -destkeystore x.p12 -deststoretype PKCS12`.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from logcore.errors import InvalidConfigError

STORE_TYPES = ("PEM", "PKCS12")


@dataclass(frozen=True)
class KeyMaterial:
    chain_pem: bytes      # this side's certificate, then its issuers
    key_pem: bytes        # its private key, unencrypted (kept in memory only)


def _serialization():
    from cryptography.hazmat.primitives import serialization
    return serialization


def _check_type(kind: str, setting: str, where: str) -> str:
    kind = (kind or "").strip().upper()
    if kind == "JKS":
        raise InvalidConfigError(
            f"{where}: {setting}=JKS is not supported: convert the store to PKCS12 (keytool -importkeystore"
            " -deststoretype PKCS12) or PEM")
    if kind not in STORE_TYPES:
        raise InvalidConfigError(f"{where}: {setting}={kind or '(empty)'}: must be PEM or PKCS12")
    return kind


def _read(path: str, setting: str, where: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise InvalidConfigError(f"{where}: {setting}={path}: cannot read it: {exc.strerror or exc}") from None


def _password(value: str | None) -> bytes | None:
    return value.encode() if value else None


def _key_pem(key) -> bytes:
    s = _serialization()
    return key.private_bytes(s.Encoding.PEM, s.PrivateFormat.PKCS8, s.NoEncryption())


def _certs_pem(certs) -> bytes:
    s = _serialization()
    return b"".join(c.public_bytes(s.Encoding.PEM) for c in certs)


def _load_key(data: bytes, password: str | None, what: str, where: str):
    s = _serialization()
    try:
        return s.load_pem_private_key(data, _password(password))
    except TypeError as exc:      # encrypted without a password, or a password for a plain key
        raise InvalidConfigError(f"{where}: the private key of {what}: {exc} (ssl.key.password)") from None
    except ValueError as exc:
        raise InvalidConfigError(f"{where}: the private key of {what} cannot be read: {exc}"
                                 " (a wrong ssl.key.password, or not a PEM key)") from None


def _pem_certs(data: bytes, what: str, where: str) -> list:
    from cryptography import x509
    try:
        certs = x509.load_pem_x509_certificates(data)
    except ValueError as exc:
        raise InvalidConfigError(f"{where}: {what} holds no readable PEM certificate: {exc}") from None
    return certs


def load_keystore(settings: dict[str, str], where: str) -> KeyMaterial | None:
    """This side's certificate and key from the ssl.keystore.* settings, or None when none is set."""
    location = settings.get("ssl.keystore.location") or ""
    chain = settings.get("ssl.keystore.certificate.chain") or ""
    inline_key = settings.get("ssl.keystore.key") or ""
    if not (location or chain or inline_key):
        return None
    kind = _check_type(settings.get("ssl.keystore.type") or ("PEM" if chain else "PKCS12"),
                       "ssl.keystore.type", where)
    key_password = settings.get("ssl.key.password") or None
    if chain or inline_key:
        if location:
            raise InvalidConfigError(f"{where}: give ssl.keystore.location or ssl.keystore.certificate.chain"
                                     " with ssl.keystore.key, not both")
        if kind != "PEM" or not (chain and inline_key):
            raise InvalidConfigError(f"{where}: ssl.keystore.certificate.chain and ssl.keystore.key go together,"
                                     " with ssl.keystore.type=PEM")
        certs = _pem_certs(chain.encode(), "ssl.keystore.certificate.chain", where)
        key = _load_key(inline_key.encode(), key_password, "ssl.keystore.key", where)
        return KeyMaterial(_certs_pem(certs), _key_pem(key))
    data = _read(location, "ssl.keystore.location", where)
    if kind == "PEM":
        certs = _pem_certs(data, f"ssl.keystore.location={location}", where)
        key = _load_key(data, key_password, f"ssl.keystore.location={location}", where)
        return KeyMaterial(_certs_pem(certs), _key_pem(key))
    from cryptography.hazmat.primitives.serialization import pkcs12
    password = settings.get("ssl.keystore.password") or ""
    try:
        key, cert, extra = pkcs12.load_key_and_certificates(data, _password(password))
    except ValueError as exc:
        raise InvalidConfigError(f"{where}: ssl.keystore.location={location}: cannot open the PKCS12 store"
                                 f" (a wrong ssl.keystore.password?): {exc}") from None
    if key is None or cert is None:
        raise InvalidConfigError(f"{where}: ssl.keystore.location={location} holds no private key with its"
                                 " certificate")
    return KeyMaterial(_certs_pem([cert, *extra]), _key_pem(key))


def load_truststore(settings: dict[str, str], where: str) -> bytes | None:
    """The trusted certificates (PEM) from the ssl.truststore.* settings, or None when none is set
    (then the system's default certificate authorities are trusted, as Java's default trusts
    its own)."""
    location = settings.get("ssl.truststore.location") or ""
    inline = settings.get("ssl.truststore.certificates") or ""
    if not (location or inline):
        return None
    kind = _check_type(settings.get("ssl.truststore.type") or ("PEM" if inline else "PKCS12"),
                       "ssl.truststore.type", where)
    if inline:
        if location or kind != "PEM":
            raise InvalidConfigError(f"{where}: ssl.truststore.certificates needs ssl.truststore.type=PEM and"
                                     " no ssl.truststore.location")
        return _certs_pem(_pem_certs(inline.encode(), "ssl.truststore.certificates", where))
    data = _read(location, "ssl.truststore.location", where)
    if kind == "PEM":
        return _certs_pem(_pem_certs(data, f"ssl.truststore.location={location}", where))
    from cryptography.hazmat.primitives.serialization import pkcs12
    password = settings.get("ssl.truststore.password") or ""
    try:
        store = pkcs12.load_pkcs12(data, _password(password) if password else None)
    except ValueError as exc:
        raise InvalidConfigError(f"{where}: ssl.truststore.location={location}: cannot open the PKCS12 store"
                                 f" (a wrong ssl.truststore.password?): {exc}") from None
    certs = [c.certificate for c in store.additional_certs]
    if store.cert is not None:
        certs.insert(0, store.cert.certificate)
    if not certs:
        raise InvalidConfigError(f"{where}: ssl.truststore.location={location} holds no certificate")
    return _certs_pem(certs)


def store_files(settings: dict[str, str]) -> tuple[str, ...]:
    """The store files the settings name (watched for changes: certificate reload)."""
    return tuple(p for p in (settings.get("ssl.keystore.location"), settings.get("ssl.truststore.location")) if p)


def file_stamp(paths: tuple[str, ...]) -> tuple:
    """What changes when any of the files is replaced or rewritten."""
    out = []
    for p in paths:
        try:
            st = os.stat(p)
            out.append((p, st.st_mtime_ns, st.st_size, st.st_ino))
        except OSError:
            out.append((p, None))
    return tuple(out)
