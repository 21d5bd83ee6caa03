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
arrives after the session expired closes the connection (`expired`). An OAUTHBEARER session also
ends when its token does: its lifetime is the smaller of the token's remaining life and
connections.max.reauth.ms (the token's alone when that is 0), as Kafka's SaslServerAuthenticator
computes it. connections.max.reauth.ms may differ per mechanism on a listener (SessionLifetimes).
"""
from __future__ import annotations

import time
from typing import Callable

from logcore.security.access_token import TokenValidator
from logcore.security.oauthbearer import OAuthBearerServer
from logcore.security.plain import PlainServer
from logcore.security.principal import KafkaPrincipal
from logcore.security.scram import SaslFailure, ScramServer
from logcore.security.scram_credential import ScramCredential
from logcore.security.session_lifetime import SessionLifetimes
from logcore.wire import error_codes as E

ScramLookup = Callable[[str, str], "ScramCredential | None"]     # (mechanism, user) -> credential


class SaslAuthenticator:
    """`mechanisms`: the listener's enabled ones; `plain_users`: its PLAIN users; `scram`: the
    credential lookup; `reauth_ms`: connections.max.reauth.ms, one for every mechanism or the
    listener's SessionLifetimes (per mechanism; 0: sessions never expire);
    `oauthbearer`: the listener's token validator when it enables OAUTHBEARER."""

    def __init__(self, mechanisms: tuple[str, ...], plain_users: dict[str, str], scram: ScramLookup,
                 reauth_ms: int | SessionLifetimes = 0, clock: Callable[[], float] = time.monotonic, *,
                 oauthbearer: TokenValidator | None = None, wall_clock: Callable[[], float] = time.time):
        if "OAUTHBEARER" in mechanisms and oauthbearer is None:
            raise ValueError("OAUTHBEARER is enabled but no token validator was given")
        self.mechanisms = mechanisms
        self._plain_users = plain_users
        self._scram = scram
        self._lifetimes = reauth_ms if isinstance(reauth_ms, SessionLifetimes) else SessionLifetimes(reauth_ms)
        self._oauthbearer = oauthbearer
        self._clock = clock
        self._wall_clock = wall_clock         # token expiry times are wall-clock (epoch) times
        self._lifetime_ms = 0
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
        elif mechanism == "OAUTHBEARER":
            self._exchange = OAuthBearerServer(self._oauthbearer)
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
            self._lifetime_ms = self._session_lifetime(exchange)
            self.expires_at = (self._clock() + self._lifetime_ms / 1000) if self._lifetime_ms is not None else None
        return answer

    def _session_lifetime(self, exchange) -> int | None:
        """How long the new session lasts in ms (None: no limit): connections.max.reauth.ms, cut
        short by the credential's own expiry (an OAUTHBEARER token's exp)."""
        reauth_ms = self._lifetimes.ms(self.mechanism)
        limit = reauth_ms if reauth_ms > 0 else None
        if isinstance(exchange, OAuthBearerServer):
            left = max(0, exchange.credential_expires_at_ms - int(self._wall_clock() * 1000))
            limit = left if limit is None else min(limit, left)
        return limit

    def session_lifetime_ms(self) -> int:
        """What SaslAuthenticate v1+ tells the client once authenticated (0: no limit)."""
        return (self._lifetime_ms or 0) if self.authenticated else 0

    def authenticate_response(self, token: bytes) -> tuple[dict, bool]:
        """The SaslAuthenticate response for `token` and whether to close after it (blocking)."""
        try:
            answer = self.step(token)
        except SaslFailure as exc:
            return {"error_code": E.SASL_AUTHENTICATION_FAILED, "error_message": str(exc), "auth_bytes": b"",
                    "session_lifetime": 0}, True
        return {"error_code": E.NONE, "error_message": None, "auth_bytes": answer,
                "session_lifetime": self.session_lifetime_ms() if self._exchange is None else 0}, False

