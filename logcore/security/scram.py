"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka speaks them: the server's
exchange over a stored credential (scram_credential.py) and the client's over a password.

client-first  n,,n=<user>,r=<client nonce>[,<extensions>]
server-first  r=<client nonce><server nonce>,s=<salt b64>,i=<iterations>
client-final  c=biws,r=<nonce>,p=<proof b64>
server-final  v=<server signature b64>        (or e=<error>)
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import os
from typing import Callable

from logcore.security.scram_credential import MECHANISMS, ScramCredential, salted_password


class SaslFailure(Exception):
    """The exchange failed; the message is what the client is told."""


def _b64(b: bytes) -> str:
    return base64.b64encode(b).decode()


def _nonce() -> str:
    return base64.b64encode(os.urandom(18)).decode().replace("=", "")


def _escape(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def _unescape(name: str) -> str:
    if _badly_escaped(name):
        raise SaslFailure("Invalid username in SCRAM client-first message")
    return name.replace("=2C", ",").replace("=3D", "=")


def _badly_escaped(name: str) -> bool:
    i = name.find("=")
    while i >= 0:
        if name[i:i + 3] not in ("=2C", "=3D"):
            return True
        i = name.find("=", i + 1)
    return False


def _attributes(message: str) -> dict[str, str]:
    out = {}
    for part in message.split(","):
        key, sep, value = part.partition("=")
        if not sep or len(key) != 1 and key not in ("tokenauth",):
            continue
        out.setdefault(key, value)
    return out


def _xor(a: bytes, b: bytes) -> bytes:
    return bytes(x ^ y for x, y in zip(a, b))


class ScramServer:
    """One server exchange. `lookup(user)` gives the user's credential for this mechanism, or None."""

    def __init__(self, mechanism: str, lookup: Callable[[str], ScramCredential | None], nonce: str | None = None):
        """`nonce`: the server's part of the nonce (random unless given: RFC test vectors)."""
        self._own_nonce = nonce or _nonce()
        self.mechanism = mechanism
        self.hash = MECHANISMS[mechanism][0]
        self._lookup = lookup
        self._state = "first"
        self._credential: ScramCredential | None = None
        self._first_bare = self._server_first = self._nonce = ""
        self.username: str | None = None
        self.complete = False

    def step(self, token: bytes) -> bytes:
        try:
            message = token.decode("utf-8")
        except UnicodeDecodeError:
            raise SaslFailure("SCRAM message is not UTF-8") from None
        if self._state == "first":
            return self._first(message)
        if self._state == "final":
            return self._final(message)
        raise SaslFailure("SCRAM exchange already finished")

    def _first(self, message: str) -> bytes:
        gs2, sep, rest = message.partition(",")
        authzid, sep2, bare = rest.partition(",")
        if not sep or not sep2 or gs2 not in ("n", "y") or (authzid and not authzid.startswith("a=")):
            raise SaslFailure("Invalid SCRAM client first message")
        attrs = _attributes(bare)
        if "n" not in attrs or "r" not in attrs or not bare.startswith("n="):
            raise SaslFailure("Invalid SCRAM client first message")
        if attrs.get("tokenauth", "").lower() == "true":
            raise SaslFailure("Delegation tokens are not supported")
        user = _unescape(attrs["n"])
        if authzid and _unescape(authzid[2:]) != user:
            raise SaslFailure("Authentication failed: Client requested an authorization id that is different"
                              " from username")
        credential = self._lookup(user)
        if credential is None:
            raise SaslFailure(f"Authentication failed during authentication due to invalid credentials with"
                              f" SASL mechanism {self.mechanism}")
        self.username = user
        self._credential = credential
        self._first_bare = bare
        self._nonce = attrs["r"] + self._own_nonce
        self._server_first = f"r={self._nonce},s={_b64(credential.salt)},i={credential.iterations}"
        self._state = "final"
        return self._server_first.encode()

    def _final(self, message: str) -> bytes:
        self._state = "done"
        attrs = _attributes(message)
        if "p" not in attrs or "r" not in attrs or "c" not in attrs or ",p=" not in message:
            raise SaslFailure("Invalid SCRAM client final message")
        if attrs["r"] != self._nonce:
            raise SaslFailure("Invalid SCRAM client final message: the nonce does not match")
        without_proof = message[:message.rindex(",p=")]
        auth = f"{self._first_bare},{self._server_first},{without_proof}".encode()
        cred = self._credential
        try:
            proof = base64.b64decode(attrs["p"], validate=True)
        except ValueError:
            raise SaslFailure("Invalid SCRAM client final message: the proof is not base64") from None
        signature = hmac.new(cred.stored_key, auth, self.hash).digest()
        client_key = _xor(proof, signature)
        if len(proof) != len(signature) or not hmac.compare_digest(hashlib.new(self.hash, client_key).digest(),
                                                                    cred.stored_key):
            raise SaslFailure(f"Authentication failed during authentication due to invalid credentials with"
                              f" SASL mechanism {self.mechanism}")
        self.complete = True
        return f"v={_b64(hmac.new(cred.server_key, auth, self.hash).digest())}".encode()


class ScramClient:
    """One client exchange: first() then final(server_first), then verify(server_final)."""

    def __init__(self, mechanism: str, username: str, password: str, nonce: str | None = None):
        self.mechanism = mechanism
        self.hash = MECHANISMS[mechanism][0]
        self._username, self._password = username, password
        self._nonce = nonce or _nonce()
        self._first_bare = f"n={_escape(username)},r={self._nonce}"
        self._server_signature = b""

    def first(self) -> bytes:
        return ("n,," + self._first_bare).encode()

    def final(self, server_first: bytes) -> bytes:
        text = server_first.decode("utf-8", "replace")
        attrs = _attributes(text)
        if "e" in attrs:
            raise SaslFailure(f"the server refused: {attrs['e']}")
        try:
            nonce, salt, iterations = attrs["r"], base64.b64decode(attrs["s"]), int(attrs["i"])
        except (KeyError, ValueError):
            raise SaslFailure("the server's SCRAM first message cannot be read") from None
        if not nonce.startswith(self._nonce):
            raise SaslFailure("the server's SCRAM nonce does not extend ours")
        salted = salted_password(self._password, salt, iterations, self.mechanism)
        without_proof = f"c=biws,r={nonce}"
        auth = f"{self._first_bare},{text},{without_proof}".encode()
        client_key = hmac.new(salted, b"Client Key", self.hash).digest()
        stored = hashlib.new(self.hash, client_key).digest()
        proof = _xor(client_key, hmac.new(stored, auth, self.hash).digest())
        server_key = hmac.new(salted, b"Server Key", self.hash).digest()
        self._server_signature = hmac.new(server_key, auth, self.hash).digest()
        return f"{without_proof},p={_b64(proof)}".encode()

    def verify(self, server_final: bytes) -> None:
        attrs = _attributes(server_final.decode("utf-8", "replace"))
        if "e" in attrs:
            raise SaslFailure(f"the server refused: {attrs['e']}")
        try:
            got = base64.b64decode(attrs["v"])
        except (KeyError, ValueError):
            raise SaslFailure("the server's SCRAM final message cannot be read") from None
        if not hmac.compare_digest(got, self._server_signature):
            raise SaslFailure("the server's SCRAM signature is wrong (it does not know the password)")
