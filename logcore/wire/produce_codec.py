"""Produce requests decoded and Produce responses encoded by hand (v3..v10), in C.

kio copies every partition's records out of the frame into a new bytes object, and builds a
dataclass tree for every request and response; at tens of thousands of produce requests a
second that is a large part of the broker's CPU. This decoder leaves each partition's records
as a memoryview of the frame (the log stamps offsets into it and writes it: no copy), and the
encoder packs the response fields directly. Both are C (logcore/records/producewire.c, in the
_fastcodec module): a Java producer sends a request per 16 KiB batch per partition, and field by
field in Python the two cost about a hundred interpreted calls per request. The byte layouts
are Kafka's ProduceRequest and ProduceResponse schemas, the same that kio reads and writes
(tests compare the two); the tagged fields this broker never sets (current leader, node
endpoints) are left out, as kio leaves out a tagged field at its default.
"""
from __future__ import annotations

from dataclasses import dataclass

from logcore.records import wire_codec


@dataclass(slots=True)
class PartitionProduceData:
    index: int
    records: memoryview | None       # a view of the request frame (writable if the frame is)


@dataclass(slots=True)
class TopicProduceData:
    name: str
    partition_data: list[PartitionProduceData]


@dataclass(slots=True)
class ProduceRequestBody:
    """The fields of a ProduceRequest that the broker uses (kio's names)."""
    transactional_id: str | None
    acks: int
    timeout_ms: int
    topic_data: list[TopicProduceData]


def decode_produce_request(frame, version: int) -> tuple[int, str | None, ProduceRequestBody]:
    """(correlation_id, client_id, body) of a Produce request frame (size prefix removed).

    Raises ValueError (with the position) on a malformed frame; trailing bytes are ignored, as
    Kafka's parser and parse_request ignore them.
    """
    return wire_codec.decode_produce_request(frame, version, ProduceRequestBody, TopicProduceData,
                                             PartitionProduceData)


def encode_produce_response(correlation_id: int, version: int, body: dict) -> bytes:
    """The whole frame (size prefix included) of Produce response `version` for the handler's
    dict (Kafka field names: responses / partition_responses / index, error_code, ...)."""
    topics = [(topic["name"], [
        (p["index"], int(p["error_code"]), p["base_offset"], p["log_append_time"], p.get("log_start_offset", -1),
         p.get("error_message"), [(e["batch_index"], e.get("batch_index_error_message"))
                                  for e in p.get("record_errors") or ()])
        for p in topic["partition_responses"]]) for topic in body["responses"]]
    return encode_produce_results(correlation_id, version, topics, int(body.get("throttle_time", 0)))


def encode_produce_results(correlation_id: int, version: int, topics: list, throttle_time: int = 0) -> bytes:
    """The whole frame of Produce response `version` from tuples: topics is a list of (name,
    partitions), each partition (index, error_code, base_offset, log_append_time,
    log_start_offset, error_message[, record_errors as (batch_index, message) pairs])."""
    return wire_codec.encode_produce_results(correlation_id, version, topics, throttle_time)
