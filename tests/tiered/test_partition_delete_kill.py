"""A broker SIGKILLed while it deletes a deleted topic's remote data: the broker started again
finds the partition's deletion marked and unfinished in the remote metadata and finishes it
(as a broker resumes what it was doing): no segment of the topic is left in the bucket, the
partition's records end with one DELETE_PARTITION_FINISHED, in order, written with the
broker's id.

One `seglog broker` process over a root tiered beforehand (about 60 remote segments, so that
the deletion takes long enough to be cut short), a local folder as the bucket.
"""
from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path

import pytest

from logcore.log.log_root import LogRoot
from logcore.maintenance.service import MaintenanceService
from logcore.tiered.metadata import RemoteLogSegmentState as S, RemotePartitionDeleteState as P
from logcore.tiered.metadata_store import RemoteLogMetadataStore
from tests.tiered.tiered_root import produce, tiering_defaults

ck = pytest.importorskip("confluent_kafka", reason="confluent-kafka is not installed")
from confluent_kafka.admin import AdminClient  # noqa: E402

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))
sys.path.insert(0, str(TESTS / "broker"))
sys.path.insert(0, str(TESTS))
import broker_process  # noqa: E402

TOPIC = "gone"
CONFIG = {"remote.storage.enable": "true", "segment.bytes": "4096", "local.retention.bytes": "4096",
          "retention.bytes": "-1"}


def _segment_folders(remote: Path) -> list[Path]:
    return [p for p in remote.glob(f"{TOPIC}-*/0/*") if p.is_dir() and p.name != "metadata"]


def _records(metadata: Path) -> list[dict]:
    """The partition's metadata records above its snapshot, in sequence order."""
    return [json.loads(p.read_text()) for p in sorted(metadata.glob("0*.json"))]


def test_broker_killed_mid_deletion_finishes_it_when_started_again(tmp_path):
    remote = tmp_path / "remote"
    settings = tiering_defaults(str(remote))
    root = LogRoot.open(str(tmp_path / "logs"), create=True, defaults=settings)
    root.create_topic(TOPIC, config=CONFIG)
    log = root.log(TOPIC, 0, writer=True)
    produce(log, 60)                 # a batch a segment
    root.release_log(log)
    MaintenanceService(root).run_once()
    topic_id = root.describe_topic(TOPIC).topic_id
    root.close()
    copied = len(_segment_folders(remote))
    assert copied >= 50, copied

    start = broker_process.start_factory(tmp_path, started := [])
    try:
        broker = start(tmp_path / "logs", **{"log.retention.check.interval.ms": "600000",
                                             "remote.log.manager.task.interval.ms": "600000"},
                       **settings)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.delete_topics([TOPIC])[TOPIC].result(30)
        del admin                    # no reconnecting to the broker about to be killed
        deadline = time.monotonic() + 30
        while len(_segment_folders(remote)) == copied and time.monotonic() < deadline:
            time.sleep(0.002)
        broker.stop(signal.SIGKILL)
        left = len(_segment_folders(remote))
        assert 0 < left < copied, f"{left} of {copied} segments left at the kill"
        store = RemoteLogMetadataStore.open(str(remote), TOPIC, 0)
        assert store.partition_delete in (P.DELETE_PARTITION_MARKED, P.DELETE_PARTITION_STARTED)

        broker = start(tmp_path / "logs", **settings)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (_segment_folders(remote)
                                               or store.partition_delete is not P.DELETE_PARTITION_FINISHED):
            time.sleep(0.05)
            store.refresh()
        assert not _segment_folders(remote) and store.partition_delete is P.DELETE_PARTITION_FINISHED
        assert "resuming the deletion of its remote data" in broker.log_text()
    finally:
        for running in started:
            running.stop()
    assert {m.state for m in store.list_segments(None)} <= {S.DELETE_SEGMENT_FINISHED}

    # The records the restarted broker wrote: each segment's steps in order, one FINISHED last.
    metadata = next(remote.glob(f"{TOPIC}-{topic_id}")) / "0" / "metadata"
    records = _records(metadata)
    steps = [r["state"] for r in records if r["type"] == "partition_delete"]
    assert steps[-1] == "DELETE_PARTITION_FINISHED" and steps.count("DELETE_PARTITION_FINISHED") == 1
    assert records[-1]["type"] == "partition_delete" and records[-1]["brokerId"] == 0
    assert steps == sorted(steps, key=lambda s: P[s].value)
    seen: dict[str, int] = {}
    for r in records:
        if r["type"] == "update":
            segment = r["segment"]
            sid, state = json.dumps(segment.get("segmentId", segment.get("id"))), segment["state"]
            assert state > seen.get(sid, -1), r            # no step repeated or taken back
            seen[sid] = state
            if S(state) in (S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED):
                assert segment["brokerId"] == 0
