"""The hand-written Produce request decoder and response encoder agree with kio, for every served
version, and reject truncated or inconsistent frames with a ValueError."""
from __future__ import annotations

import datetime
import os
import random

import pytest
from kio.index import load_request_schema

from logcore.broker.api_versions import windows
from logcore.wire.produce_codec import (PartitionProduceData, ProduceRequestBody, TopicProduceData,
                                        decode_produce_request, encode_produce_response, encode_produce_results)
from logcore.wire.protocol import ProtocolError, encode_response, parse_request, response

from broker_helpers import request_frame


def _kio_request(version: int, rng: random.Random):
    schema = load_request_schema(0, version)
    mod = __import__(schema.__module__, fromlist=["x"])
    topics = []
    for t in range(rng.randint(0, 3)):
        parts = tuple(mod.PartitionProduceData(index=rng.randint(0, 2**31 - 1),
                                               records=rng.choice([None, b"", os.urandom(rng.randint(1, 3000))]))
                      for _ in range(rng.randint(0, 4)))
        topics.append(mod.TopicProduceData(name=f"t{t}-é{rng.randint(0, 9)}", partition_data=parts))
    return schema(transactional_id=rng.choice([None, "", "tx-1"]), acks=rng.choice([-1, 0, 1]),
                  timeout=datetime.timedelta(milliseconds=rng.randint(0, 60000)), topic_data=tuple(topics))


@pytest.mark.parametrize("version", range(3, 11))
def test_decoder_matches_kio(version):
    rng = random.Random(version)
    for i in range(30):
        body = _kio_request(version, rng)
        frame = request_frame(0, version, body, correlation_id=i, client_id=rng.choice(["c", "librdkafka"]))[4:]
        cid, client_id, ours = decode_produce_request(frame, version)
        assert cid == i and client_id in ("c", "librdkafka")
        assert (ours.transactional_id, ours.acks) == (body.transactional_id, body.acks)
        assert ours.timeout_ms == body.timeout // datetime.timedelta(milliseconds=1)
        assert [(t.name, [(p.index, None if p.records is None else bytes(p.records)) for p in t.partition_data])
                for t in ours.topic_data] == \
               [(t.name, [(p.index, p.records) for p in t.partition_data]) for t in body.topic_data]
        # Trailing bytes are ignored, as parse_request does for the other APIs.
        assert decode_produce_request(frame + b"\0\1", version)[2] == ours


def test_records_are_views_of_a_writable_frame():
    body = _kio_request(9, random.Random(3))
    frame = bytearray(request_frame(0, 9, body)[4:])
    _, _, ours = decode_produce_request(frame, 9)
    views = [p.records for t in ours.topic_data for p in t.partition_data if p.records]
    assert views and all(not v.readonly and v.obj is frame for v in views)


@pytest.mark.parametrize("version", [3, 8, 9, 10])
def test_truncated_and_bad_frames_are_protocol_errors(version):
    body = _kio_request(version, random.Random(11))
    while not body.topic_data:
        body = _kio_request(version, random.Random(random.random()))
    frame = request_frame(0, version, body)[4:]
    served = windows()
    for cut in range(8, len(frame), max(1, len(frame) // 60)):
        with pytest.raises(ProtocolError, match="malformed api key 0"):
            parse_request(frame[:cut], served)
    huge = frame[:8] + b"\x7f\xff" + b"x" * 4             # client id longer than the frame
    with pytest.raises(ProtocolError, match="run past the end"):
        parse_request(huge, served)


@pytest.mark.parametrize("version", range(3, 11))
def test_encoder_matches_kio(version):
    rng = random.Random(100 + version)
    for i in range(40):
        topics = []
        for t in range(rng.randint(0, 3)):
            parts = []
            for p in range(rng.randint(0, 4)):
                parts.append({"index": p, "error_code": rng.choice([0, 2, 87]),
                              "base_offset": rng.randint(-1, 2**40), "log_append_time": rng.choice([-1, 2**40]),
                              "log_start_offset": rng.randint(-1, 2**30),
                              "record_errors": rng.choice([[], [{"batch_index": 1, "batch_index_error_message": None},
                                                               {"batch_index": 2, "batch_index_error_message": "bad"}]]),
                              "error_message": rng.choice([None, "", "the reason é"])})
            topics.append({"name": f"topic-{t}", "partition_responses": parts})
        body = {"responses": topics, "throttle_time": rng.choice([0, 7])}
        assert encode_produce_response(i, version, body) == encode_response(i, response(0, version, body))


def test_encoder_rejects_what_it_cannot_encode():
    ok = [("t", [(0, 0, 5, -1, 0, None)])]
    assert encode_produce_results(1, 9, ok) == encode_produce_response(1, 9, {"responses": [
        {"name": "t", "partition_responses": [{"index": 0, "error_code": 0, "base_offset": 5,
                                               "log_append_time": -1, "log_start_offset": 0}]}]})
    with pytest.raises(ValueError, match="version 11 is not encoded here"):
        encode_produce_results(1, 11, ok)
    with pytest.raises(ValueError, match="out of range"):
        encode_produce_results(1, 9, [("t", [(0, 2**15, 5, -1, 0, None)])])     # an int16 error code
    with pytest.raises(TypeError):
        encode_produce_results(1, 9, [("t", [(0, 0, 5, -1, 0, b"bytes, not str")])])
    with pytest.raises(ValueError, match="pair"):
        encode_produce_results(1, 9, [("t", [(0, 0, 5, -1, 0, None, [(1, "a", "b")])])])
    with pytest.raises(ValueError, match="6 fields"):
        encode_produce_results(1, 9, [("t", [(0, 0, 5)])])
    with pytest.raises(TypeError):
        encode_produce_results(1, 9, [(b"t", [])])


def test_decoded_request_is_the_codec_classes():
    body = _kio_request(9, random.Random(4))
    while not any(t.partition_data for t in body.topic_data):
        body = _kio_request(9, random.Random(random.random()))
    _, _, ours = decode_produce_request(request_frame(0, 9, body)[4:], 9)
    assert type(ours) is ProduceRequestBody and all(type(t) is TopicProduceData for t in ours.topic_data)
    assert all(type(p) is PartitionProduceData for t in ours.topic_data for p in t.partition_data)
    assert ours == ProduceRequestBody(ours.transactional_id, ours.acks, ours.timeout_ms, [
        TopicProduceData(t.name, [PartitionProduceData(p.index, p.records) for p in t.partition_data])
        for t in ours.topic_data])
