"""The hand-written Fetch request encoder writes exactly what kio writes (v4..v12), and Kafka's
broker reads what it writes (test_wire_client.py sends it to Apache Kafka and to seglog)."""
from __future__ import annotations

import datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logcore.wire.fetch_request import FetchRequestTemplate, encode_fetch_request
from logcore.wire.protocol import build, encode_request, parse_request, request_type

I32 = st.integers(-2**31, 2**31 - 1)
I64 = st.integers(-2**63, 2**63 - 1)
NAME = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)


def _maybe(draw, key: str, strategy, into: dict) -> None:
    """Leave the field out (kio then takes the schema's default) or give it."""
    if draw(st.booleans()):
        into[key] = draw(strategy)


@st.composite
def fetch_bodies(draw) -> dict:
    topics = []
    for _ in range(draw(st.integers(0, 3))):
        partitions = []
        for _ in range(draw(st.integers(0, 4))):
            p = {"partition": draw(I32), "fetch_offset": draw(I64), "partition_max_bytes": draw(I32)}
            for key, strategy in (("current_leader_epoch", I32), ("last_fetched_epoch", I32),
                                  ("log_start_offset", I64)):
                _maybe(draw, key, strategy, p)
            partitions.append(p)
        topics.append({"topic": draw(NAME), "partitions": partitions})
    body = {"max_wait": draw(st.one_of(st.integers(0, 2**31 - 1),
                                       st.integers(0, 2**31 - 1).map(lambda ms: datetime.timedelta(milliseconds=ms)))),
            "min_bytes": draw(I32), "topics": topics}
    for key, strategy in (("replica_id", I32), ("max_bytes", I32), ("isolation_level", st.integers(0, 1)),
                          ("session_id", I32), ("session_epoch", I32), ("rack_id", NAME),
                          ("cluster_id", st.one_of(st.none(), NAME)),
                          ("forgotten_topics_data", st.lists(st.fixed_dictionaries(
                              {"topic": NAME, "partitions": st.lists(I32, max_size=3)}), max_size=2))):
        _maybe(draw, key, strategy, body)
    return body


@settings(max_examples=300, deadline=None)
@given(version=st.integers(4, 12), correlation=I32, client_id=st.one_of(st.none(), NAME), body=fetch_bodies())
def test_matches_kio(version, correlation, client_id, body):
    ours = encode_request(1, version, correlation, client_id, body)
    assert ours == encode_fetch_request(correlation, client_id, version, body)   # the dict path is ours
    kio = encode_request(1, version, correlation, client_id, build(request_type(1, version), body))
    assert ours == kio
    # and it reads back (the broker's parser) as the same request
    parsed = parse_request(ours[4:], {1: (4, 12)})
    assert (parsed.api_version, parsed.correlation_id, parsed.client_id) == (version, correlation, client_id)
    assert [t.topic for t in parsed.body.topics] == [t["topic"] for t in body["topics"]]


def test_a_version_with_topic_ids_goes_through_kio():
    body = {"max_wait": 0, "min_bytes": 1, "topics": []}
    with pytest.raises(ValueError, match="version 13 is not encoded here"):
        encode_fetch_request(1, "c", 13, body)
    assert encode_request(1, 13, 1, "c", body)[4:8] == b"\x00\x01\x00\x0d"     # kio wrote it


@pytest.mark.parametrize("body, message", [
    ({"min_bytes": 1, "topics": []}, "has no 'max_wait' field"),
    ({"max_wait": 0, "min_bytes": 1, "topics": [{"topic": "t", "partitions": [{"partition": 0}]}]},
     "has no 'fetch_offset' field"),
    ({"max_wait": 0, "min_bytes": 2**31, "topics": []}, "field is out of range"),
])
def test_a_bad_body_is_a_clear_error(body, message):
    with pytest.raises(ValueError, match=message):
        encode_request(1, 12, 1, "c", body)


@settings(max_examples=200, deadline=None)
@given(correlation=I32, client_id=st.one_of(st.none(), NAME), body=fetch_bodies(), data=st.data())
def test_a_patched_template_is_the_request_encoded_afresh(correlation, client_id, body, data):
    """A follower's template, patched with each partition's fields, is byte for byte the
    request encode_fetch_request writes for the same fields (topics in the order their first
    partition comes, as the fetcher groups them), whatever the partitions' order across
    topics; patching it again for the next round leaves nothing of the previous one."""
    head = {k: v for k, v in body.items() if k != "topics"}
    parts = [(t["topic"], p["partition"]) for t in body["topics"] for p in t["partitions"]]
    if len(set(parts)) != len(parts):
        return                                   # one follower fetches a partition once
    order = data.draw(st.permutations(parts))
    template = FetchRequestTemplate(client_id, 12, head, order)
    for _ in range(2):
        fields = {key: data.draw(st.tuples(I32, I64, I32, I64, I32)) for key in order}
        for i, key in enumerate(order):
            template.set_partition(i, *fields[key])
        names = ("current_leader_epoch", "fetch_offset", "last_fetched_epoch", "log_start_offset",
                 "partition_max_bytes")
        topics: dict[str, list] = {}
        for topic, index in order:
            topics.setdefault(topic, []).append({"partition": index, **dict(zip(names, fields[(topic, index)]))})
        expect = {**head, "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()]}
        ours = encode_request(1, 12, correlation, client_id, template)
        assert ours == encode_fetch_request(correlation, client_id, 12, expect)


def test_a_template_goes_out_only_as_built():
    template = FetchRequestTemplate("replica-fetcher-1", 12, {"max_wait": 500, "min_bytes": 1}, [("t", 0)])
    with pytest.raises(ValueError, match="built for v12 and client id 'replica-fetcher-1' cannot go out as v11"):
        encode_request(1, 11, 1, "replica-fetcher-1", template)
    with pytest.raises(ValueError, match="cannot go out as v12 for 'other'"):
        encode_request(1, 12, 1, "other", template)
    with pytest.raises(ValueError, match="for v12"):
        FetchRequestTemplate("c", 11, {"max_wait": 0, "min_bytes": 1}, [])
