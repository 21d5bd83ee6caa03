"""Turning tiering down on a topic, as Kafka 3.9+ does (KIP-950), through IncrementalAlterConfigs.

`remote.log.copy.disable=true` stops copying new segments while the remote ones stay readable;
`remote.storage.enable=false` is refused unless `remote.log.delete.on.disable=true` comes with it,
and with it the broker deletes the topic's remote segments and serves its local data only (the
log start offset moves to the local log start). One broker, a local folder as the remote root.
"""
from __future__ import annotations

import os
import re
import time

import pytest

pytest.importorskip("confluent_kafka")
from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException  # noqa: E402
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry,  # noqa: E402
                                   ConfigResource)

from broker_helpers import consume_all, create, earliest, produce, wait_until  # noqa: E402

from logcore.log.log_root import LogRoot  # noqa: E402
from logcore.tools.remote_segments import remote_segments  # noqa: E402

SERVICE = {"log.retention.check.interval.ms": "60000", "remote.log.manager.task.interval.ms": "200",
           "log.segment.delete.delay.ms": "0"}
TOPIC_CONFIG = {"remote.storage.enable": "true", "segment.bytes": "4096", "local.retention.bytes": "4096"}
SEGMENT_FOLDER = re.compile(r"\d{20}-")
KAFKA_MESSAGE = ("It is invalid to disable remote storage without deleting remote data. If you want"
                 " to keep the remote data and turn to read only, please set"
                 " `remote.storage.enable=true,remote.log.copy.disable=true`. If you want to disable"
                 " remote storage and delete all remote data, please set"
                 " `remote.storage.enable=false,remote.log.delete.on.disable=true`.")


def _values(start: int, count: int) -> list[bytes]:
    return [b"%04d-" % i + b"v" * 195 for i in range(start, start + count)]


def _local_bases(b, topic: str) -> list[int]:
    found = []
    for path in (b.root / f"{topic}-0").glob("*.log"):
        found.append(int(path.stem))
    return sorted(found)


def _remote(b, settings: dict[str, str], topic: str) -> list[tuple[int, int]]:
    with LogRoot.open(str(b.root), read_only=True, defaults=settings) as root:
        return sorted((m.start_offset, m.end_offset) for _, m in remote_segments(root, topic))


def _remote_files(remote_root, topic_id: str) -> list[str]:
    """Files of the topic's remote segments (folders `<base offset>-<segment id>` below the
    partition's folder, which is named by the topic id); the metadata log is not among them."""
    found = []
    for folder, _, files in os.walk(remote_root):   # walk: the broker deletes while we look
        if topic_id in folder and SEGMENT_FOLDER.match(os.path.basename(folder)):
            found += [os.path.join(folder, name) for name in files]
    return found


def _alter(admin: AdminClient, topic: str, **settings: str | None) -> None:
    ops = [ConfigEntry(name.replace("_", "."), value,
                       incremental_operation=AlterConfigOpType.DELETE if value is None
                       else AlterConfigOpType.SET) for name, value in settings.items()]
    futures = admin.incremental_alter_configs([ConfigResource("topic", topic, incremental_configs=ops)])
    next(iter(futures.values())).result(10)


def test_copy_disable_and_remote_storage_off(broker_factory, tmp_path):
    remote_root = tmp_path / "remote"
    settings = {"remote.log.storage.system.enable": "true", "rsm.config.storage.url": str(remote_root),
                "rsm.config.chunk.size": "4096"}
    b = broker_factory(**SERVICE, **settings)
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    for topic in ("ro", "off"):
        create(b, topic, 1, TOPIC_CONFIG)
        assert all(err is None for err, *_ in produce(b, topic, _values(0, 300), acks="all",
                                                      **{"batch.num.messages": 5}))
    for topic in ("ro", "off"):     # tiered, and local copies past 4 KiB deleted
        assert wait_until(lambda: _local_bases(b, topic)[0] > 0)

    # remote.log.copy.disable: Kafka wants local and total retention equal then (local: -2).
    _alter(admin, "ro", remote_log_copy_disable="true", local_retention_bytes=None)
    time.sleep(0.6)                 # a copy in flight when the setting came finishes
    before = _remote(b, settings, "ro")
    assert all(err is None for err, *_ in produce(b, "ro", _values(300, 200), acks="all",
                                                  **{"batch.num.messages": 5}))
    time.sleep(1.5)                 # several tiering passes
    assert _remote(b, settings, "ro") == before          # nothing more copied
    sealed_local = [base for base in _local_bases(b, "ro") if base > before[-1][1]]
    assert len(sealed_local) >= 3                        # segments a tiering topic would copy
    got = consume_all(b, "ro", 1, 500, start=OFFSET_BEGINNING, timeout=30)
    assert [o for _, o, *_ in got] == list(range(500))   # the remote part still served
    assert [v for _, _, _, v, _ in got] == _values(0, 500)
    assert earliest(b, "ro") == 0

    # remote.storage.enable=false alone is refused with Kafka's error.
    with pytest.raises(KafkaException) as refused:
        _alter(admin, "off", remote_storage_enable="false")
    assert refused.value.args[0].code() == KafkaError.INVALID_CONFIG
    assert KAFKA_MESSAGE in refused.value.args[0].str()
    assert _remote(b, settings, "off")                    # nothing happened
    with LogRoot.open(str(b.root), read_only=True) as root:
        topic_id = str(root.describe_topic("off").topic_id)
    assert _remote_files(remote_root, topic_id)

    # With remote.log.delete.on.disable=true: the remote segments go, only local data is served.
    local_start = _local_bases(b, "off")[0]
    _alter(admin, "off", remote_storage_enable="false", remote_log_delete_on_disable="true")
    assert wait_until(lambda: not _remote_files(remote_root, topic_id))
    assert _remote(b, settings, "off") == []
    assert earliest(b, "off") == local_start
    got = consume_all(b, "off", 1, 300 - local_start, start=OFFSET_BEGINNING, timeout=30)
    assert [o for _, o, *_ in got] == list(range(local_start, 300))
    # No more tiering: new sealed segments stay local, and local retention no longer applies.
    assert all(err is None for err, *_ in produce(b, "off", _values(300, 100), acks="all",
                                                  **{"batch.num.messages": 5}))
    time.sleep(1.0)
    assert not _remote_files(remote_root, topic_id)
    assert _local_bases(b, "off")[0] == local_start
    assert _remote(b, settings, "ro") == before           # the other topic keeps its remote data
