"""Bounded fuzzing: mutated valid request frames never crash or hang the broker, nor touch
acknowledged data."""
from __future__ import annotations

import datetime
import socket
import struct

import pytest

pytest.importorskip("confluent_kafka")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from broker_helpers import (api_versions_frame, connect, consume_all, create, ping, produce,  # noqa: E402
                            recv_frame, request_frame)
from logcore.records.batch import build_batch  # noqa: E402
from logcore.wire.protocol import ZERO_UUID  # noqa: E402

TOPIC = "fuzzed"


def _valid_frames() -> list[bytes]:
    from kio.schema.create_topics.v4 import request as ct
    from kio.schema.describe_configs.v4 import request as dc
    from kio.schema.fetch.v12 import request as fe
    from kio.schema.join_group.v5 import request as jg
    from kio.schema.list_offsets.v7 import request as lo
    from kio.schema.metadata.v4 import request as md4
    from kio.schema.metadata.v12 import request as md
    from kio.schema.offset_commit.v8 import request as oc
    from kio.schema.produce.v10 import request as pr

    batch = build_batch([(b"k", b"fuzz-value", (), 1_700_000_000_000)] * 3)
    return [
        api_versions_frame(1),
        request_frame(3, 12, md.MetadataRequest(topics=(md.MetadataRequestTopic(name=TOPIC, topic_id=ZERO_UUID),),
                                                allow_auto_topic_creation=True,
                                                include_topic_authorized_operations=False)),
        request_frame(0, 10, pr.ProduceRequest(transactional_id=None, acks=-1,
                                               timeout=datetime.timedelta(seconds=5), topic_data=(
            pr.TopicProduceData(name=TOPIC, partition_data=(pr.PartitionProduceData(index=0, records=batch),)),))),
        request_frame(1, 12, fe.FetchRequest(
            replica_id=-1, max_wait=datetime.timedelta(milliseconds=50), min_bytes=1, max_bytes=1 << 20,
            isolation_level=0, session_id=0, session_epoch=-1, topics=(fe.FetchTopic(topic=TOPIC, partitions=(
                fe.FetchPartition(partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
                                  log_start_offset=-1, partition_max_bytes=1 << 20),)),),
            forgotten_topics_data=(), rack_id="")),
        request_frame(2, 7, lo.ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=(
            lo.ListOffsetsTopic(name=TOPIC, partitions=(
                lo.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=-1),)),))),
        request_frame(19, 4, ct.CreateTopicsRequest(topics=(ct.CreatableTopic(
            name="fuzz-created", num_partitions=1, replication_factor=1, assignments=(), configs=()),),
            timeout=datetime.timedelta(seconds=5), validate_only=True)),
        request_frame(3, 4, md4.MetadataRequest(topics=(md4.MetadataRequestTopic(name=TOPIC),),
                                                allow_auto_topic_creation=False)),
        request_frame(8, 8, oc.OffsetCommitRequest(
            group_id="fuzz-group", generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
            topics=(oc.OffsetCommitRequestTopic(name="fuzz-other", partitions=(oc.OffsetCommitRequestPartition(
                partition_index=0, committed_offset=1, committed_leader_epoch=-1, committed_metadata=""),)),))),
        request_frame(11, 5, jg.JoinGroupRequest(
            group_id="fuzz-join", session_timeout=datetime.timedelta(seconds=10),
            rebalance_timeout=datetime.timedelta(seconds=10), member_id="", group_instance_id=None,
            protocol_type="consumer", protocols=(jg.JoinGroupRequestProtocol(name="range", metadata=b"m"),))),
        request_frame(32, 4, dc.DescribeConfigsRequest(resources=(dc.DescribeConfigsResource(
            resource_type=2, resource_name=TOPIC, configuration_keys=("retention.ms",)),),
            include_synonyms=False, include_documentation=False)),
    ]


FRAMES = _valid_frames()

mutation = st.tuples(
    st.integers(0, len(FRAMES) - 1),
    st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=6),   # byte replacements
    st.one_of(st.none(), st.integers(0, 10**6)),                                  # truncate body at
    st.booleans(),                                                                # fix the size prefix
)


def _mutate(choice) -> bytes:
    index, flips, cut, fix_size = choice
    frame = bytearray(FRAMES[index])
    for pos, value in flips:
        frame[4 + pos % max(1, len(frame) - 4)] = value
    if cut is not None:
        frame = frame[:4 + cut % max(1, len(frame) - 4)]
    if fix_size:
        struct.pack_into(">i", frame, 0, len(frame) - 4)
    return bytes(frame)


def test_mutated_frames_do_not_crash_hang_or_corrupt(broker):
    create(broker, TOPIC, 1)
    before = [b"kept-%d" % i for i in range(50)]
    acked = produce(broker, TOPIC, before, acks="all")
    assert all(a[0] is None for a in acked)
    sent = [0]

    @settings(max_examples=150, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(mutation)
    def send_one(choice):
        data = _mutate(choice)
        with connect(broker, timeout=2) as s:
            try:
                s.sendall(data)
                s.settimeout(0.1)
                s.recv(1 << 16)
            except (TimeoutError, socket.timeout, ConnectionError):
                pass
        sent[0] += 1
        assert broker.proc.poll() is None, "the broker process died"
        if sent[0] % 50 == 0:
            assert ping(broker), "the broker stopped answering"

    send_one()
    assert broker.proc.poll() is None
    assert ping(broker)
    got = consume_all(broker, TOPIC, 1, 10**9, timeout=3)
    by_offset = {o: v for _, o, _, v, _ in got}
    assert [by_offset.get(o) for _, _, o, _ in acked] == before
    log = broker.log_text()
    assert "unexpected error" not in log and "failed; closing" not in log   # no handler crashed


def test_huge_count_at_every_position_is_refused_and_the_broker_keeps_serving(broker):
    """A count or length far past the frame's end (a 5-byte varint, an i32) written over each
    position after the API version of the frames with arrays: kio reserved room for such a
    count and aborted the broker. Every position rather than drawn ones: a count sits at one
    byte in forty, which random draws of this size miss (exhaustive, and fast: most close)."""
    healthy = connect(broker)
    sent = 0
    for frame in FRAMES[1:2] + FRAMES[5:]:             # Metadata v12, CreateTopics and after
        for count in (b"\xff\xff\xff\xff\x0f", b"\x7f\xff\xff\xff"):
            for at in range(12, len(frame)):
                bad = bytearray(frame)
                bad[at:at + len(count)] = count
                struct.pack_into(">i", bad, 0, len(bad) - 4)
                with connect(broker, timeout=2) as s:
                    s.sendall(bad)
                    s.settimeout(0.3)
                    try:
                        s.recv(1 << 16)                 # an answer (the count fitted) or a close
                    except (TimeoutError, socket.timeout, ConnectionError):
                        pass
                sent += 1
        assert broker.proc.poll() is None, "the broker process died"
    assert sent > 400
    healthy.sendall(api_versions_frame(5))
    assert recv_frame(healthy) is not None, "the broker stopped answering an open connection"
    healthy.close()
    log = broker.log_text()
    assert "LengthError: array count" in log and "unexpected error" not in log
