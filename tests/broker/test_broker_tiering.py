"""The broker tiers the partitions it leads to S3 and serves the tiered offsets to consumers.

A broker configured with tiered storage (Kafka's names in broker.properties) copies sealed
segments of topics with remote.storage.enable=true to a real S3 server, deletes their local
copies past local.retention.bytes, and serves a consumer starting at the earliest offset every
record exactly once, the old part read back from S3, before and after a restart, and answers
ListOffsets by timestamp from the remote part.
"""
from __future__ import annotations

import json
import re
import sys
import time

import pytest

pytest.importorskip("confluent_kafka")
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic  # noqa: E402

import broker_spawner  # noqa: E402
from broker_helpers import consume_all, create, earliest, produce, wait_until  # noqa: E402

from logcore.broker.config import BrokerConfig  # noqa: E402
from logcore.errors import InvalidConfigError  # noqa: E402
from logcore.log.log_root import LogRoot  # noqa: E402
from logcore.tools.remote_segments import remote_segments  # noqa: E402

RECORDS = 300
SERVICE = {"log.retention.check.interval.ms": "60000", "remote.log.manager.task.interval.ms": "200",
           "log.segment.delete.delay.ms": "0"}
TOPIC_CONFIG = {"remote.storage.enable": "true", "segment.bytes": "4096", "local.retention.bytes": "4096"}


def _tiered_settings(endpoint, bucket: str) -> dict[str, str]:
    return {"remote.log.storage.system.enable": "true",
            "rsm.config.storage.url": f"s3://{bucket}/tier",
            "rsm.config.storage.endpoint_url": endpoint.endpoint_url,
            "rsm.config.storage.key": endpoint.key,
            "rsm.config.storage.secret": endpoint.secret,
            "rsm.config.storage.client_kwargs.region_name": endpoint.region,
            "rsm.config.chunk.size": "4096"}


def _local_segments(b, topic: str) -> dict[int, int]:
    """Base offset -> size of the local segments (the service deletes some while we look)."""
    found = {}
    for path in (b.root / f"{topic}-0").glob("*.log"):
        try:
            found[int(path.stem)] = path.stat().st_size
        except FileNotFoundError:
            continue
    return dict(sorted(found.items()))


def _remote(b, settings: dict[str, str], topic: str) -> list[tuple[int, int]]:
    """(start, end) of the topic's finished remote segments, read from S3 without the broker."""
    with LogRoot.open(str(b.root), read_only=True, defaults=settings) as root:
        return sorted((m.start_offset, m.end_offset) for _, m in remote_segments(root, topic))


def _check_all(b, topic: str, values: list[bytes]) -> None:
    got = consume_all(b, topic, 1, len(values), start=OFFSET_BEGINNING, timeout=30)
    assert [o for _, o, *_ in got] == list(range(len(values)))       # each record exactly once
    assert [v for _, _, _, v, _ in got] == values


def test_broker_tiers_to_s3_and_serves_earliest_from_remote(broker_factory, s3_endpoint, s3_bucket):
    settings = _tiered_settings(s3_endpoint, s3_bucket)
    b = broker_factory(**SERVICE, **settings)
    create(b, "cold", 1, TOPIC_CONFIG)
    # "short" also has a total retention: remote segments past it are expired.
    create(b, "short", 1, {**TOPIC_CONFIG, "retention.bytes": "12288"})
    create(b, "timed", 1, TOPIC_CONFIG)
    values = [b"%04d-" % i + b"v" * 195 for i in range(RECORDS)]
    for topic in ("cold", "short"):
        acked = produce(b, topic, values, acks="all", **{"batch.num.messages": 5})
        assert all(err is None for err, *_ in acked)
    # Records 10 ms apart, an hour ago (within time retention); every 7th batch of five lies 5 s
    # further back, so the answer is not always the record after the previous one.
    start_ms = (int(time.time()) - 3600) * 1000
    stamps = [start_ms + 10 * i - (5000 if i // 5 % 7 == 6 else 0) for i in range(RECORDS)]
    acked = produce(b, "timed", values, timestamps=stamps, acks="all", **{"batch.num.messages": 5})
    assert all(err is None for err, *_ in acked)

    # The background service copies sealed segments and deletes local copies past 4 KiB.
    for topic in ("cold", "timed"):
        assert wait_until(lambda: min(_local_segments(b, topic)) > 0 and
                          sum(_local_segments(b, topic).values()) <= 3 * 4096)
    local_start = min(_local_segments(b, "cold"))
    remote = _remote(b, settings, "cold")
    assert remote[0][0] == 0 and len(remote) >= 5
    assert all(nxt[0] == prev[1] + 1 for prev, nxt in zip(remote, remote[1:]))   # no gap
    assert remote[-1][1] >= local_start - 1                  # everything not local is remote

    # DescribeConfigs reports the topic's tiering settings.
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    described = admin.describe_configs([ConfigResource("topic", "cold")])
    configs = next(iter(described.values())).result(10)
    assert configs["remote.storage.enable"].value == "true"
    assert configs["local.retention.bytes"].value == "4096"
    described = admin.describe_configs([ConfigResource("broker", "0")])
    configs = next(iter(described.values())).result(10)
    assert configs["remote.log.storage.system.enable"].value == "true"
    assert configs["rsm.config.storage.url"].value == settings["rsm.config.storage.url"]
    assert configs["remote.log.manager.task.interval.ms"].value == "200"
    assert not any(name.startswith("rsm.config.storage.") and name != "rsm.config.storage.url"
                   for name in configs)          # credentials and endpoints are not reported

    # ListOffsets earliest is the remote start; a consumer from there reads everything once.
    assert earliest(b, "cold") == 0
    _check_all(b, "cold", values)

    # ListOffsets by timestamp finds the offsets only S3 holds (KIP-405), as a search over every
    # record would: the first offset whose timestamp reaches the target.
    local_start = min(_local_segments(b, "timed"))
    assert local_start > RECORDS // 2
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "by-time"})
    picked = {0, stamps[0], stamps[-1], stamps[-1] + 1, stamps[local_start - 1], stamps[local_start]}
    picked.update(ts + d for ts in stamps[5::29] for d in (-1, 0, 1))
    for target in sorted(picked):
        want = next((o for o, ts in enumerate(stamps) if ts >= target), -1)
        found = c.offsets_for_times([TopicPartition("timed", 0, target)], timeout=10)[0]
        assert (found.error, found.offset) == (None, want), target
    c.close()

    # Total retention (remote plus local) moved the log start offset past expired remote segments.
    assert wait_until(lambda: earliest(b, "short") > 0 and _remote(b, settings, "short")
                 and _remote(b, settings, "short")[0][0] == earliest(b, "short"))
    start = earliest(b, "short")
    got = consume_all(b, "short", 1, RECORDS - start, start=OFFSET_BEGINNING, timeout=30)
    assert [o for _, o, *_ in got] == list(range(start, RECORDS))

    # After a restart the broker still serves the tiered part, and keeps tiering new data.
    b.stop()
    b2 = broker_factory(b.root, **SERVICE, **settings)
    assert earliest(b2, "cold") == 0
    more = [b"%04d-" % i + b"w" * 195 for i in range(RECORDS, RECORDS + 60)]
    produce(b2, "cold", more, acks="all", **{"batch.num.messages": 5})
    assert wait_until(lambda: _remote(b2, settings, "cold")[-1][1] >= RECORDS)
    _check_all(b2, "cold", values + more)


