"""Tiering settings changed on an existing topic take effect at once, on one `seglog broker`
(no ZooKeeper: the topic's overrides live in its log root), as they do in Kafka 4.1.

- `remote.storage.enable=true` set by Kafka's own kafka-configs on a topic created without it:
  its sealed segments appear in the remote root and local retention applies, without a restart;
  every record is still read from offset 0.
- Turning it off is refused as Kafka 4.1.1 refuses it (checked against the reference broker):
  alone, with `remote.log.copy.disable=true`, after copying was disabled, and by an AlterConfigs
  that leaves remote.storage.enable out; with `remote.log.delete.on.disable=true` it is taken.
  Turning it on again afterwards is taken too, and copying starts again.
- Deleting a tiered topic deletes its remote segments with it, and the partition's object-store
  metadata records DELETE_PARTITION_MARKED, _STARTED, the segments' deletes, then _FINISHED.

One broker for the module, a local folder as the remote root (fast; the S3 path is the same RSM).
"""
from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path

import pytest

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka import KafkaError, KafkaException  # noqa: E402
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry,  # noqa: E402
                                   ConfigResource, NewTopic)

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))
sys.path.insert(0, str(TESTS / "broker"))
sys.path.insert(0, str(TESTS))
import broker_process  # noqa: E402

from broker_helpers import consume_all, produce, wait_until  # noqa: E402
from kafka_reference import KafkaUnavailable, resolve_jars  # noqa: E402

from logcore.log.log_root import LogRoot  # noqa: E402
from logcore.tools.remote_segments import remote_segments  # noqa: E402
from logcore.tiered.metadata import RemoteLogSegmentState  # noqa: E402

CONFIG_COMMAND = "kafka.admin.ConfigCommand"
SEGMENT_FOLDER = re.compile(r"\d{20}-")
KAFKA_REFUSAL = "It is invalid to disable remote storage without deleting remote data."


@pytest.fixture(scope="module")
def tiered_broker(tmp_path_factory):
    base = tmp_path_factory.mktemp("live-tiering")
    settings = {"remote.log.storage.system.enable": "true", "rsm.config.storage.url": str(base / "remote"),
                "rsm.config.chunk.size": "4096"}
    started: list = []
    b = broker_process.start_factory(base, started)(
        **{"log.retention.check.interval.ms": "60000", "remote.log.manager.task.interval.ms": "200",
           "log.segment.delete.delay.ms": "0"}, **settings)
    yield b, settings, base / "remote"
    for running in started:
        running.stop()


def _values(start: int, count: int) -> list[bytes]:
    return [b"%04d-" % i + b"v" * 195 for i in range(start, start + count)]


def _local_bases(b, topic: str) -> list[int]:
    return sorted(int(p.stem) for p in (b.root / f"{topic}-0").glob("*.log"))


def _remote(b, settings, topic: str) -> list[tuple[int, int]]:
    with LogRoot.open(str(b.root), read_only=True, defaults=settings) as root:
        return sorted((m.start_offset, m.end_offset) for _, m in remote_segments(root, topic))


def _remote_files(remote_root: Path, topic_id: str) -> list[str]:
    found = []
    for folder, _, files in os.walk(remote_root):
        if topic_id in folder and SEGMENT_FOLDER.match(os.path.basename(folder)):
            found += files
    return found


def _topic_id(b, topic: str) -> str:
    with LogRoot.open(str(b.root), read_only=True) as root:
        return str(root.describe_topic(topic).topic_id)


def _alter(admin: AdminClient, topic: str, *, incremental: bool = True, **settings: str | None) -> None:
    named = {k.replace("_", "."): v for k, v in settings.items()}
    if incremental:
        ops = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.DELETE if v is None
                           else AlterConfigOpType.SET) for k, v in named.items()]
        futures = admin.incremental_alter_configs([ConfigResource("topic", topic, incremental_configs=ops)])
    else:
        futures = admin.alter_configs([ConfigResource("topic", topic, set_config=named)])
    next(iter(futures.values())).result(10)


