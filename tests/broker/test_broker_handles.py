"""File handles: partition caps on CreateTopics and auto-create, and a root with more partitions
than the open-file limit allows open at once still opens and serves (partition logs are opened
on demand and idle ones closed, log.max.open.partitions)."""
from __future__ import annotations

import os
import resource
import time

import pytest

pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from broker_helpers import create, ping  # noqa: E402

from logcore.log.log_root import LogRoot  # noqa: E402

POLICY_VIOLATION = 44
NOFILE = 512


def _create_error(b, topics: list[NewTopic]) -> dict:
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    out = {}
    for name, fut in admin.create_topics(topics, request_timeout=30).items():
        try:
            fut.result(30)
            out[name] = None
        except KafkaException as exc:
            out[name] = exc.args[0]
    return out


def test_create_topics_caps_partitions_per_request_and_per_broker(broker_factory):
    b = broker_factory(max_partitions_per_request="40", max_partitions="100")
    errors = _create_error(b, [NewTopic("big", 41, 1)])
    assert errors["big"].code() == POLICY_VIOLATION
    assert "max.partitions.per.request=40" in errors["big"].str()
    # Two topics of one request count together.
    errors = _create_error(b, [NewTopic("a", 30, 1), NewTopic("b", 30, 1)])
    assert errors["a"] is None
    assert errors["b"].code() == POLICY_VIOLATION
    create(b, "c", 40)
    errors = _create_error(b, [NewTopic("d", 31, 1)])          # 30 + 40 + 31 > 100
    assert errors["d"].code() == POLICY_VIOLATION
    assert "max.partitions=100" in errors["d"].str()
    with LogRoot.open(str(b.root), read_only=True) as root:
        assert root.list_topics() == ["a", "c"]                  # nothing of a refused topic
    assert not any(n.startswith(("big-", "b-", "d-")) for n in os.listdir(b.root))


def test_auto_create_beyond_max_partitions_is_refused(broker_factory):
    b = broker_factory(max_partitions="3", num_partitions="2")
    c = Producer({"bootstrap.servers": b.bootstrap})    # a producer's Metadata may auto-create
    try:
        md = c.list_topics("first", timeout=10)
        assert md.topics["first"].error is None and len(md.topics["first"].partitions) == 2
        md = c.list_topics("second", timeout=10)               # 2 + 2 > 3
        assert md.topics["second"].error is not None
        assert md.topics["second"].error.code() == POLICY_VIOLATION
    finally:
        c.flush(1)
    assert "above max.partitions=3" in b.log_text()
    assert not (b.root / "second-0").exists()


def _low_nofile():
    resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE, NOFILE))


def test_root_with_more_partitions_than_descriptors_opens_and_serves(broker_factory, tmp_path):
    root_dir = tmp_path / "wide-root"
    partitions = 1000
    with LogRoot.open(str(root_dir), create=True) as root:    # made on disk, not through the broker
        root.create_topic("wide", partitions)
    b = broker_factory(root_dir, preexec_fn=_low_nofile)
    assert "open on first use" in b.log_text()
    sample = list(range(0, partitions, 5))                       # 200 partitions: LRU rotates
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 20, "message.timeout.ms": 240000,
                  "request.timeout.ms": 120000})
    acked = []
    for i in sample:
        p.produce("wide", value=b"v%d" % i, partition=i, on_delivery=lambda e, m: acked.append((e, m.partition())))
        p.poll(0)
    assert p.flush(240) == 0
    assert [e for e, _ in acked if e is not None] == []
    # Logs past the open-log budget are closed as they go idle, behind the produce burst: the
    # count settles under the limit (a descriptor short during the burst would have failed a
    # produce above).
    deadline = time.monotonic() + 15
    while (fds := len(os.listdir(f"/proc/{b.proc.pid}/fd"))) >= NOFILE - 100 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert fds < NOFILE - 100, fds
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "assign-only", "enable.auto.commit": False,
                  "fetch.wait.max.ms": 100})
    c.assign([TopicPartition("wide", i, 0) for i in sample[::3]])
    got = {}
    deadline = time.monotonic() + 120
    while len(got) < len(sample[::3]) and time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is not None and m.error() is None:
            got[m.partition()] = (m.offset(), m.value())
    c.close()
    assert got == {i: (0, b"v%d" % i) for i in sample[::3]}
    assert "Too many open files" not in b.log_text()
    assert b.stop() == 0
    # Closed when idle and reopened (partition 0 was opened at start, then for the produce and
    # the fetch): it kept its leader epoch each time, one entry in its epoch checkpoint.
    lines = (root_dir / "wide-0" / "leader-epoch-checkpoint").read_text().split()
    assert lines[1:] == ["1", "0", "0"], lines
    # A restart under the same limit opens the root again, and every record is there.
    b2 = broker_factory(root_dir, preexec_fn=_low_nofile)
    assert ping(b2)
    assert b2.stop() == 0
    with LogRoot.open(str(root_dir), read_only=True) as root:
        for i in sample:
            log = root.log("wide", i)
            assert [r.value for r in log.read_records(0)] == [b"v%d" % i]
            root.release_log(log)


def test_broker_raises_its_soft_open_file_limit_to_the_hard_one(broker_factory):
    def soft_below_hard():
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, NOFILE))

    b = broker_factory(preexec_fn=soft_below_hard)
    limits = f"/proc/{b.proc.pid}/limits"
    line = next(x for x in open(limits).read().splitlines() if x.startswith("Max open files"))
    assert line.split()[3:5] == [str(NOFILE), str(NOFILE)], line
    assert f"raised the open-file limit (RLIMIT_NOFILE) from 256 to {NOFILE}" in b.log_text()