def _start_fails(tmp_path, env: dict, props: dict[str, str]) -> str:
    """Run `seglog broker` with these settings; it must exit with an error: its stderr."""
    conf = tmp_path / "bad-broker.properties"
    settings = {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path / "logs"), **props}
    conf.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    done = broker_spawner.run([sys.executable, "-m", "logcore.tools.cli", "broker", "--config", str(conf)],
                              env=env, cwd=tmp_path, timeout=60)
    assert done.returncode != 0 and "listening on" not in done.stdout, done.stderr
    assert "Traceback" not in done.stderr
    return done.stderr


@pytest.mark.parametrize("props, named", [
    ({"remote.log.storage.system.enable": "yes please"}, "remote.log.storage.system.enable"),
    ({"rsm.config.chunk.size": "12"}, "rsm.config.chunk.size"),
    ({"rsm.config.chunk.sise": "4096"}, "rsm.config.chunk.sise"),
    ({"remote.log.storage.system.enable": "true", "rsm.config.storage.url": "{folder}",
      "remote.log.storage.manager.class.name": "org.example.OtherRemoteStorageManager"},
     "remote.log.storage.manager.class.name"),
    ({"remote.log.storage.system.enable": "true", "rsm.config.storage.url": "{folder}",
      "rsm.config.encryption.enabled": "true"}, "rsm.config.encryption.key.pair.id"),
    ({"remote.log.manager.task.interval.ms": "-5"}, "remote.log.manager.task.interval.ms"),
])
def test_bad_tiering_config_names_the_setting(tmp_path, props, named):
    props = {k: v.replace("{folder}", str(tmp_path / "remote")) for k, v in props.items()}
    with pytest.raises(InvalidConfigError, match=re.escape(named)) as info:
        BrokerConfig.from_props(props, source="broker.properties")
    assert str(info.value).startswith("broker.properties: ")


def test_bad_tiering_config_fails_broker_start(tmp_path, broker_env):
    err = _start_fails(tmp_path, broker_env, {"remote.log.storage.system.enable": "true"})
    assert "remote.log.storage.system.enable=true needs rsm.config.storage.url" in err


def test_unwritable_remote_root_fails_broker_start(tmp_path, broker_env, s3_endpoint):
    settings = _tiered_settings(s3_endpoint, "no-such-bucket-seglog")
    err = _start_fails(tmp_path, broker_env, settings)
    assert "rsm.config.storage.url=s3://no-such-bucket-seglog/tier" in err
    assert s3_endpoint.secret not in err.replace("rsm.config.storage.secret", "")


def test_tiered_topic_needs_tiering_enabled_broker(broker, tmp_path, broker_env):
    # A broker without tiering refuses CreateTopics with remote.storage.enable=true, naming it.
    with pytest.raises(Exception, match="remote.log.storage.system.enable"):
        create(broker, "tiered-refused", 1, {"remote.storage.enable": "true"})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    futures = admin.create_topics([NewTopic("tiered-refused", 1, 1, config={"remote.storage.enable": "true"})],
                                  validate_only=True)
    with pytest.raises(Exception, match="remote.log.storage.system.enable"):
        futures["tiered-refused"].result(15)
    # A root holding a tiered topic, then served by a broker without tiering: the start fails
    # naming both settings rather than serving the topic without its remote part.
    tiering = {"remote.log.storage.system.enable": "true", "rsm.config.storage.url": str(tmp_path / "remote")}
    with LogRoot.open(str(tmp_path / "logs"), create=True, defaults=tiering) as root:
        root.create_topic("t", 1, {"remote.storage.enable": "true"})
    stored = tmp_path / "logs" / "seglog-topics.json"
    doc = json.loads(stored.read_text())
    doc["defaults"] = {}            # the root's own defaults say nothing of tiering
    stored.write_text(json.dumps(doc))
    err = _start_fails(tmp_path, broker_env, {})
    assert "remote.storage.enable" in err and "remote.log.storage.system.enable" in err
