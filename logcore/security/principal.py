"""Kafka's principals: "<type>:<name>", "User:ANONYMOUS" until a connection authenticates.

A SASL login is `User:<username>`; a TLS client certificate (ssl.client.auth=required or
requested, the certificate given) is `User:<its subject's distinguished name>` in RFC 2253
form, most specific attribute first (`User:CN=alice,OU=eng,O=example`), as Kafka's default
principal builder names it (X500Principal.getName()).
"""
from __future__ import annotations

from dataclasses import dataclass

from logcore.wire.protocol import ANONYMOUS

USER = "User"


@dataclass(frozen=True)
class KafkaPrincipal:
    type: str
    name: str

    def __str__(self) -> str:
        return f"{self.type}:{self.name}"

    @classmethod
    def user(cls, name: str) -> "KafkaPrincipal":
        return cls(USER, name)

    @classmethod
    def parse(cls, text: str) -> "KafkaPrincipal":
        kind, sep, name = text.partition(":")
        if not sep or not kind:
            raise ValueError(f"{text!r} is not a principal (<type>:<name>, e.g. User:alice)")
        return cls(kind, name)


ANONYMOUS_PRINCIPAL = KafkaPrincipal.parse(ANONYMOUS)


def certificate_principal(der: bytes) -> KafkaPrincipal:
    """The principal of a peer certificate (DER): its subject's distinguished name."""
    from cryptography import x509
    cert = x509.load_der_x509_certificate(der)
    return KafkaPrincipal.user(cert.subject.rfc4514_string())
