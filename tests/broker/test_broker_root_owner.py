"""One owner per root: a root a running `seglog broker` serves is written only through it.

Through the interfaces a user touches: the `seglog` CLI as a subprocess, a real broker
subprocess, confluent-kafka and kafka-python clients, raw Kafka frames on one connection.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("confluent_kafka")

from confluent_kafka import Producer  # noqa: E402

import broker_spawner  # noqa: E402
from broker_helpers import (connect, consume_all, create, parse_response, produce,  # noqa: E402
                            recv_frame, request_frame, wait_until)
from logcore.log.log_root import LogRoot  # noqa: E402
from logcore.log.root_owner import OWNER_FILE  # noqa: E402


def seglog(env, *args, stdin: bytes = b"", timeout: float = 60) -> subprocess.CompletedProcess:
    # forked from an interpreter with the CLI imported (broker_spawner.py): the same command
    return broker_spawner.run([sys.executable, "-m", "logcore.tools.cli", *args], input=stdin,
                              env=env, timeout=timeout, text=False)


def _metadata(sock, names, correlation_id, version=9):
    from kio.schema.metadata.v9.request import MetadataRequest, MetadataRequestTopic
    body = MetadataRequest(topics=tuple(MetadataRequestTopic(name=n) for n in names),
                           allow_auto_topic_creation=True, include_cluster_authorized_operations=False,
                           include_topic_authorized_operations=False)
    sock.sendall(request_frame(3, version, body, correlation_id))
    frame = recv_frame(sock)
    assert frame is not None, "the broker closed the connection"
    cid, resp = parse_response(3, version, frame)
    assert cid == correlation_id
    return resp


def test_produce_on_a_served_root_is_refused_naming_the_broker(broker_factory, broker_env, tmp_path):
    b = broker_factory(tmp_path / "served")
    create(b, "owned", 1)
    claim = json.loads((b.root / OWNER_FILE).read_text())
    assert claim["bootstrap"] == b.bootstrap and claim["pid"] == b.proc.pid

    done = seglog(broker_env, "produce", "--root", str(b.root), "--topic", "owned", stdin=b"a\nb\n")
    err = done.stderr.decode()
    assert done.returncode != 0
    assert f"PLAINTEXT://{b.bootstrap}" in err and f"bootstrap.servers={b.bootstrap}" in err, err
    assert "written only through that broker" in err, err

    # nothing was taken from the broker: its partition still takes produces at once
    acked = produce(b, "owned", [b"v0", b"v1"], partition=0, **{"message.timeout.ms": 10000})
    assert [a[0] for a in acked] == [None, None]
    assert [r[3] for r in consume_all(b, "owned", 1, 2)] == [b"v0", b"v1"]

    # maintenance is refused the same way; topic changes go through the broker (see
    # test_topics_created_and_grown_by_the_cli_are_served_at_once)
    done = seglog(broker_env, "maintain", "--root", str(b.root), "--once")
    assert done.returncode != 0 and f"PLAINTEXT://{b.bootstrap}" in done.stderr.decode()
    assert (b.root / "owned-0").is_dir()

    # a second broker on the same root does not start, and names the first
    conf = tmp_path / "second.properties"
    conf.write_text(f"listeners=PLAINTEXT://127.0.0.1:0\nlog.dirs={b.root}\n")
    second = broker_spawner.run([sys.executable, "-m", "logcore.tools.cli", "broker", "--config", str(conf)],
                                env=broker_env, timeout=60, cwd=tmp_path, text=False)
    assert second.returncode != 0
    assert f"already served by seglog broker PLAINTEXT://{b.bootstrap}" in second.stderr.decode()
    assert "Traceback" not in second.stderr.decode()

    # a clean stop removes the claim: the CLI writes the root again
    assert b.stop() == 0
    assert not (b.root / OWNER_FILE).exists()
    done = seglog(broker_env, "produce", "--root", str(b.root), "--topic", "owned", stdin=b"after\n")
    assert done.returncode == 0, done.stderr.decode()


def test_topics_created_and_grown_by_the_cli_are_served_at_once(broker_factory, broker_env, tmp_path):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    b = broker_factory(tmp_path / "served")
    sock = connect(b)
    meta = _metadata(sock, ["late"], 1)
    # before: auto-created by the broker? No: ask for a name that the CLI creates next
    done = seglog(broker_env, "topics", "--root", str(b.root), "--create", "cli-made", "--partitions", "2")
    assert done.returncode == 0, done.stderr.decode()
    # the same connection asks for it (with auto-creation allowed: the old KeyError path)
    meta = _metadata(sock, ["cli-made"], 2)
    (topic,) = meta.topics
    assert topic.error_code == 0 and len(topic.partitions) == 2

    acked = produce(b, "cli-made", [b"p0-%d" % i for i in range(3)], partition=0)
    acked += produce(b, "cli-made", [b"p1-%d" % i for i in range(3)], partition=1)
    assert all(a[0] is None for a in acked)
    assert len(consume_all(b, "cli-made", 2, 6)) == 6

    # grown by the CLI: partition 2 is produced to and fetched by kafka-python
    done = seglog(broker_env, "topics", "--root", str(b.root), "--alter", "--topic", "cli-made",
                  "--partitions", "3")
    assert done.returncode == 0, done.stderr.decode()
    producer = KafkaProducer(bootstrap_servers=b.bootstrap, acks="all")
    try:
        producer.send("cli-made", value=b"third", partition=2).get(timeout=20)
    finally:
        producer.close()
    consumer = KafkaConsumer(bootstrap_servers=b.bootstrap, consumer_timeout_ms=10000,
                             auto_offset_reset="earliest")
    try:
        consumer.assign([TopicPartition("cli-made", 2)])
        got = [m.value for m in consumer]
    finally:
        consumer.close()
    assert got == [b"third"]

    meta = _metadata(sock, ["cli-made"], 3)
    assert len(meta.topics[0].partitions) == 3

    # --create, --alter and --delete on the served root all go through the broker, and say so
    done = seglog(broker_env, "topics", "--root", str(b.root), "--delete", "--topic", "cli-made")
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout == b"Deleted topic cli-made.\n"
    assert f"served by broker PLAINTEXT://{b.bootstrap}" in done.stderr.decode()
    listed = seglog(broker_env, "topics", "--root", str(b.root), "--list")
    assert listed.returncode == 0 and b"cli-made" not in listed.stdout.split(), listed
    sock.close()
    log = b.log_text()
    assert "KeyError" not in log and "closing the connection" not in log, log[-3000:]


def test_unexpected_metadata_state_is_an_error_code_not_a_dropped_connection(broker_factory, tmp_path):
    from kio.schema.describe_configs.v1.request import DescribeConfigsRequest, DescribeConfigsResource

    b = broker_factory(tmp_path / "served")
    create(b, "fine", 1)
    sock = connect(b)
    # another process leaves a topics file the broker cannot make sense of (a count that is no number)
    path = b.root / "seglog-topics.json"
    good = path.read_text()
    doc = json.loads(good)
    doc["topics"]["broken"] = {"topic_id": "", "partitions": "many", "config": {}}
    doc["topics"]["fine"]["partitions"] = "one"
    path.write_text(json.dumps(doc))
    # Metadata: what is open is still served, the unreadable topic is unknown
    meta = _metadata(sock, ["fine", "broken"], 1)
    assert {t.name: int(t.error_code) for t in meta.topics} == {"fine": 0, "broken": 3}
    meta = _metadata(sock, ["fine", "broken"], 2)
    assert {t.name: int(t.error_code) for t in meta.topics} == {"fine": 0, "broken": 3}
    # DescribeConfigs must read the topic's entry: its handler fails, the request gets an error
    # code with the reason, and the connection stays open
    body = DescribeConfigsRequest(resources=(DescribeConfigsResource(resource_type=2, resource_name="fine",
                                                                     configuration_keys=None),),
                                  include_synonyms=False)
    sock.sendall(request_frame(32, 1, body, 3))
    frame = recv_frame(sock)
    assert frame is not None, "the broker closed the connection"
    cid, resp = parse_response(32, 1, frame)
    (result,) = resp.results
    assert cid == 3 and int(result.error_code) == -1 and "ValueError" in result.error_message
    # once the file is sound again, everything is served on the same connection
    path.write_text(good)
    meta = _metadata(sock, ["fine"], 4)
    assert meta.topics[0].error_code == 0 and len(meta.topics[0].partitions) == 1
    sock.close()
    lines = b.log_text().splitlines()
    assert len([line for line in lines if "cannot read the topics of" in line]) == 1, lines[-20:]
    failures = [line for line in lines if "api key 32" in line and "failed: " in line]
    assert len(failures) == 1 and "answered error code -1" in failures[0], failures
    assert not any("closing" in line for line in lines), lines[-20:]


def test_a_fenced_broker_takes_its_partition_back_and_clients_recover_fast(broker_factory, tmp_path):
    """An idempotent producer's requests pipelined across the takeover (the broker is stopped
    while they are sent, so they all wait in its socket): the first one meets the fence, the
    others queue behind it. All are acknowledged, in the order sent, at offsets that hold them.
    Before, the first was answered NOT_LEADER_OR_FOLLOWER and the second appended: librdkafka
    then counted the first as written (a later sequence was) and it was lost."""
    b = broker_factory(tmp_path / "served")
    create(b, "stolen", 2)
    assert [a[0] for a in produce(b, "stolen", [b"before"], partition=0)] == [None]
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 2, "enable.idempotence": True,
                  "message.timeout.ms": 15000, "retry.backoff.ms": 100})
    acked: list[tuple] = []

    def on_delivery(err, msg):
        acked.append((err, msg.offset(), msg.value()))
    # warm: connected, producer id and metadata; no producer state on partition 0
    p.produce("stolen", value=b"warm", partition=1)
    assert p.flush(10) == 0

    # A writer that bypasses the rule (an older seglog, a hand-made LogRoot): it takes the
    # partition from the broker and commits one record.
    root = LogRoot.open(str(b.root))
    root.owner_id = json.loads((b.root / OWNER_FILE).read_text())["owner_id"]
    log = root.log("stolen", 0, writer=True)
    log.append_records([(None, b"intruder", (), None)])
    log.commit()
    root.close()

    started = time.monotonic()
    os.kill(b.proc.pid, signal.SIGSTOP)
    try:
        for i in range(5):       # one request each (linger.ms=2), all in flight at once
            p.produce("stolen", value=b"after-%d" % i, partition=0, on_delivery=on_delivery)
            p.poll(0.01)
    finally:
        os.kill(b.proc.pid, signal.SIGCONT)
    assert p.flush(20) == 0
    elapsed = time.monotonic() - started
    assert [a[0] for a in acked] == [None] * 5, acked
    print(f"5 records acknowledged {elapsed:.2f} s after the intruder committed")
    assert elapsed < 10, f"took {elapsed:.1f} s"
    held = {offset: value for _, offset, _, value, _ in consume_all(b, "stolen", 1, 7)}
    assert [value for _, value in sorted(held.items())] == [b"before", b"intruder"] + [b"after-%d" % i for i in range(5)]
    assert [(offset, held.get(offset)) for _, offset, value in acked] == [(2 + i, b"after-%d" % i) for i in range(5)]
    time.sleep(1.5)
    log_text = b.log_text()
    assert log_text.count("another writer took the partition") == 1, log_text[-3000:]
    assert len([line for line in log_text.splitlines() if "stolen-0" in line]) <= 6, log_text[-3000:]


def test_a_sigkilled_brokers_claim_does_not_block_writers(broker_factory, broker_env, tmp_path):
    b = broker_factory(tmp_path / "served")
    create(b, "orphan", 1)
    b.stop(signal.SIGKILL)
    assert (b.root / OWNER_FILE).exists()          # left behind: stale, its lock died with it
    done = seglog(broker_env, "produce", "--root", str(b.root), "--topic", "orphan", stdin=b"x\n")
    assert done.returncode == 0, done.stderr.decode()
    assert "stale claim" in done.stderr.decode()
    # and a new broker replaces the stale claim and serves what the CLI wrote
    b2 = broker_factory(b.root)
    assert json.loads((b.root / OWNER_FILE).read_text())["pid"] == b2.proc.pid
    assert [r[3] for r in consume_all(b2, "orphan", 1, 1)] == [b"x"]


@pytest.mark.s3
def test_s3_root_claim_is_a_heartbeat_lease(broker_factory, broker_env, monkeypatch, s3_endpoint, s3_bucket):
    """On an object store (no locks) the broker renews its claim every lease / 3; a claim from
    another host blocks writers only until its lease runs out after the last heartbeat."""
    import fsspec

    root = f"s3://{s3_bucket}/served"
    for name, value in (("AWS_ACCESS_KEY_ID", s3_endpoint.key), ("AWS_SECRET_ACCESS_KEY", s3_endpoint.secret),
                        ("AWS_ENDPOINT_URL", s3_endpoint.endpoint_url), ("AWS_DEFAULT_REGION", s3_endpoint.region)):
        monkeypatch.setenv(name, value)
        broker_env[name] = value
    options = []
    for key, value in s3_endpoint.storage_options().items():
        options += ["--storage-option", f"{key}={json.dumps(value) if not isinstance(value, str) else value}"]
    b = broker_factory(root)
    create(b, "remote", 1)
    fs = fsspec.filesystem("s3", **s3_endpoint.storage_options())
    claim_path = f"{s3_bucket}/served/{OWNER_FILE}"
    first = json.loads(fs.cat(claim_path))
    assert first["bootstrap"] == b.bootstrap

    done = seglog(broker_env, "produce", "--root", root, *options, "--topic", "remote", stdin=b"x\n")
    assert done.returncode != 0 and f"bootstrap.servers={b.bootstrap}" in done.stderr.decode()

    # the broker renews its claim (every lease / 3 = 10 s by default)
    assert wait_until(lambda: json.loads(fs.cat(claim_path))["heartbeat_ms"] > first["heartbeat_ms"], 15)
    b.stop(signal.SIGKILL)
    # its claim names a process of this machine that is gone: stale at once
    done = seglog(broker_env, "produce", "--root", root, *options, "--topic", "remote", stdin=b"x\n")
    assert done.returncode == 0, done.stderr.decode()
    assert "stale claim" in done.stderr.decode()
    # As if that broker ran on another machine and died a moment ago: its claim stands until
    # lease_ms after its last heartbeat ...
    claim = dict(first, host="another-host", heartbeat_ms=int(time.time() * 1000))
    fs.pipe(claim_path, json.dumps(claim).encode())
    done = seglog(broker_env, "produce", "--root", root, *options, "--topic", "remote", stdin=b"x\n")
    assert done.returncode != 0 and "pid %d on another-host" % first["pid"] in done.stderr.decode()
    # ... and no longer: a stale claim never blocks writers
    claim["heartbeat_ms"] -= claim["lease_ms"] + 1000
    fs.pipe(claim_path, json.dumps(claim).encode())
    done = seglog(broker_env, "produce", "--root", root, *options, "--topic", "remote", stdin=b"x\n")
    assert done.returncode == 0, done.stderr.decode()
    assert "stale claim" in done.stderr.decode()
