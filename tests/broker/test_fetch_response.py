"""The hand-written Fetch response encoder writes exactly what kio writes, for every served version."""
from __future__ import annotations

import os
import random
import uuid

import pytest

from logcore.broker.fetch_response import INLINE_MAX, encode_fetch_response
from logcore.log.file_slice import FileSlice
from logcore.wire.protocol import encode_response, response


def _body(rng: random.Random, slice_file: str | None) -> tuple[dict, dict]:
    """(body for our encoder, the same with every records field as bytes, for kio)."""
    topics, plain_topics = [], []
    for t in range(rng.randint(0, 3)):
        parts, plain_parts = [], []
        for p in range(rng.randint(0, 4)):
            kind = rng.choice(["none", "empty", "small", "large", "slice" if slice_file else "small"])
            data = {"none": None, "empty": b"", "small": os.urandom(rng.randint(1, 300)),
                    "large": os.urandom(INLINE_MAX + rng.randint(1, 5000)), "slice": None}[kind]
            records, plain = data, data
            if kind == "slice":
                position, size = rng.randint(0, 1000), rng.randint(1, 5000)
                records = FileSlice(os.open(slice_file, os.O_RDONLY), position, size, 0, slice_file)
                plain = records.read()
            aborted = rng.choice([None, [], [{"producer_id": rng.randint(0, 2**40), "first_offset": i}
                                             for i in range(rng.randint(1, 3))]])
            res = {"partition_index": p, "error_code": rng.choice([0, 1, 3]),
                   "high_watermark": rng.randint(-1, 2**40), "last_stable_offset": rng.randint(-1, 2**40),
                   "log_start_offset": rng.randint(-1, 2**30), "preferred_read_replica": -1,
                   "aborted_transactions": aborted, "records": records}
            if rng.random() < 0.3:     # a follower's divergence, a leader hint (v12+ tagged fields)
                res["diverging_epoch"] = {"epoch": rng.randint(0, 99), "end_offset": rng.randint(0, 2**40)}
            if rng.random() < 0.3:
                res["current_leader"] = {"leader_id": rng.randint(0, 9), "leader_epoch": rng.randint(0, 99)}
            parts.append(res)
            plain_parts.append({**res, "records": plain})
        topic = {"topic": f"topic-{t}-{rng.randint(0, 99)}", "topic_id": uuid.uuid4()}
        topics.append({**topic, "partitions": parts})
        plain_topics.append({**topic, "partitions": plain_parts})
    head = {"throttle_time": rng.choice([0, 5]), "error_code": rng.choice([0, 70]), "session_id": 0}
    return {**head, "responses": topics}, {**head, "responses": plain_topics}


@pytest.mark.parametrize("version", range(4, 17))
def test_matches_kio(version, tmp_path):
    path = str(tmp_path / "segment")
    with open(path, "wb") as f:
        f.write(os.urandom(8000))
    rng = random.Random(version)
    for _ in range(40):
        ours, plain = _body(rng, path)
        encoded = encode_fetch_response(1234, version, ours)
        try:
            expected = encode_response(1234, response(1, version, plain))
            assert encoded.size == len(expected)
            assert encoded.to_bytes() == expected
        finally:
            encoded.close()
        assert all(s.closed for s in encoded.slices())


def test_slices_are_separate_pieces(tmp_path):
    path = str(tmp_path / "segment")
    with open(path, "wb") as f:
        f.write(b"x" * 4096)
    s = FileSlice(os.open(path, os.O_RDONLY), 100, 3000, 0, path)
    body = {"responses": [{"topic": "t", "topic_id": uuid.uuid4(), "partitions": [
        {"partition_index": 0, "error_code": 0, "high_watermark": 1, "last_stable_offset": 1,
         "log_start_offset": 0, "aborted_transactions": None, "records": s}]}]}
    encoded = encode_fetch_response(1, 11, body)
    assert [type(p) for p in encoded.pieces] == [bytes, FileSlice, bytes]
    encoded.close()
    assert s.closed


@pytest.mark.parametrize("body, error, message", [
    ({"responses": [{"topic": "t", "topic_id": uuid.uuid4(), "partitions": [{"partition_index": 0}]}]},
     KeyError, "error_code"),
    ({"responses": [{"topic": "t", "topic_id": uuid.uuid4(), "partitions": [
        {"partition_index": 2**31, "error_code": 0, "high_watermark": 0, "last_stable_offset": 0,
         "log_start_offset": 0}]}]}, ValueError, "partition_index: 2147483648 is out of range"),
    ({"responses": [{"topic_id": b"short", "partitions": []}]}, ValueError, "16 bytes, not 5"),
    ({"responses": [1]}, TypeError, "must be a dict"),
])
def test_a_bad_body_is_a_clear_error(body, error, message):
    with pytest.raises(error, match=message):
        encode_fetch_response(1, 13, body)
