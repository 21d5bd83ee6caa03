"""The hand-written Fetch request encoder writes exactly what kio writes (v4..v12), and Kafka's
broker reads what it writes (test_wire_client.py sends it to Apache Kafka and to seglog); the C
decoder reads exactly what kio reads (v4..v16), damaged frames included."""
from __future__ import annotations

import collections
import datetime
import random
import re
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logcore.wire.fetch_request import (DECODED_FIRST, DECODED_LAST, FetchRequestTemplate, decode_fetch_request,
                                        encode_fetch_request)
from logcore.wire.protocol import ProtocolError, _request_reader, build, encode_request, parse_request, request_type

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
        session = {}
        if data.draw(st.booleans()):
            session = {"session_id": data.draw(I32), "session_epoch": data.draw(I32)}
            template.set_session(session["session_id"], session["session_epoch"])
            head = {**head, **session}
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


# ------------------------------------------------------------------------------ the C decoder

def _kio_read(frame: bytes, version: int):
    """(correlation_id, client_id, body) as kio's reader gives them: the reference."""
    read_header, read_body, _ = _request_reader(1, version)
    header, used = read_header(frame, 0)
    return header.correlation_id, header.client_id, read_body(frame, used)[0]


def _null_array(body) -> bool:
    """Whether kio read a null where the schema has a (non-nullable) array: kio gives None
    there; Kafka's parser refuses the request, and so does the C decoder."""
    return body.topics is None or any(t.partitions is None for t in body.topics) or any(
        t is None for t in getattr(body, "forgotten_topics_data", ()) or ()) or \
        getattr(body, "forgotten_topics_data", ()) is None or \
        any(t.partitions is None for t in getattr(body, "forgotten_topics_data", ()) or ())


UUIDS = st.one_of(st.just(uuid.UUID(int=0)), st.uuids())


@st.composite
def any_fetch_bodies(draw) -> dict:
    """Fetch bodies with every field of v4..v16 given (build drops those a version lacks)."""
    body = draw(fetch_bodies())
    for topic in body["topics"]:
        topic["topic_id"] = draw(UUIDS)
    for topic in body.get("forgotten_topics_data", ()):
        topic["topic_id"] = draw(UUIDS)
    if draw(st.booleans()):
        body["replica_state"] = {"replica_id": draw(I32), "replica_epoch": draw(I64)}
    body["max_wait"] = draw(I32)          # negative too: kio reads a timedelta of any sign
    return body


@settings(max_examples=400, deadline=None)
@given(version=st.integers(DECODED_FIRST, DECODED_LAST), correlation=I32, client_id=st.one_of(st.none(), NAME),
       body=any_fetch_bodies())
def test_c_decoder_matches_kio(version, correlation, client_id, body):
    request = build(request_type(1, version), body)
    frame = encode_request(1, version, correlation, client_id, request)[4:]
    ours = decode_fetch_request(frame, version)
    assert ours == _kio_read(frame, version)          # (kio reads the zero topic id back as None)
    assert ours[:2] == (correlation, client_id)
    assert type(ours[2]) is type(request)
    # byte for byte: kio writes the decoded request back as the same frame
    assert encode_request(1, version, correlation, client_id, ours[2])[4:] == frame
    assert decode_fetch_request(frame + b"\0\1", version) == ours      # trailing bytes ignored
    assert parse_request(frame, {1: (4, 16)}).body == ours[2]


def _mutated(frame: bytes, rng: random.Random) -> bytes:
    data = bytearray(frame)
    what = rng.randrange(4)
    if what == 0:
        return bytes(data[:rng.randrange(len(data))])                     # truncated
    if what == 1:
        for _ in range(rng.randint(1, 3)):
            data[rng.randrange(10, len(data))] = rng.choice([0, 1, 0x7F, 0x80, 0xFF, rng.randrange(256)])
        return bytes(data)
    if what == 2:
        at = rng.randrange(10, len(data))
        return bytes(data[:at] + bytes(rng.randrange(256) for _ in range(rng.randint(1, 4))) + data[at:])
    at = rng.randrange(10, len(data))
    return bytes(data[:at] + data[at + rng.randint(1, 4):])


