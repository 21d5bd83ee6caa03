"""The server side of SASL on one connection, as Kafka's SaslServerAuthenticator runs it.

States: before the handshake only ApiVersions and SaslHandshake are served; SaslHandshake
picks an enabled mechanism (else UNSUPPORTED_SASL_MECHANISM with the enabled ones, and the
connection is closed); then SaslAuthenticate requests carry the mechanism's tokens (after a
SaslHandshake v0, Kafka's older form: bare size-prefixed tokens, no request header). A failed
exchange is answered SASL_AUTHENTICATION_FAILED with the reason and the connection is closed.
Anything else before authentication closes the connection (ILLEGAL_SASL_STATE).

Re-authentication (KIP-368): with connections.max.reauth.ms > 0, SaslAuthenticate v1+ tells the
client its session_lifetime_ms; the client re-authenticates on the same connection (a new
SaslHandshake + SaslAuthenticate, same mechanism and principal) before then. A request that
arrives after the session expired closes the connection (`expired`).
"""
from __future__ import annotations

import time
from typing import Callable

from logcore.security.plain import PlainServer
from logcore.security.principal import KafkaPrincipal
from logcore.security.scram import SaslFailure, ScramServer
from logcore.security.scram_credential import ScramCredential
from logcore.wire import error_codes as E

ScramLookup = Callable[[str, str], "ScramCredential | None"]     # (mechanism, user) -> credential


class SaslAuthenticator:
    """`mechanisms`: the listener's enabled ones; `plain_users`: its PLAIN users; `scram`: the
    credential lookup; `reauth_ms`: connections.max.reauth.ms (0: sessions never expire)."""

    def __init__(self, mechanisms: tuple[str, ...], plain_users: dict[str, str], scram: ScramLookup,
                 reauth_ms: int = 0, clock: Callable[[], float] = time.monotonic):
        self.mechanisms = mechanisms
        self._plain_users = plain_users
        self._scram = scram
        self._reauth_ms = reauth_ms
        self._clock = clock
        self.mechanism: str | None = None
        self.principal: KafkaPrincipal | None = None      # once authenticated
        self.expires_at: float | None = None              # clock time the session ends (None: never)
        self.raw_tokens = False                           # after a SaslHandshake v0
        self._exchange = None
        self.failures = 0

    # ------------------------------------------------------------------ state
    @property
    def authenticated(self) -> bool:
        return self.principal is not None

    @property
    def in_exchange(self) -> bool:
        return self._exchange is not None

    def expired(self) -> bool:
        return self.expires_at is not None and self._clock() >= self.expires_at

    # ------------------------------------------------------------------ SaslHandshake
    def handshake(self, version: int, mechanism: str) -> tuple[dict, bool]:
        """The SaslHandshake response and whether the connection must close after it."""
        if self._exchange is not None:
            return {"error_code": E.ILLEGAL_SASL_STATE, "mechanisms": list(self.mechanisms)}, True
        if mechanism not in self.mechanisms:
            return {"error_code": E.UNSUPPORTED_SASL_MECHANISM, "mechanisms": list(self.mechanisms)}, True
        if self.authenticated:
            # KIP-368: a re-authentication, with the mechanism the session started with.
            if version < 1 or mechanism != self.mechanism:
                return {"error_code": E.ILLEGAL_SASL_STATE, "mechanisms": list(self.mechanisms)}, True
        self.mechanism = mechanism
        self.raw_tokens = version == 0
        if mechanism == "PLAIN":
            self._exchange = PlainServer(self._plain_users)
        else:
            self._exchange = ScramServer(mechanism, lambda user: self._scram(mechanism, user))
        return {"error_code": E.NONE, "mechanisms": list(self.mechanisms)}, False

    # ------------------------------------------------------------------ the tokens
    def step(self, token: bytes) -> bytes:
        """The next server token; SaslFailure (the client's message) when the exchange failed.
        Blocking: a SCRAM step reads the user's credential."""
        exchange = self._exchange
        if exchange is None:
            raise SaslFailure("Unexpected SASL token: no SaslHandshake came first")
        try:
            answer = exchange.step(bytes(token))
        except SaslFailure:
            self._exchange = None
            self.failures += 1
            raise
        if exchange.complete:
            self._exchange = None
            principal = KafkaPrincipal.user(exchange.username)
            if self.principal is not None and principal != self.principal:
                self.failures += 1
                raise SaslFailure(f"Cannot change principals during re-authentication from {self.principal}"
                                  f" to {principal}")
            self.principal = principal
            self.raw_tokens = False
            self.expires_at = (self._clock() + self._reauth_ms / 1000) if self._reauth_ms > 0 else None
        return answer

    def session_lifetime_ms(self) -> int:
        """What SaslAuthenticate v1+ tells the client once authenticated (0: no limit)."""
        return self._reauth_ms if self.authenticated and self._reauth_ms > 0 else 0

    def authenticate_response(self, token: bytes) -> tuple[dict, bool]:
        """The SaslAuthenticate response for `token` and whether to close after it (blocking)."""
        try:
            answer = self.step(token)
        except SaslFailure as exc:
            return {"error_code": E.SASL_AUTHENTICATION_FAILED, "error_message": str(exc), "auth_bytes": b"",
                    "session_lifetime": 0}, True
        return {"error_code": E.NONE, "error_message": None, "auth_bytes": answer,
                "session_lifetime": self.session_lifetime_ms() if self._exchange is None else 0}, False

