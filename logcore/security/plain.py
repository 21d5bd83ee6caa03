"""SASL PLAIN (RFC 4616): one message `[authzid] NUL username NUL password`, checked against
the users of the listener's PlainLoginModule configuration (jaas.py), as Kafka's
PlainServerCallbackHandler does. Only over TLS does it keep the password from the network."""
from __future__ import annotations

import hmac

from logcore.security.scram import SaslFailure


class PlainServer:
    mechanism = "PLAIN"

    def __init__(self, users: dict[str, str]):
        self._users = users
        self.username: str | None = None
        self.complete = False

    def step(self, token: bytes) -> bytes:
        if self.complete:
            raise SaslFailure("PLAIN exchange already finished")
        parts = token.split(b"\x00")
        if len(parts) != 3:
            raise SaslFailure("Invalid SASL/PLAIN response: expected 3 tokens")
        try:
            authzid, user, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError:
            raise SaslFailure("Invalid SASL/PLAIN response: not UTF-8") from None
        if not user:
            raise SaslFailure("Authentication failed: username not specified")
        if not password:
            raise SaslFailure("Authentication failed: password not specified")
        expected = self._users.get(user)
        if expected is None or not hmac.compare_digest(expected.encode(), password.encode()):
            raise SaslFailure("Authentication failed: Invalid username or password")
        if authzid and authzid != user:
            raise SaslFailure("Authentication failed: Client requested an authorization id that is different"
                              " from username")
        self.username = user
        self.complete = True
        return b""


def plain_token(username: str, password: str) -> bytes:
    return b"\x00" + username.encode() + b"\x00" + password.encode()
