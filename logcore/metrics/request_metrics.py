"""Per-API request metrics: Kafka's RequestMetrics (RequestsPerSec, ErrorsPerSec, TotalTimeMs)
as the JMX exporter names them. Counted once per request (never per partition or record)."""
from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Histogram

from logcore.wire import api_keys, error_codes

# TotalTimeMs buckets, in milliseconds (Kafka's timer reports quantiles; a histogram lets
# Prometheus compute them over any window and across brokers).
LATENCY_BUCKETS_MS = (0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000)


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


class RequestMetrics:
    """requests_total, errors_total and the totaltimems histogram, labelled by request; the
    labelled children are cached per API key, so a request costs two dict look-ups, an
    increment and a histogram observation."""

    def __init__(self, registry: CollectorRegistry | None = None):
        kw = {"registry": registry}
        self._requests = Counter("kafka_network_requestmetrics_requests", "Requests answered, by API",
                                 ["request"], **kw)
        self._errors = Counter("kafka_network_requestmetrics_errors",
                               "Error codes answered (other than NONE), by API and error",
                               ["request", "error"], **kw)
        self._time = Histogram("kafka_network_requestmetrics_totaltimems",
                               "Time from a request's arrival to its response being ready, ms",
                               ["request"], buckets=LATENCY_BUCKETS_MS, **kw)
        self._by_api: dict[int, tuple] = {}
        self._error_children: dict[tuple[int, int], object] = {}

    def _children(self, api_key: int) -> tuple:
        children = self._by_api.get(api_key)
        if children is None:
            name = api_name(api_key)
            children = self._by_api[api_key] = (self._requests.labels(name), self._time.labels(name))
        return children

    def done(self, api_key: int, started: float, errors=()) -> None:
        """A request answered: `started` is its time.perf_counter() at arrival, `errors` the
        error codes its response carries (NONE left out)."""
        requests, latency = self._children(api_key)
        requests.inc()
        latency.observe((time.perf_counter() - started) * 1000.0)
        for code in errors:
            self.error(api_key, code)

    def error(self, api_key: int, code: int) -> None:
        child = self._error_children.get((api_key, code))
        if child is None:
            child = self._error_children[(api_key, code)] = self._errors.labels(api_name(api_key), error_name(code))
        child.inc()


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
