"""The client quotas a broker enforces: the configured entities, which one applies to each
(user, client id), and one rate per limited (user, client id) group (Kafka's ClientQuotaManager
and ClientRequestQuotaManager, for the three quota types at once).

Per request, not per record: the broker asks `produced(request, bytes appended)` once per
Produce, `fetched(request, response bytes)` once per Fetch and `handled(request, seconds)` once
per request of any kind; each records into the rate of the entity that applies and answers the
throttle time in ms (0 within the quota). With no quota configured each is one attribute test.

A client's user is its principal's name (`request.principal`, "User:ANONYMOUS" without
authentication), its client id the request header's ("" when null).
"""
from __future__ import annotations

import threading
import time

from logcore.quota.client_quota_entity import (CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE, REQUEST_PERCENTAGE,
                                               ClientQuotaEntity, candidates, principal_user)
from logcore.quota.rate_sensor import RateSensor

ANONYMOUS = "User:ANONYMOUS"


class ClientQuotas:
    def __init__(self, samples: int = 11, window_s: float = 1.0, *, clock=time.monotonic):
        self.samples = samples
        self.window_s = window_s
        self._clock = clock
        self._lock = threading.Lock()
        self._configs: dict[ClientQuotaEntity, dict[str, float]] = {}
        # (quota key, user, client id) -> (bound, sensor) or None: which entity applies, cached
        # until the configs change
        self._resolved: dict[tuple[str, str, str], tuple[float, RateSensor] | None] = {}
        # (quota key, user tag, client tag) -> the rate of that group
        self._sensors: dict[tuple[str, str, str], RateSensor] = {}
        self._purged_at = 1024
        self.active = False          # any quota configured at all

    # ------------------------------------------------------------------ configs
    def replace_all(self, configs: dict[ClientQuotaEntity, dict[str, float]]) -> None:
        """Every entity's quotas at once (as read from the store)."""
        with self._lock:
            self._configs = {e: dict(c) for e, c in configs.items() if c}
            self._changed()

    def set_entity(self, entity: ClientQuotaEntity, quotas: dict[str, float]) -> None:
        """One entity's quotas now (empty: none)."""
        with self._lock:
            if quotas:
                self._configs[entity] = dict(quotas)
            else:
                self._configs.pop(entity, None)
            self._changed()

    def entities(self) -> dict[ClientQuotaEntity, dict[str, float]]:
        with self._lock:
            return {e: dict(c) for e, c in self._configs.items()}

    def _changed(self) -> None:
        self._resolved = {}
        self.active = bool(self._configs)

    def quota_of(self, key: str, user: str, client_id: str) -> tuple[float, ClientQuotaEntity] | None:
        """(bound, entity) of quota `key` for a client, by Kafka's precedence; None: unlimited."""
        configs = self._configs
        for entity, _tags in candidates(user, client_id):
            config = configs.get(entity)
            if config is not None and key in config:
                return config[key], entity
        return None

    # ------------------------------------------------------------------ enforcement
    def produced(self, request, nbytes: int) -> int:
        """Record a Produce's appended bytes; the throttle time (ms)."""
        if not self.active:
            return 0
        return self._record(PRODUCER_BYTE_RATE, request, nbytes)

    def fetched(self, request, nbytes: int) -> int:
        """Record a Fetch response's bytes; when that puts the client over its quota the bytes
        are taken back (Kafka answers such a fetch empty) and the throttle time (ms) returned."""
        if not self.active:
            return 0
        quota = self._quota(CONSUMER_BYTE_RATE, request)
        if quota is None:
            return 0
        bound, sensor = quota
        now = self._clock() * 1000.0
        sensor.record(nbytes, now)
        throttle = sensor.throttle_ms(bound, now)
        if throttle > 0:
            sensor.unrecord(nbytes)
        return throttle

    def fetch_limit(self, request) -> int | None:
        """Most bytes one fetch may answer with: the consumer quota over samples - 1 windows
        (Kafka's getMaxValueInQuotaWindow), None without a quota."""
        if not self.active:
            return None
        quota = self._quota(CONSUMER_BYTE_RATE, request)
        if quota is None:
            return None
        return max(1, int(quota[0] * (self.samples - 1) * self.window_s))

    def handled(self, request, seconds: float) -> int:
        """Record the time a request took to handle (its request_percentage share); the
        throttle time (ms), at most one quota window as in Kafka."""
        if not self.active:
            return 0
        quota = self._quota(REQUEST_PERCENTAGE, request)
        if quota is None:
            return 0
        bound, sensor = quota
        now = self._clock() * 1000.0
        sensor.record(seconds * 100.0, now)       # percent of one handler for a second
        return sensor.throttle_ms(bound, now, at_most_ms=self.window_s * 1000.0)

    def _record(self, key: str, request, value: float) -> int:
        quota = self._quota(key, request)
        if quota is None:
            return 0
        bound, sensor = quota
        now = self._clock() * 1000.0
        sensor.record(value, now)
        return sensor.throttle_ms(bound, now)

    def _quota(self, key: str, request) -> tuple[float, RateSensor] | None:
        user = principal_user(getattr(request, "principal", None) or ANONYMOUS)
        client_id = request.client_id or ""
        cache_key = (key, user, client_id)
        try:
            return self._resolved[cache_key]
        except KeyError:
            pass
        with self._lock:
            found = None
            for entity, tags in candidates(user, client_id):
                config = self._configs.get(entity)
                if config is not None and key in config:
                    found = (config[key], self._sensor((key, *tags)))
                    break
            if len(self._resolved) > 100_000:       # many client ids: start the cache afresh
                self._resolved = {}
            self._resolved[cache_key] = found
            return found

    def _sensor(self, key: tuple[str, str, str]) -> RateSensor:
        sensor = self._sensors.get(key)
        if sensor is None:
            if len(self._sensors) >= self._purged_at:
                self._purge()
            sensor = self._sensors[key] = RateSensor(self.samples, self.window_s)
        return sensor

    def _purge(self) -> None:
        """Forget the rates that measure nothing any more (clients gone for a whole span)."""
        now = self._clock() * 1000.0
        self._sensors = {k: s for k, s in self._sensors.items() if s.rate(now) > 0}
        self._resolved = {}
        self._purged_at = max(1024, 2 * len(self._sensors))
