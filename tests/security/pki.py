"""Certificates for the security tests, made with `cryptography`: a CA, a broker certificate
naming 127.0.0.1 and localhost, client certificates, an expired one, and a second CA nobody
trusts; written as PEM files and PKCS12 stores."""
from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import NameOID
import ipaddress

STORE_PASSWORD = "store-secret"
_NOW = datetime.datetime.now(datetime.timezone.utc)


@dataclass
class Issued:
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey
    chain: list            # the certificate, then its issuer(s)

    def cert_pem(self) -> bytes:
        return b"".join(c.public_bytes(serialization.Encoding.PEM) for c in self.chain)

    def key_pem(self, password: str | None = None) -> bytes:
        enc = serialization.BestAvailableEncryption(password.encode()) if password else serialization.NoEncryption()
        return self.key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, enc)

    def write_pem(self, folder: Path, name: str) -> tuple[Path, Path]:
        cert, key = folder / f"{name}.crt", folder / f"{name}.key"
        cert.write_bytes(self.cert_pem())
        key.write_bytes(self.key_pem())
        return cert, key

    def write_keystore_pem(self, folder: Path, name: str, password: str | None = None) -> Path:
        """One PEM file with the key and the chain (ssl.keystore.type=PEM)."""
        path = folder / f"{name}.keystore.pem"
        path.write_bytes(self.key_pem(password) + self.cert_pem())
        return path

    def write_pkcs12(self, folder: Path, name: str, password: str = STORE_PASSWORD) -> Path:
        path = folder / f"{name}.p12"
        path.write_bytes(pkcs12.serialize_key_and_certificates(
            name.encode(), self.key, self.cert, self.chain[1:],
            serialization.BestAvailableEncryption(password.encode())))
        return path


def _name(cn: str, org: str = "seglog tests") -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, org),
                      x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def make_ca(cn: str = "seglog test CA") -> Issued:
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(_name(cn))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(_NOW - datetime.timedelta(days=1)).not_valid_after(_NOW + datetime.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    return Issued(cert, key, [cert])


def issue(ca: Issued, cn: str, *, hosts=("127.0.0.1", "localhost"), expired: bool = False,
          org: str = "seglog tests") -> Issued:
    key = ec.generate_private_key(ec.SECP256R1())
    if expired:
        start, end = _NOW - datetime.timedelta(days=10), _NOW - datetime.timedelta(days=1)
    else:
        start, end = _NOW - datetime.timedelta(days=1), _NOW + datetime.timedelta(days=30)
    names = []
    for h in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            names.append(x509.DNSName(h))
    builder = (x509.CertificateBuilder().subject_name(_name(cn, org)).issuer_name(ca.cert.subject)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(start).not_valid_after(end)
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True))
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    cert = builder.sign(ca.key, hashes.SHA256())
    return Issued(cert, key, [cert, ca.cert])


class Pki:
    """Everything written under `folder`."""

    def __init__(self, folder: Path):
        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        self.ca = make_ca()
        self.other_ca = make_ca("some other CA")
        self.ca_pem = folder / "ca.crt"
        self.ca_pem.write_bytes(self.ca.cert_pem())
        self.other_ca_pem = folder / "other-ca.crt"
        self.other_ca_pem.write_bytes(self.other_ca.cert_pem())
        self.truststore_p12 = folder / "truststore.p12"
        self.truststore_p12.write_bytes(pkcs12.serialize_java_truststore(
            [pkcs12.PKCS12Certificate(self.ca.cert, b"ca")],
            serialization.BestAvailableEncryption(STORE_PASSWORD.encode())))
        self.broker = issue(self.ca, "broker")
        self.broker_p12 = self.broker.write_pkcs12(folder, "broker")
        self.broker_pem = self.broker.write_keystore_pem(folder, "broker")
        self.client = issue(self.ca, "alice", hosts=())
        self.client_cert, self.client_key = self.client.write_pem(folder, "client")
        self.client_p12 = self.client.write_pkcs12(folder, "client")
        self.expired = issue(self.ca, "broker", expired=True)
        self.expired_pem = self.expired.write_keystore_pem(folder, "expired")
        self.expired_client = issue(self.ca, "late", hosts=(), expired=True)
        self.expired_client_cert, self.expired_client_key = self.expired_client.write_pem(folder, "expired-client")
        self.rogue = issue(self.other_ca, "broker")
        self.rogue_pem = self.rogue.write_keystore_pem(folder, "rogue")
