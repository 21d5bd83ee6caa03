"""Incremental fetch sessions (KIP-227) through a broker's Fetch API: a full fetch at epoch 0 opens
a session, incremental fetches send only what changed and are answered only the partitions with
news, and the session errors are Kafka's. Raw requests (Fetch v12 by topic name, v16 by topic id)
so that every field is the test's; clients that keep sessions (the Java consumer, seglog's
followers) are tested where they run."""
from __future__ import annotations

import datetime
import threading
import uuid

import pytest

pytest.importorskip("confluent_kafka")
from kio.schema.fetch.v12 import request as r12  # noqa: E402
from kio.schema.fetch.v16 import request as r16  # noqa: E402
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic  # noqa: E402

from broker_helpers import connect, create, parse_response, produce, recv_frame, request_frame  # noqa: E402
from logcore.broker.fetch_sessions import FetchSessionCache, SessionPartition  # noqa: E402
from logcore.wire import error_codes as E  # noqa: E402

NO_WAIT = datetime.timedelta(0)


class Session:
    """One client's fetch session over a raw connection: `fetch` sends the given partitions
    ({(topic, partition): fetch_offset}) at the session's id and epoch."""

    def __init__(self, sock, version: int, topic_ids: dict[str, uuid.UUID] | None = None):
        self.sock, self.version, self.topic_ids = sock, version, topic_ids or {}
        self.session_id, self.epoch = 0, 0
        self.correlation = 0

    def fetch(self, offsets: dict, forgotten: dict | None = None, *, session_id=None, epoch=None,
              version=None, max_wait=NO_WAIT, min_bytes=0):
        version = version or self.version
        session_id = self.session_id if session_id is None else session_id
        epoch = self.epoch if epoch is None else epoch
        by_topic: dict[str, list] = {}
        for (topic, index), offset in offsets.items():
            by_topic.setdefault(topic, []).append((index, offset))
        gone: dict[str, list] = {}
        for topic, index in (forgotten or ()):
            gone.setdefault(topic, []).append(index)
        if version >= 13:
            m, name_field, key = r16, "topic_id", self.topic_ids.__getitem__
        else:
            m, name_field, key = r12, "topic", str
        topics = tuple(m.FetchTopic(**{name_field: key(t)}, partitions=tuple(
            m.FetchPartition(partition=i, current_leader_epoch=-1, fetch_offset=o, last_fetched_epoch=-1,
                             log_start_offset=-1, partition_max_bytes=1 << 20) for i, o in ps))
            for t, ps in by_topic.items())
        forgotten_data = tuple(m.ForgottenTopic(**{name_field: key(t)}, partitions=tuple(ps)) for t, ps in gone.items())
        head = dict(max_wait=max_wait, min_bytes=min_bytes, max_bytes=50 << 20, isolation_level=0,
                    session_id=session_id, session_epoch=epoch, topics=topics,
                    forgotten_topics_data=forgotten_data, rack_id="")
        body = m.FetchRequest(**head) if version >= 13 else m.FetchRequest(replica_id=-1, **head)
        self.correlation += 1
        self.sock.sendall(request_frame(1, version, body, self.correlation))
        frame = recv_frame(self.sock)
        assert frame is not None, "the broker closed the connection"
        cid, response = parse_response(1, version, frame)
        assert cid == self.correlation
        return response

    def answered(self, response) -> dict:
        """{(topic, partition): partition answer} of a response."""
        names = {v: k for k, v in self.topic_ids.items()}
        return {(t.topic if self.version < 13 else names[t.topic_id], p.partition_index): p
                for t in response.responses for p in t.partitions}

    def next(self, response) -> None:
        """The session's id and epoch after an answer, as Kafka's clients keep them."""
        assert response.error_code == E.NONE
        if self.epoch == 0:
            self.session_id, self.epoch = response.session_id, 1
        else:
            assert response.session_id == self.session_id
            self.epoch += 1


def _topic_id(b, topic: str) -> uuid.UUID:
    sock = connect(b)
    try:
        sock.sendall(request_frame(3, 12, MetadataRequest(
            topics=(MetadataRequestTopic(topic_id=uuid.UUID(int=0), name=topic),), allow_auto_topic_creation=False,
            include_topic_authorized_operations=False)))
        _, body = parse_response(3, 12, recv_frame(sock))
        return body.topics[0].topic_id
    finally:
        sock.close()


