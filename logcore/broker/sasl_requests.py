"""The broker's side of SaslHandshake and SaslAuthenticate on a connection (the exchange itself
is logcore.security.authenticator's): each answer is (request, response) plus whether the
connection closes once it is sent; bare tokens after a SaslHandshake v0 are answered as bare
size-prefixed tokens. Failures are logged at INFO (a client with a wrong password is not the
broker's problem) and counted per listener, with the successes, in the broker's metrics
(logcore.metrics.authentication_metrics). A listener serving OAUTHBEARER has one token validator
(and so one cached key set of its issuer) for all its connections."""
from __future__ import annotations

import asyncio
import logging
import struct

from logcore.security.access_token import TokenValidator
from logcore.security.scram import SaslFailure
from logcore.security.session import SASL_AUTHENTICATE, SASL_HANDSHAKE, ConnectionSession

logger = logging.getLogger(__name__)

CLOSE = None          # what raw_token gives when the connection must close


class SaslRequests:
    def __init__(self, outcomes, security=None):
        self.outcomes = outcomes          # failed(listener) / succeeded(listener): AuthenticationMetrics
        self._validators = {name: TokenValidator(sec.oauthbearer)
                            for name, sec in (security.by_listener.items() if security is not None else ())
                            if sec.oauthbearer is not None}

    def token_validator(self, listener: str) -> TokenValidator | None:
        """The OAUTHBEARER token validator of `listener` (None: it does not serve OAUTHBEARER)."""
        return self._validators.get(listener)

    async def raw_token(self, session: ConnectionSession, frame, peer):
        """The server's answer to a bare token as a size-prefixed frame; the server's close
        marker (`close`) when the exchange failed."""
        auth = session.authenticator
        try:
            answer = await asyncio.to_thread(auth.step, bytes(frame))
        except SaslFailure as exc:
            self.outcomes.failed(session.listener)
            logger.info("connection %s (listener %s): SASL authentication failed: %s", peer, session.listener, exc)
            return CLOSE
        if auth.authenticated and not auth.in_exchange:
            session.authenticated()
            self.outcomes.succeeded(session.listener)
        return struct.pack(">i", len(answer)) + answer

    async def handle(self, request, session: ConnectionSession, peer):
        """((request, response), close after it)."""
        auth = session.authenticator
        if auth is None:
            return (request, session.not_sasl(request.api_key)), False
        if request.api_key == SASL_HANDSHAKE:
            answer, close = auth.handshake(request.api_version, request.body.mechanism)
            if close:
                self.outcomes.failed(session.listener)
                logger.info("connection %s (listener %s): SaslHandshake for %r refused (error %d)", peer,
                            session.listener, request.body.mechanism, answer["error_code"])
            return (request, answer), close
        if not auth.in_exchange:
            answer = session.not_sasl(SASL_AUTHENTICATE)
            answer["error_message"] = "SaslAuthenticate without a SaslHandshake first"
            return (request, answer), True
        answer, close = await asyncio.to_thread(auth.authenticate_response, bytes(request.body.auth_bytes))
        if close:
            self.outcomes.failed(session.listener)
            logger.info("connection %s (listener %s): SASL %s authentication failed: %s", peer, session.listener,
                        auth.mechanism, answer["error_message"])
        elif auth.authenticated and not auth.in_exchange:
            session.authenticated()
            self.outcomes.succeeded(session.listener)
        return (request, answer), close
