"""The broker's check of an OAUTHBEARER access token (KIP-768), as Kafka's
OAuthBearerValidatorCallbackHandler does it: the token is a JWT signed by the issuer (RS*, PS*,
ES* or EdDSA; never `none`, never a shared secret), the signature checked against the issuer's
key set (jwks.py); `exp` and `iat` required, `exp`/`nbf`/`iat` checked with
sasl.oauthbearer.clock.skew.seconds of leeway; `aud` must name one of
sasl.oauthbearer.expected.audience and `iss` be sasl.oauthbearer.expected.issuer when those are
set; the principal is the sasl.oauthbearer.sub.claim.name claim, the scopes the
sasl.oauthbearer.scope.claim.name claim (a space-separated string or a list).

PyJWT does the JOSE work (a maintained JWT library rather than our own signature code)."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import jwt

from logcore.errors import InvalidConfigError
from logcore.log.config_key import ConfigKey, ConfigType, at_least
from logcore.security.jwks import JwksCache, JwksUnavailable

# Kafka's class names for the validator (4.x, and 3.x's `secured` package): the only
# sasl.server.callback.handler.class seglog takes for OAUTHBEARER.
VALIDATOR_CLASSES = ("org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
                     "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerValidatorCallbackHandler")
UNSECURED_VALIDATOR = "org.apache.kafka.common.security.oauthbearer.internals.unsecured." \
                      "OAuthBearerUnsecuredValidatorCallbackHandler"
CALLBACK_HANDLER = "sasl.server.callback.handler.class"
SIGNING_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")

OAUTHBEARER_KEYS = (
    ConfigKey("sasl.oauthbearer.jwks.endpoint.url", ConfigType.STRING, "", "OAUTHBEARER: where the issuer"
              " publishes its signing keys (a JWKS: http, https or file URL).", category="security"),
    ConfigKey("sasl.oauthbearer.jwks.endpoint.refresh.ms", ConfigType.LONG, 3600000, "OAUTHBEARER: how often"
              " the key set is fetched again (also at once for a token naming an unknown key id).",
              validator=at_least(1), category="security"),
    ConfigKey("sasl.oauthbearer.jwks.endpoint.retry.backoff.ms", ConfigType.LONG, 100, "OAUTHBEARER: the first"
              " wait before a failed key-set fetch is retried (doubling).", validator=at_least(0),
              category="security"),
    ConfigKey("sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms", ConfigType.LONG, 10000, "OAUTHBEARER: how"
              " long failed key-set fetches are retried.", validator=at_least(0), category="security"),
    ConfigKey("sasl.oauthbearer.expected.audience", ConfigType.LIST, "", "OAUTHBEARER: a token's aud must name"
              " one of these; empty: aud is not checked.", category="security"),
    ConfigKey("sasl.oauthbearer.expected.issuer", ConfigType.STRING, "", "OAUTHBEARER: a token's iss must be"
              " this; empty: iss is not checked.", category="security"),
    ConfigKey("sasl.oauthbearer.sub.claim.name", ConfigType.STRING, "sub", "OAUTHBEARER: the claim naming the"
              " principal (User:<its value>).", category="security"),
    ConfigKey("sasl.oauthbearer.scope.claim.name", ConfigType.STRING, "scope", "OAUTHBEARER: the claim holding"
              " the token's scopes.", category="security"),
    ConfigKey("sasl.oauthbearer.clock.skew.seconds", ConfigType.INT, 30, "OAUTHBEARER: leeway allowed between"
              " the issuer's clock and the broker's when checking exp, nbf and iat.", validator=at_least(0),
              category="security"),
)
OAUTHBEARER_NAMES = frozenset(k.name for k in OAUTHBEARER_KEYS)


class InvalidToken(Exception):
    """Why a token is refused (logged by the broker; the client gets RFC 7628's invalid_token)."""


@dataclass(frozen=True)
class AccessToken:
    principal_name: str
    scopes: tuple[str, ...]
    expires_at_ms: int             # epoch milliseconds
    issued_at_ms: int


@dataclass(frozen=True)
class OAuthBearerSettings:
    jwks_url: str
    refresh_ms: int
    retry_backoff_ms: int
    retry_backoff_max_ms: int
    audience: tuple[str, ...]
    issuer: str
    sub_claim: str
    scope_claim: str
    clock_skew_s: int

    @classmethod
    def parse(cls, raw: dict[str, str], where: str) -> "OAuthBearerSettings":
        """From the listener's OAUTHBEARER settings (Kafka's names; absent ones take Kafka's
        defaults), with the callback handler class under CALLBACK_HANDLER."""
        handler = raw.get(CALLBACK_HANDLER, "").strip()
        if handler not in VALIDATOR_CLASSES:
            if handler in ("", UNSECURED_VALIDATOR):
                said = ("it is not set, and Kafka's default" if not handler else "Kafka's") + \
                    " unsecured validator (unsigned tokens, for development) is not offered"
            else:
                said = f"{handler!r} is not supported"
            raise InvalidConfigError(
                f"{where}: OAUTHBEARER needs listener.name.<listener>.oauthbearer.{CALLBACK_HANDLER}="
                f"{VALIDATOR_CLASSES[0]} (tokens signed by an issuer, checked against its JWKS): {said}")
        values = {}
        for key in OAUTHBEARER_KEYS:
            try:
                values[key.name] = key.parse(raw[key.name]) if key.name in raw else key.default
            except InvalidConfigError as exc:
                raise InvalidConfigError(f"{where}: {exc}") from None
        url = values["sasl.oauthbearer.jwks.endpoint.url"].strip()
        if not url.startswith(("https://", "http://", "file:")):
            raise InvalidConfigError(f"{where}: OAUTHBEARER needs sasl.oauthbearer.jwks.endpoint.url, an http(s) or"
                                     f" file URL of the issuer's key set; got {url!r}")
        for name in ("sasl.oauthbearer.sub.claim.name", "sasl.oauthbearer.scope.claim.name"):
            if not values[name].strip():
                raise InvalidConfigError(f"{where}: {name} is empty")
        return cls(url, values["sasl.oauthbearer.jwks.endpoint.refresh.ms"],
                   values["sasl.oauthbearer.jwks.endpoint.retry.backoff.ms"],
                   values["sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms"],
                   tuple(a.strip() for a in values["sasl.oauthbearer.expected.audience"] if a.strip()),
                   values["sasl.oauthbearer.expected.issuer"].strip(), values["sasl.oauthbearer.sub.claim.name"].strip(),
                   values["sasl.oauthbearer.scope.claim.name"].strip(), values["sasl.oauthbearer.clock.skew.seconds"])


class TokenValidator:
    """Checks tokens for one listener; shared by its connections (the key set is fetched once)."""

    def __init__(self, settings: OAuthBearerSettings, keys: JwksCache | None = None,
                 clock: Callable[[], float] = time.time):
        self.settings = settings
        self.keys = keys or JwksCache(settings.jwks_url, settings.refresh_ms, settings.retry_backoff_ms,
                                      settings.retry_backoff_max_ms)
        self._clock = clock

    def validate(self, token: str) -> AccessToken:
        s = self.settings
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise InvalidToken(f"not a signed JWT: {exc}") from None
        alg = header.get("alg")
        if alg not in SIGNING_ALGORITHMS:
            raise InvalidToken(f"signing algorithm {alg!r} is not accepted (one of {', '.join(SIGNING_ALGORITHMS)})")
        kid = header.get("kid")
        if kid is not None and not isinstance(kid, str):
            raise InvalidToken("the token's kid is not a string")
        try:
            key = self.keys.key(kid, alg)
        except LookupError as exc:
            raise InvalidToken(str(exc)) from None
        except JwksUnavailable as exc:
            raise InvalidToken(f"the issuer's keys are unavailable: {exc}") from None
        try:
            claims = jwt.decode(token, key, algorithms=[alg], audience=list(s.audience) or None,
                                issuer=s.issuer or None, leeway=s.clock_skew_s,
                                options={"require": ["exp", "iat"], "verify_aud": bool(s.audience),
                                         "verify_iss": bool(s.issuer)})
        except jwt.ExpiredSignatureError:
            raise InvalidToken("the token has expired (exp)") from None
        except jwt.ImmatureSignatureError as exc:
            raise InvalidToken(f"the token is not valid yet: {exc}") from None
        except jwt.InvalidAudienceError:
            raise InvalidToken(f"the token's audience (aud) is not one of {', '.join(s.audience)}") from None
        except jwt.InvalidIssuerError:
            raise InvalidToken(f"the token's issuer (iss) is not {s.issuer}") from None
        except jwt.InvalidSignatureError:
            raise InvalidToken("the token's signature does not verify with the issuer's key") from None
        except jwt.PyJWTError as exc:
            raise InvalidToken(f"invalid token: {exc}") from None
        subject = claims.get(s.sub_claim)
        if not isinstance(subject, str) or not subject.strip():
            raise InvalidToken(f"the token has no {s.sub_claim!r} claim (sasl.oauthbearer.sub.claim.name) naming"
                               " its principal")
        scopes = claims.get(s.scope_claim, ())
        if isinstance(scopes, str):
            scopes = tuple(scopes.split())
        elif isinstance(scopes, list) and all(isinstance(x, str) for x in scopes):
            scopes = tuple(scopes)
        else:
            raise InvalidToken(f"the token's {s.scope_claim!r} claim is neither a string nor a list of strings")
        if not isinstance(claims["exp"], (int, float)) or not isinstance(claims["iat"], (int, float)):
            raise InvalidToken("the token's exp and iat must be numbers")
        return AccessToken(subject.strip(), scopes, int(claims["exp"] * 1000), int(claims["iat"] * 1000))
