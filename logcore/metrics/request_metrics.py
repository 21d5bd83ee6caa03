"""Per-API request metrics: Kafka's RequestMetrics (RequestsPerSec, ErrorsPerSec, TotalTimeMs,
ThrottleTimeMs) as the JMX exporter names them.

ThrottleTimeMs is Kafka's histogram of every request's quota throttle time (0 for most): exported
as a count (the requests answered) and a sum (the throttle times, ms), so only a throttled
request records anything.

Counted once per request (never per partition or record) in plain Python numbers on the event
loop's thread (no lock, no prometheus_client child on the hot path: about a quarter of a
microsecond); the scrape thread turns them into metric families (collect()). A scrape may read
a request's latency bucket before its sum: the figures are of the same request a moment later."""
from __future__ import annotations

import bisect
import time

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, SummaryMetricFamily

from logcore.wire import api_keys, error_codes

# TotalTimeMs buckets, in milliseconds (Kafka's timer reports quantiles; a histogram lets
# Prometheus compute them over any window and across brokers).
LATENCY_BUCKETS_MS = (0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000)
_BUCKET_LABELS = [str(float(b)) for b in LATENCY_BUCKETS_MS] + ["+Inf"]


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


# Kafka's request names (ApiKeys' names: Produce, ListOffsets, OffsetForLeaderEpoch, ...).
API_NAMES: dict[int, str] = {value: _camel(name) for name, value in vars(api_keys).items()
                             if name.isupper() and isinstance(value, int)}
# Kafka's Errors names (NOT_LEADER_OR_FOLLOWER, ...), by code; the first name of a code wins.
ERROR_NAMES: dict[int, str] = {}
for _name, _value in vars(error_codes).items():
    if _name.isupper() and isinstance(_value, int) and not isinstance(_value, bool):
        ERROR_NAMES.setdefault(_value, _name)


def api_name(api_key: int) -> str:
    return API_NAMES.get(api_key) or f"ApiKey{api_key}"


def error_name(code: int) -> str:
    return ERROR_NAMES.get(code) or f"ERROR_{code}"


class _ApiStats:
    __slots__ = ("buckets", "sum_ms")

    def __init__(self):
        self.buckets = [0] * (len(LATENCY_BUCKETS_MS) + 1)    # per bucket, not cumulative
        self.sum_ms = 0.0


class RequestMetrics:
    """requests_total, errors_total and the totaltimems histogram, labelled by request (a
    collector: the broker's registry calls collect() at each scrape)."""

    def __init__(self):
        self._stats: dict[int, _ApiStats] = {}
        self._errors: dict[tuple[int, int], int] = {}
        self._throttle_ms: dict[int, float] = {}

    def throttled(self, api_key: int, throttle_ms: float) -> None:
        """A response that mutes its client's connection for `throttle_ms` (a client quota)."""
        self._throttle_ms[api_key] = self._throttle_ms.get(api_key, 0.0) + throttle_ms

    def done(self, api_key: int, started: float, errors=()) -> None:
        """A request answered: `started` is its time.perf_counter() at arrival, `errors` the
        error codes its response carries (NONE left out)."""
        ms = (time.perf_counter() - started) * 1000.0
        stats = self._stats.get(api_key)
        if stats is None:
            stats = self._stats[api_key] = _ApiStats()
        stats.buckets[bisect.bisect_left(LATENCY_BUCKETS_MS, ms)] += 1
        stats.sum_ms += ms
        for code in errors:
            self.error(api_key, code)

    def error(self, api_key: int, code: int) -> None:
        key = (api_key, code)
        self._errors[key] = self._errors.get(key, 0) + 1

    def describe(self):
        return []

    def collect(self):
        requests = CounterMetricFamily("kafka_network_requestmetrics_requests", "Requests answered, by API",
                                       labels=["request"])
        latency = HistogramMetricFamily("kafka_network_requestmetrics_totaltimems",
                                        "Time from a request's arrival to its response being ready, ms",
                                        labels=["request"])
        errors = CounterMetricFamily("kafka_network_requestmetrics_errors",
                                     "Error codes answered (other than NONE), by API and error",
                                     labels=["request", "error"])
        throttle = SummaryMetricFamily("kafka_network_requestmetrics_throttletimems",
                                       "Client quota throttle time of the requests answered, ms", labels=["request"])
        throttled = dict(self._throttle_ms)
        for api_key, stats in sorted(dict(self._stats).items()):
            counts, total, cumulative = list(stats.buckets), stats.sum_ms, []
            running = 0
            for label, n in zip(_BUCKET_LABELS, counts):
                running += n
                cumulative.append((label, running))
            name = api_name(api_key)
            requests.add_metric([name], running)
            latency.add_metric([name], cumulative, total)
            throttle.add_metric([name], running, throttled.get(api_key, 0.0))
        for (api_key, code), n in sorted(dict(self._errors).items()):
            errors.add_metric([api_name(api_key), error_name(code)], n)
        return [requests, errors, latency, throttle]


def response_errors(body) -> list[int]:
    """The non-zero error codes of a response body given as a dict (the top level's and those of
    its topics and partitions, two lists deep); an encoded response (bytes) is not parsed."""
    if not isinstance(body, dict):
        return []
    found = []
    _collect(body, found, 3)
    return found


def _collect(body: dict, found: list, depth: int) -> None:
    code = body.get("error_code")
    if code:
        found.append(code)
    if depth <= 0:
        return
    for value in body.values():
        if isinstance(value, list):
            for item in value:
                if isinstance(item, dict):
                    _collect(item, found, depth - 1)
                else:
                    break