def _damaged_frames(version: int, rng: random.Random, count: int):
    cls = request_type(1, version)
    frames = []
    for i in range(12):
        body = {"max_wait": rng.randint(-5, 500), "min_bytes": 1, "isolation_level": rng.randint(0, 1),
                "cluster_id": rng.choice([None, "c"]), "rack_id": rng.choice(["", "r1"]),
                "replica_state": {"replica_id": 2, "replica_epoch": 7},
                "topics": [{"topic": f"t{t}", "topic_id": uuid.UUID(int=rng.getrandbits(128)),
                            "partitions": [{"partition": p, "fetch_offset": rng.getrandbits(40),
                                            "partition_max_bytes": 1 << 20, "current_leader_epoch": 3}
                                           for p in range(rng.randint(0, 3))]} for t in range(rng.randint(0, 2))],
                "forgotten_topics_data": [{"topic": "f", "topic_id": uuid.UUID(int=5), "partitions": [1, 2]}]
                * rng.randint(0, 1)}
        frames.append(encode_request(1, version, i, rng.choice([None, "", "consumer-1"]), build(cls, body))[4:])
    return [_mutated(rng.choice(frames), rng) for _ in range(count)]


@pytest.mark.parametrize("version", range(DECODED_FIRST, DECODED_LAST + 1))
def test_c_decoder_and_kio_agree_on_damaged_frames(version):
    """Truncated and garbled frames: the C decoder reads what kio reads, the same way, and
    refuses what kio refuses with a ValueError naming a byte (ProtocolError through
    parse_request); it never crashes. Where the two differ, the C decoder does what Kafka's own
    parser does: it refuses a null where the schema has an array (kio reads None), reads a null
    cluster id, which the schema allows (kio refuses it), skips a tagged field it does not know
    (kio refuses it), and refuses an array longer than the frame
    before reading it (kio allocates it first, and a count of billions aborts the process: kio is
    not run on those)."""
    served = {1: (DECODED_FIRST, DECODED_LAST)}
    outcomes = collections.Counter()
    for frame in _damaged_frames(version, random.Random(version), 1500):
        try:
            ours = decode_fetch_request(frame, version)
        except ValueError as exc:
            ours = exc
            assert re.search(r"byte \d+|frame", str(exc)), exc
            with pytest.raises(ProtocolError, match=f"malformed api key 1 v{version} request|shorter than"):
                parse_request(frame, served)
            if "cannot fit the frame" in str(exc):
                outcomes["refused: array longer than the frame"] += 1
                continue
        try:
            reference = _kio_read(frame, version)
        except KeyError as exc:    # kio's refusal of an unknown tag: Kafka skips it
            assert "Unknown tagged field" in str(exc)
            outcomes["unknown tag"] += 1
            continue
        except Exception as exc:   # noqa: BLE001 - kio raises several types; the reference only says "malformed"
            if type(exc).__name__ == "UnexpectedNull" and not isinstance(ours, ValueError):
                # The C decoder refuses a null topic name or rack id: kio's null was a cluster
                # id's, nullable in the schema.
                assert version >= 12, frame.hex()
                outcomes["null cluster id"] += 1
                continue
            assert isinstance(ours, ValueError), frame.hex()
            outcomes["refused by both"] += 1
            continue
        if _null_array(reference[2]):
            assert isinstance(ours, ValueError) and "null array" in str(ours), frame.hex()
            outcomes["null array"] += 1
        else:
            assert ours == reference, frame.hex()
            outcomes["read the same"] += 1
    assert outcomes["read the same"] > 100 and outcomes["refused by both"] > 100, outcomes


def test_c_decoder_refuses_other_versions():
    with pytest.raises(ValueError, match="version 17 is not decoded here"):
        decode_fetch_request(b"\0" * 40, 17)