@pytest.fixture(scope="module")
def topics(broker):
    create(broker, "sess-a", 3)
    create(broker, "sess-b", 2)
    for p in range(3):
        produce(broker, "sess-a", [b"a%d" % p] * 2, partition=p)
    produce(broker, "sess-b", [b"b"] * 1, partition=0)
    return {"sess-a": _topic_id(broker, "sess-a"), "sess-b": _topic_id(broker, "sess-b")}


def _everything(offset: int = 0) -> dict:
    return {**{("sess-a", p): offset for p in range(3)}, **{("sess-b", p): offset for p in range(2)}}


@pytest.mark.parametrize("version", [12, 16])
def test_a_session_answers_only_what_changed(broker, version):
    a, b = f"chg{version}-a", f"chg{version}-b"
    create(broker, a, 3)
    create(broker, b, 2)
    for p in range(3):
        produce(broker, a, [b"a%d" % p] * 2, partition=p)
    produce(broker, b, [b"b"], partition=0)
    everything = {**{(a, p): 0 for p in range(3)}, **{(b, p): 0 for p in range(2)}}
    s = Session(connect(broker), version, {a: _topic_id(broker, a), b: _topic_id(broker, b)})
    full = s.fetch(everything)
    assert full.error_code == E.NONE and full.session_id != 0
    answered = s.answered(full)
    assert set(answered) == set(everything)                        # a full fetch answers every partition
    assert [answered[(a, p)].high_watermark for p in range(3)] == [2, 2, 2]
    s.next(full)
    # The client moves its positions to the ends; nothing new: an incremental answer names nothing.
    moved = s.fetch({(a, 0): 2, (a, 1): 2, (a, 2): 2, (b, 0): 1})
    assert moved.error_code == E.NONE and moved.session_id == s.session_id
    assert s.answered(moved) == {}
    s.next(moved)
    idle = s.fetch({})
    assert s.answered(idle) == {}
    s.next(idle)
    # Records on one partition: only it is answered, with them, though the request names nothing.
    produce(broker, a, [b"x", b"y", b"z"], partition=1)
    news = s.fetch({})
    got = s.answered(news)
    assert list(got) == [(a, 1)]
    assert got[(a, 1)].high_watermark == 5 and got[(a, 1)].records
    s.next(news)
    # The session still holds the old position of a-1 (2): the records come again until the
    # client says it moved; then nothing.
    again = s.fetch({})
    assert list(s.answered(again)) == [(a, 1)] and s.answered(again)[(a, 1)].records
    s.next(again)
    caught_up = s.fetch({(a, 1): 5})
    assert s.answered(caught_up) == {}
    s.next(caught_up)
    s.sock.close()


def test_a_forgotten_partition_is_no_longer_read(broker, topics):
    s = Session(connect(broker), 12)
    s.next(s.fetch({("sess-b", 0): 1, ("sess-b", 1): 0}))
    s.next(s.fetch({}, forgotten=[("sess-b", 1)]))
    produce(broker, "sess-b", [b"late"], partition=1)
    assert s.answered(s.fetch({})) == {}                          # sess-b-1 left the session
    s.sock.close()


def test_session_errors(broker, topics):
    sock = connect(broker)
    s = Session(sock, 12)
    first = s.fetch({("sess-a", 0): 0})
    s.next(first)
    # Another epoch than the session's next one.
    stale = s.fetch({}, epoch=s.epoch + 5)
    assert stale.error_code == E.INVALID_FETCH_SESSION_EPOCH and stale.session_id == 0 and not stale.responses
    # The same session by topic id (v16) after it was opened by name (v12).
    wrong_kind = s.fetch({}, version=16)
    assert wrong_kind.error_code == E.FETCH_SESSION_TOPIC_ID_ERROR
    # A session never opened.
    unknown = s.fetch({}, session_id=s.session_id + 1 if s.session_id < 0x7FFFFFFF else 1)
    assert unknown.error_code == E.FETCH_SESSION_ID_NOT_FOUND
    # The session still works at its epoch (errors leave it as it was).
    ok = s.fetch({})
    assert ok.error_code == E.NONE and ok.session_id == s.session_id
    s.next(ok)
    # Epoch -1 ends it: the fetch is answered in full without a session, and the id is gone.
    closing = s.fetch({("sess-a", 0): 2}, epoch=-1)
    assert closing.error_code == E.NONE and closing.session_id == 0
    assert list(s.answered(closing)) == [("sess-a", 0)]
    assert s.fetch({}, epoch=s.epoch).error_code == E.FETCH_SESSION_ID_NOT_FOUND
    # An incremental fetch without a session id.
    assert s.fetch({}, session_id=0, epoch=1).error_code == E.FETCH_SESSION_ID_NOT_FOUND
    sock.close()


