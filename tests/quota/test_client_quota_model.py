"""The client quota model without a broker: Kafka's entity precedence, the sanitized entity
paths, the values as Kafka stores them, and the sampled rate's throttle times
(logcore/quota/client_quota_entity.py, rate_sensor.py, client_quotas.py)."""
from __future__ import annotations

import pytest

from logcore.quota.client_quota_entity import (ClientQuotaEntity, QuotaEntityError, check_quota_value,
                                               parse_quota_config)
from logcore.quota.client_quotas import ClientQuotas
from logcore.quota.rate_sensor import RateSensor


class _Req:
    def __init__(self, client_id, principal=None):
        self.client_id = client_id
        if principal is not None:
            self.principal = principal


def test_entity_paths_round_trip_sanitized():
    e = ClientQuotaEntity.from_parts([("user", "CN=a b*"), ("client-id", None)])
    assert e.path == "users/CN%3Da%20b%2A/clients/<default>"
    assert ClientQuotaEntity.from_path(e.path) == e
    assert ClientQuotaEntity.from_parts([("client-id", "x.y-z_1")]).path == "clients/x.y-z_1"
    assert ClientQuotaEntity.from_parts([("user", None)]).path == "users/<default>"
    for bad in ([("user", "a"), ("user", "b")], [("ip", "1.2.3.4")], [("group", "g")], []):
        with pytest.raises(QuotaEntityError):
            ClientQuotaEntity.from_parts(bad)


def test_values_as_kafka_stores_them():
    assert check_quota_value("producer_byte_rate", 1024.0) == "1024"
    assert check_quota_value("request_percentage", 200.0) == "200.0"
    with pytest.raises(QuotaEntityError, match="cannot be a fractional value"):
        check_quota_value("consumer_byte_rate", 10.5)
    with pytest.raises(QuotaEntityError, match="Invalid configuration key"):
        check_quota_value("producer_rate", 10)
    with pytest.raises(QuotaEntityError, match="does not throttle"):
        check_quota_value("controller_mutation_rate", 10)
    with pytest.raises(QuotaEntityError, match="positive"):
        check_quota_value("producer_byte_rate", 0)
    # the SCRAM credentials in the same user znode are not quotas
    assert parse_quota_config({"SCRAM-SHA-256": "salt=..", "producer_byte_rate": "10"}) == {"producer_byte_rate": 10.0}


@pytest.mark.parametrize("configured, expected", [
    # most precise first, per Kafka's order
    (["users/alice/clients/app", "users/alice/clients/<default>", "users/alice", "clients/app"],
     "users/alice/clients/app"),
    (["users/alice/clients/<default>", "users/alice", "users/<default>/clients/app"], "users/alice/clients/<default>"),
    (["users/alice", "users/<default>/clients/app", "clients/app"], "users/alice"),
    (["users/<default>/clients/app", "users/<default>/clients/<default>", "clients/app"], "users/<default>/clients/app"),
    (["users/<default>/clients/<default>", "users/<default>", "clients/app"], "users/<default>/clients/<default>"),
    (["users/<default>", "clients/app", "clients/<default>"], "users/<default>"),
    (["clients/app", "clients/<default>", "users/bob"], "clients/app"),
    (["clients/<default>", "users/bob/clients/app"], "clients/<default>"),
    (["users/bob", "clients/other"], None),
])
def test_kafka_precedence(configured, expected):
    quotas = ClientQuotas()
    quotas.replace_all({ClientQuotaEntity.from_path(p): {"producer_byte_rate": float(i + 1)}
                        for i, p in enumerate(configured)})
    found = quotas.quota_of("producer_byte_rate", "alice", "app")
    assert (found[1].path if found else None) == expected


def test_precedence_is_per_setting():
    quotas = ClientQuotas()
    quotas.replace_all({ClientQuotaEntity.from_path("users/alice"): {"producer_byte_rate": 10.0},
                        ClientQuotaEntity.from_path("clients/app"): {"consumer_byte_rate": 20.0}})
    assert quotas.quota_of("consumer_byte_rate", "alice", "app")[1].path == "clients/app"
    assert quotas.quota_of("producer_byte_rate", "alice", "app")[1].path == "users/alice"


def test_rate_and_throttle_time_as_kafka_computes_them():
    sensor = RateSensor(samples=11, window_s=1.0)
    sensor.record(1000, 0.0)
    # one window in: measured over samples - 1 = 10 windows (a burst passes)
    assert sensor.rate(0.0) == pytest.approx(100.0)
    assert sensor.throttle_ms(100.0, 0.0) == 0
    sensor.record(1000, 500.0)
    # 2000 over 10.5 s against 100/s: (190.5 - 100) / 100 x 10.5 s
    assert sensor.throttle_ms(100.0, 500.0) == round((2000 / 10.5 - 100) / 100 * 10500)
    # every window expired after samples x window: nothing measured any more
    assert sensor.rate(11_600.0) == 0.0


def test_group_shared_by_the_entity_that_applies():
    now = [0.0]
    quotas = ClientQuotas(samples=2, window_s=1.0, clock=lambda: now[0])
    quotas.replace_all({ClientQuotaEntity.from_path("users/alice"): {"producer_byte_rate": 1000.0},
                        ClientQuotaEntity.from_path("clients/<default>"): {"producer_byte_rate": 1000.0}})
    # users/alice: one rate for all of alice's client ids
    assert quotas.produced(_Req("a", "User:alice"), 900) == 0
    assert quotas.produced(_Req("b", "User:alice"), 900) > 0
    # clients/<default>: a rate per client id
    assert quotas.produced(_Req("a"), 900) == 0
    assert quotas.produced(_Req("b"), 900) == 0
    # a fetch over the quota is taken back (answered empty) and throttled
    quotas.replace_all({ClientQuotaEntity.from_path("clients/c"): {"consumer_byte_rate": 1000.0}})
    assert quotas.fetch_limit(_Req("c")) == 1000
    assert quotas.fetched(_Req("c"), 5000) > 0
    assert quotas.fetched(_Req("c"), 500) == 0
    assert not ClientQuotas().active
