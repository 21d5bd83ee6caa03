"""One client connection's security session: the listener it came in on, the client's
address, and who it is (its principal), with the rule of which requests it may send.

- PLAINTEXT: User:ANONYMOUS.
- SSL: User:ANONYMOUS, or the subject of the client's certificate when it presented one
  (ssl.client.auth=required/requested).
- SASL_PLAINTEXT / SASL_SSL: only ApiVersions, SaslHandshake and SaslAuthenticate until the
  SASL exchange succeeds (authenticator.py); then User:<login>.

The broker stamps `principal`, `client_host` and `listener` on every request it parses
(logcore.wire.protocol.Request), for the authorizer and the logs.
"""
from __future__ import annotations

from logcore.security.authenticator import SaslAuthenticator
from logcore.security.principal import ANONYMOUS_PRINCIPAL, KafkaPrincipal
from logcore.wire.api_keys import API_VERSIONS
from logcore.wire import error_codes as E

SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36

# What admit() tells the server to do with a request.
SERVE, SASL, CLOSE = "serve", "sasl", "close"


class ConnectionSession:
    def __init__(self, listener: str, client_host: str, *, tls_principal: KafkaPrincipal | None = None,
                 authenticator: SaslAuthenticator | None = None):
        self.listener = listener
        self.client_host = client_host
        self.authenticator = authenticator
        self.tls_principal = tls_principal
        self.principal = str(tls_principal or ANONYMOUS_PRINCIPAL)
        self.close_reason: str | None = None

    @property
    def open(self) -> bool:
        """Any request may be served now (no SASL pending, no session expired): the fast path."""
        auth = self.authenticator
        return auth is None or (auth.authenticated and auth.expires_at is None and not auth.raw_tokens)

    def admit(self, api_key: int) -> str:
        """SERVE the request, hand it to the SASL exchange (SASL), or CLOSE the connection
        (close_reason says why)."""
        auth = self.authenticator
        if api_key in (SASL_HANDSHAKE, SASL_AUTHENTICATE):
            return SASL
        if auth is None:
            return SERVE
        if not auth.authenticated:
            if api_key == API_VERSIONS and not auth.in_exchange:
                return SERVE
            self.close_reason = (f"api key {api_key} before SASL authentication completed"
                                 " (only ApiVersions, SaslHandshake and SaslAuthenticate are allowed)")
            return CLOSE
        if auth.expired():
            self.close_reason = ("its SASL session expired (connections.max.reauth.ms, or its OAUTHBEARER"
                                 " token's exp) and it did not re-authenticate")
            return CLOSE
        return SERVE

    def authenticated(self) -> None:
        """The SASL exchange succeeded: requests carry its principal from now on."""
        self.principal = str(self.authenticator.principal)

    def not_sasl(self, api_key: int) -> dict:
        """The answer to SaslHandshake / SaslAuthenticate on a listener without SASL."""
        if api_key == SASL_HANDSHAKE:
            return {"error_code": E.ILLEGAL_SASL_STATE, "mechanisms": []}
        return {"error_code": E.ILLEGAL_SASL_STATE, "error_message": f"listener {self.listener} does not use SASL",
                "auth_bytes": b"", "session_lifetime": 0}
