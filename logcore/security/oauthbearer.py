"""SASL OAUTHBEARER (RFC 7628), the server side, as Kafka's OAuthBearerSaslServer runs it.

The client's first message is a GS2 header (`n,,` or `n,a=<authzid>,`), then ^A-separated
key=value pairs, among them `auth=Bearer <token>`, ended by ^A^A. The token is checked
(access_token.py); a good one completes the exchange with User:<its subject>, whose session lasts
no longer than the token (authenticator.py takes the smaller of that and
connections.max.reauth.ms, KIP-368). A refused token is answered, as RFC 7628 says, with a JSON
status as the server's challenge (`{"status":"invalid_token"}`); the client acknowledges it with a
lone ^A, and the exchange then fails (SASL_AUTHENTICATION_FAILED). The other pairs are SASL
extensions (KIP-342): their names and values are checked, then ignored, as Kafka's default
validator does."""
from __future__ import annotations

import json
import re

from logcore.security.access_token import AccessToken, InvalidToken, TokenValidator
from logcore.security.scram import SaslFailure

SEP = "\x01"
_KEY = re.compile(r"[A-Za-z]+")
_VALUE = re.compile(r"[\x21-\x7E \t\r\n]+")
_BEARER = re.compile(r"Bearer +([A-Za-z0-9\-._~+/]+=*)")
MAX_MESSAGE = 64 * 1024


class OAuthBearerServer:
    mechanism = "OAUTHBEARER"

    def __init__(self, validator: TokenValidator):
        self._validator = validator
        self.username: str | None = None
        self.token: AccessToken | None = None
        self.complete = False
        self._refused: str | None = None        # why, once the invalid_token challenge was sent

    @property
    def credential_expires_at_ms(self) -> int | None:
        return self.token.expires_at_ms if self.token is not None else None

    def step(self, message: bytes) -> bytes:
        if self.complete:
            raise SaslFailure("OAUTHBEARER exchange already finished")
        if self._refused is not None:
            # RFC 7628 3.2.3: the client's ^A after our error challenge ends the exchange
            raise SaslFailure(f'Authentication failed: {{"status":"invalid_token"}}: {self._refused}')
        authzid, token = parse_client_message(message)
        try:
            access = self._validator.validate(token)
        except InvalidToken as exc:
            self._refused = str(exc)
            return json.dumps({"status": "invalid_token"}, separators=(",", ":")).encode()
        if authzid and authzid != access.principal_name:
            raise SaslFailure(f"Authentication failed: Client requested an authorization id ({authzid}) that is"
                              f" different from the token's principal name ({access.principal_name})")
        self.token = access
        self.username = access.principal_name
        self.complete = True
        return b""


def parse_client_message(message: bytes) -> tuple[str, str]:
    """(authzid, token) from RFC 7628's client initial response; SaslFailure when malformed."""
    if len(message) > MAX_MESSAGE:
        raise SaslFailure(f"Invalid OAUTHBEARER client first message: over {MAX_MESSAGE} bytes")
    try:
        text = message.decode("utf-8")
    except UnicodeDecodeError:
        raise SaslFailure("Invalid OAUTHBEARER client first message: not UTF-8") from None
    header, sep, rest = text.partition(SEP)
    m = re.fullmatch(r"([ny]|p=[^,]*),(?:a=([^,]*))?,", header)
    if not sep or m is None:
        raise SaslFailure("Invalid OAUTHBEARER client first message: expected a GS2 header (n,, or n,a=<authzid>,)")
    if m.group(1).startswith("p="):
        raise SaslFailure("Invalid OAUTHBEARER client first message: channel binding is not supported")
    authzid = _saslname(m.group(2) or "")
    if not rest.endswith(SEP + SEP) and rest != SEP:
        raise SaslFailure("Invalid OAUTHBEARER client first message: key/value pairs must end with ^A^A")
    pairs: dict[str, str] = {}
    for item in rest[:-2].split(SEP) if rest != SEP else ():
        key, eq, value = item.partition("=")
        if not eq or _KEY.fullmatch(key) is None or (value and _VALUE.fullmatch(value) is None):
            raise SaslFailure(f"Invalid OAUTHBEARER client first message: malformed key/value pair {key[:40]!r}")
        if key in pairs:
            raise SaslFailure(f"Invalid OAUTHBEARER client first message: {key!r} given twice")
        pairs[key] = value
    auth = pairs.get("auth")
    bearer = _BEARER.fullmatch(auth) if auth is not None else None
    if bearer is None:
        raise SaslFailure("Invalid OAUTHBEARER client first message: no auth=Bearer <token>")
    return authzid, bearer.group(1)


def _saslname(value: str) -> str:
    """RFC 5801's saslname: `=2C` is a comma and `=3D` an equals sign."""
    if re.search(r"=(?!2C|3D)", value):
        raise SaslFailure("Invalid OAUTHBEARER client first message: bad escape in the authorization id")
    return value.replace("=2C", ",").replace("=3D", "=")


def client_message(token: str, authzid: str = "", extensions: dict[str, str] | None = None) -> bytes:
    """A client's first message (what seglog's tests and tools send)."""
    pairs = "".join(f"{k}={v}{SEP}" for k, v in (extensions or {}).items())
    a = f"a={authzid.replace('=', '=3D').replace(',', '=2C')}" if authzid else ""
    return f"n,{a},{SEP}auth=Bearer {token}{SEP}{pairs}{SEP}".encode()