def test_a_new_full_fetch_replaces_the_clients_session(broker, topics):
    s = Session(connect(broker), 12)
    old = s.fetch({("sess-a", 0): 0})
    s.next(old)
    renewed = s.fetch({("sess-a", 2): 0}, epoch=0)        # epoch 0 with the old id: a new session
    assert renewed.session_id not in (0, s.session_id)
    assert list(s.answered(renewed)) == [("sess-a", 2)]
    assert s.fetch({}, epoch=1).error_code == E.FETCH_SESSION_ID_NOT_FOUND    # the old one is gone
    s.sock.close()


def test_a_session_left_without_partitions_is_closed(broker, topics):
    s = Session(connect(broker), 12)
    s.next(s.fetch({("sess-a", 0): 0}))
    empty = s.fetch({}, forgotten=[("sess-a", 0)])
    assert empty.error_code == E.NONE and empty.session_id == 0 and not empty.responses
    assert s.fetch({}, epoch=s.epoch + 1).error_code == E.FETCH_SESSION_ID_NOT_FOUND
    s.sock.close()


def test_a_parked_incremental_fetch_wakes_for_its_sessions_partitions(broker, topics):
    """The long poll covers every partition of the session, not only those the request names."""
    s = Session(connect(broker, timeout=15), 12)
    full = s.fetch(_everything())
    s.next(full)
    ends = {k: p.high_watermark for k, p in s.answered(full).items()}
    s.next(s.fetch(ends))
    timer = threading.Timer(0.5, produce, (broker, "sess-b", [b"wake"]), {"partition": 1})
    timer.start()
    try:
        woken = s.fetch({}, max_wait=datetime.timedelta(seconds=10), min_bytes=1)
    finally:
        timer.join()
    assert list(s.answered(woken)) == [("sess-b", 1)]
    s.sock.close()


def test_a_broker_without_slots_answers_without_sessions(broker_factory):
    b = broker_factory(max_incremental_fetch_session_cache_slots=0)
    create(b, "nosess", 1)
    s = Session(connect(b), 12)
    full = s.fetch({("nosess", 0): 0})
    assert full.error_code == E.NONE and full.session_id == 0 and list(s.answered(full)) == [("nosess", 0)]
    s.sock.close()


# ----------------------------------------------------------------------------------- the cache

class Clock:
    def __init__(self):
        self.ms = 0.0

    def __call__(self):
        return self.ms


def _parts(n: int) -> dict:
    return {("t", i): SessionPartition("t", None) for i in range(n)}


def test_a_full_cache_takes_a_stale_sessions_slot():
    clock = Clock()
    cache = FetchSessionCache(2, eviction_ms=1000, clock=clock)
    a = cache.create(False, False, _parts(5))
    clock.ms = 500
    b = cache.create(False, False, _parts(5))
    clock.ms = 900
    assert cache.create(False, False, _parts(1)) == 0          # nothing stale, nothing worth less
    clock.ms = 1600                                            # a unused for 1.6 s, b for 1.1 s
    cache.touch(cache.get(b))
    c = cache.create(False, False, _parts(1))
    assert c != 0 and cache.get(a) is None and cache.get(b) is not None and cache.evictions == 1


def test_a_more_valuable_session_takes_a_settled_ones_slot():
    clock = Clock()
    cache = FetchSessionCache(2, eviction_ms=1000, clock=clock)
    small = cache.create(False, False, _parts(2))
    big = cache.create(False, False, _parts(9))
    clock.ms = 800
    cache.touch(cache.get(small)), cache.touch(cache.get(big))
    # Not settled yet (created under eviction_ms ago): a bigger consumer session waits.
    assert cache.create(False, False, _parts(20)) == 0
    # A follower's session (privileged) may take a consumer's slot at once: the weakest goes.
    follower = cache.create(True, False, _parts(1))
    assert follower != 0 and cache.get(small) is None and cache.get(big) is not None
    clock.ms = 1900
    cache.touch(cache.get(big)), cache.touch(cache.get(follower))
    # Settled now: a consumer's session takes a smaller consumer's slot, never a follower's.
    assert cache.create(False, False, _parts(3)) == 0          # big (9) is worth more than 3
    bigger = cache.create(False, False, _parts(10))
    assert bigger != 0 and cache.get(big) is None and cache.get(follower) is not None
    # A settled follower's session is worth more than any consumer's.
    assert cache.create(False, False, _parts(50)) == 0 and cache.get(follower) is not None