def _refused(admin: AdminClient, topic: str, **kwargs) -> str:
    with pytest.raises(KafkaException) as refused:
        _alter(admin, topic, **kwargs)
    assert refused.value.args[0].code() == KafkaError.INVALID_CONFIG, refused.value
    return refused.value.args[0].str()


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated")   # Kafka's AlterConfigs, on purpose
def test_remote_storage_enabled_live_by_kafka_configs(tiered_broker):
    try:
        jars = resolve_jars()
    except KafkaUnavailable as exc:
        pytest.skip(str(exc))
    b, settings, remote_root = tiered_broker
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("late", 1, 1, config={"segment.bytes": "4096"})])["late"].result(15)
    assert all(err is None for err, *_ in produce(b, "late", _values(0, 300), acks="all",
                                                  **{"batch.num.messages": 5}))
    time.sleep(0.6)                 # several tiering passes: nothing is copied yet
    assert _local_bases(b, "late")[0] == 0 and len(_local_bases(b, "late")) >= 10
    topic_id = _topic_id(b, "late")
    assert not _remote_files(remote_root, topic_id)

    done = jars.run_tool(CONFIG_COMMAND, [
        "--bootstrap-server", b.bootstrap, "--entity-type", "topics", "--entity-name", "late", "--alter",
        "--add-config", "remote.storage.enable=true,local.retention.bytes=4096"])
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    # No restart: the open log copies its sealed segments and drops local copies past 4 KiB.
    assert wait_until(lambda: len(_remote(b, settings, "late")) >= 8, 20), b.log_text()[-3000:]
    assert wait_until(lambda: _local_bases(b, "late")[0] > 0, 20)
    assert _remote(b, settings, "late")[0][0] == 0
    got = consume_all(b, "late", 1, 300, start=0, timeout=30)
    assert [o for _, o, *_ in got] == list(range(300))
    assert [v for _, _, _, v, _ in got] == _values(0, 300)

    # Turning it off: refused as Kafka 4.1.1 refuses it, unless remote.log.delete.on.disable=true.
    assert KAFKA_REFUSAL in _refused(admin, "late", remote_storage_enable="false")
    assert KAFKA_REFUSAL in _refused(admin, "late", remote_storage_enable="false",
                                     remote_log_copy_disable="true")
    assert KAFKA_REFUSAL in _refused(admin, "late", incremental=False, segment_bytes="4096")
    _alter(admin, "late", remote_log_copy_disable="true", local_retention_bytes=None)
    assert KAFKA_REFUSAL in _refused(admin, "late", remote_storage_enable="false")
    _alter(admin, "late", remote_storage_enable="false", remote_log_delete_on_disable="true",
           remote_log_copy_disable=None)
    assert wait_until(lambda: not _remote_files(remote_root, topic_id), 20)

    # And on again (Kafka takes it): copying starts again from the local log start.
    local_start = _local_bases(b, "late")[0]
    _alter(admin, "late", remote_storage_enable="true", local_retention_bytes="4096")
    assert all(err is None for err, *_ in produce(b, "late", _values(300, 100), acks="all",
                                                  **{"batch.num.messages": 5}))
    assert wait_until(lambda: _remote(b, settings, "late") and
                      _remote(b, settings, "late")[-1][1] >= 350, 20), b.log_text()[-3000:]
    assert _remote(b, settings, "late")[0][0] == local_start


def test_deleting_a_tiered_topic_deletes_its_remote_data(tiered_broker):
    b, settings, remote_root = tiered_broker
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    config = {"segment.bytes": "4096", "remote.storage.enable": "true", "local.retention.bytes": "4096"}
    admin.create_topics([NewTopic("gone", 1, 1, config=config)])["gone"].result(15)
    assert all(err is None for err, *_ in produce(b, "gone", _values(0, 200), acks="all",
                                                  **{"batch.num.messages": 5}))
    assert wait_until(lambda: len(_remote(b, settings, "gone")) >= 4, 20)
    topic_id = _topic_id(b, "gone")
    assert _remote_files(remote_root, topic_id)

    admin.delete_topics(["gone"])["gone"].result(15)
    assert wait_until(lambda: not _remote_files(remote_root, topic_id), 20)   # gone after the topic
    metadata = next(remote_root.glob(f"gone-{topic_id}")) / "0" / "metadata"
    assert wait_until(lambda: "DELETE_PARTITION_FINISHED" in "".join(
        p.read_text() for p in metadata.glob("0*.json")), 20)
    records = [json.loads(p.read_text()) for p in sorted(metadata.glob("0*.json"))]
    steps = [r["state"] for r in records if r["type"] == "partition_delete"]
    assert steps == ["DELETE_PARTITION_MARKED", "DELETE_PARTITION_STARTED", "DELETE_PARTITION_FINISHED"]
    kinds = [r["type"] for r in records]
    first, last = kinds.index("partition_delete"), len(kinds) - 1
    started = kinds.index("partition_delete", first + 1)
    assert kinds[last] == "partition_delete"
    # MARKED refuses new copy attempts; a copy already under way may still finish before STARTED
    # (and is then deleted with the rest). After STARTED only the segments' deletes are written.
    assert all(r["type"] == "update" and r["segment"]["state"] == RemoteLogSegmentState.COPY_SEGMENT_FINISHED
               for r in records[first + 1:started]), records[first + 1:started]
    assert all(k == "update" for k in kinds[started + 1:last])
