"""An OAuth issuer's JSON Web Key Set (RFC 7517), fetched from `sasl.oauthbearer.jwks.endpoint.url`
and cached, as Kafka's broker-side OAUTHBEARER validator keeps it: fetched again once
`sasl.oauthbearer.jwks.endpoint.refresh.ms` has passed, and at once when a token names a key id
(`kid`) the set does not hold (the issuer rotated its keys), at most once per
UNKNOWN_KID_INTERVAL_S so that tokens with made-up key ids cannot make the broker hammer the
issuer. A failed fetch is retried with backoff (retry.backoff.ms doubling up to
retry.backoff.max.ms) and, when the set was fetched before, the old keys go on serving; when it
never was, logins fail at once for retry.backoff.max.ms before the next try (an unreachable issuer
must not hold every login's worker thread).

Blocking (urllib): the broker calls it from a worker thread (the SASL exchange runs in one)."""
from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Callable

from jwt import PyJWK, PyJWTError

UNKNOWN_KID_INTERVAL_S = 10.0
FETCH_TIMEOUT_S = 10.0
MAX_JWKS_BYTES = 1 << 20


class JwksUnavailable(Exception):
    """The key set cannot be had (the issuer is unreachable or answers nonsense)."""


class JwksCache:
    def __init__(self, url: str, refresh_ms: int, retry_backoff_ms: int = 100, retry_backoff_max_ms: int = 10000,
                 *, clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep):
        self.url = url
        self._refresh_s = refresh_ms / 1000
        self._backoff_s = retry_backoff_ms / 1000
        self._backoff_max_s = max(retry_backoff_max_ms, retry_backoff_ms) / 1000
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._keys: dict[str | None, _SigningKey] | None = None
        self._fetched_at = 0.0
        self._unknown_kid_fetch_at = float("-inf")
        self._failure: tuple[float, JwksUnavailable] | None = None    # the last failed first fetch
        self.fetches = 0

    # ------------------------------------------------------------------ lookups
    def key(self, kid: str | None, alg: str) -> PyJWK:
        """The signing key for a token's `kid` and `alg`; LookupError (why) when there is none."""
        with self._lock:
            now = self._clock()
            if self._keys is None and self._failure is not None and now - self._failure[0] < self._backoff_max_s:
                raise self._failure[1]
            if self._keys is None or now - self._fetched_at >= self._refresh_s:
                self._refresh(initial=self._keys is None)
            found = self._find(kid, alg)
            if found is None and kid is not None and kid not in self._keys \
                    and now - self._unknown_kid_fetch_at >= UNKNOWN_KID_INTERVAL_S:
                self._unknown_kid_fetch_at = now
                self._refresh(initial=False)
                found = self._find(kid, alg)
        if found is None:
            if kid is None:
                raise LookupError(f"the token names no key id (kid) and the issuer's key set has not exactly one"
                                  f" {alg} key")
            raise LookupError(f"no key with id {kid!r} for {alg} in the issuer's key set ({self.url})")
        return found

    def _find(self, kid: str | None, alg: str) -> PyJWK | None:
        keys = self._keys or {}
        if kid is not None:
            k = keys.get(kid)
            return k.jwk if k is not None and _fits(k, alg) else None
        fitting = [k.jwk for k in keys.values() if _fits(k, alg)]
        return fitting[0] if len(fitting) == 1 else None

    # ------------------------------------------------------------------ fetching
    def _refresh(self, *, initial: bool) -> None:
        """Fetch the set (with the lock held: one fetch at a time); on failure keep the old keys,
        or raise JwksUnavailable when there are none."""
        delay, last = self._backoff_s, None
        deadline = self._clock() + self._backoff_max_s
        while True:
            try:
                keys = self._fetch()
                break
            except JwksUnavailable as exc:
                last = exc
            if self._clock() + delay > deadline:
                if initial or self._keys is None:
                    self._failure = (self._clock(), last)
                    raise last
                self._fetched_at = self._clock()    # retried at the next refresh, not on every token
                return
            self._sleep(delay)
            delay = min(delay * 2, self._backoff_max_s)
        self._keys = keys
        self._failure = None
        self._fetched_at = self._clock()

    def _fetch(self) -> dict[str | None, _SigningKey]:
        self.fetches += 1
        try:
            with urllib.request.urlopen(self.url, timeout=FETCH_TIMEOUT_S) as answer:
                raw = answer.read(MAX_JWKS_BYTES + 1)
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise JwksUnavailable(f"cannot fetch the JWKS from {self.url}: {exc}") from None
        if len(raw) > MAX_JWKS_BYTES:
            raise JwksUnavailable(f"the JWKS at {self.url} is over {MAX_JWKS_BYTES} bytes")
        try:
            doc = json.loads(raw)
            entries = doc["keys"]
            if not isinstance(entries, list):
                raise TypeError("keys is not a list")
        except (ValueError, KeyError, TypeError) as exc:
            raise JwksUnavailable(f"the JWKS at {self.url} is not a JSON key set: {exc}") from None
        keys: dict[str | None, _SigningKey] = {}
        for entry in entries:
            if not isinstance(entry, dict) or entry.get("use", "sig") != "sig":
                continue                      # encryption keys do not sign tokens
            try:
                key = PyJWK(entry)
            except (PyJWTError, ValueError, TypeError):
                continue                      # a key type PyJWT cannot use: not one tokens are signed with here
            keys[entry.get("kid")] = _SigningKey(key, entry.get("alg"))
        return keys


@dataclass(frozen=True)
class _SigningKey:
    jwk: PyJWK
    alg: str | None                  # the algorithm the set declares for it, if any


def _fits(key: _SigningKey, alg: str) -> bool:
    """Whether `key` may check a signature made with `alg` (its own `alg`, when the set names one)."""
    if key.alg is not None and key.alg != alg:
        return False
    return key.jwk.key_type == {"RS": "RSA", "PS": "RSA", "ES": "EC"}.get(alg[:2], "") or \
        (alg == "EdDSA" and key.jwk.key_type == "OKP")
