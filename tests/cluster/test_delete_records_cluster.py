"""DeleteRecords on a three-broker cluster (issue 28 item 1): `seglog delete-records` moves the
log start offset at the leader, the answer's low watermark says every in-sync replica followed,
each broker's replica records the new start on disk, a new leader after a SIGKILL answers the
same earliest offset (a consumer from earliest starts there), and a SIGKILL and restart of every
broker keeps it."""
from __future__ import annotations

import contextlib
import io
import json
import time

import pytest

from seglog_cluster import SeglogCluster

ck = pytest.importorskip("confluent_kafka", reason="confluent-kafka is not installed")

from logcore.tools import cli  # noqa: E402

pytestmark = [pytest.mark.soak, pytest.mark.timeout(300)]   # a 3-broker cluster with kills, ~40 s: -m soak (one broker: tests/kafka_ref/test_group_admin_tools.py)


def _earliest(c: SeglogCluster) -> int:
    consumer = ck.Consumer({"bootstrap.servers": c.bootstrap, "group.id": "probe"})
    try:
        return consumer.get_watermark_offsets(ck.TopicPartition("dr", 0), timeout=10, cached=False)[0]
    finally:
        consumer.close()


def _start_on_disk(c: SeglogCluster, broker: int) -> int | None:
    path = c.brokers[broker].log_dir / "dr-0" / "log-start-offset"
    return int(path.read_text().strip()) if path.exists() else None


def test_delete_records_moves_every_replicas_log_start_and_survives(tmp_path, zk_hosts):
    with SeglogCluster.running(tmp_path, zk_hosts, size=3) as c:
        c.create_topic("dr", 1, rf=3, config={"segment.bytes": "2048"})
        producer = ck.Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "linger.ms": 5,
                                "batch.num.messages": 10})      # batches well under segment.bytes
        failed = []
        for i in range(200):
            producer.produce("dr", b"value-%04d" % i, partition=0,
                             on_delivery=lambda err, _msg: err is not None and failed.append(err))
        assert producer.flush(60) == 0 and not failed, failed
        offsets = tmp_path / "del.json"
        offsets.write_text(json.dumps({"partitions": [{"topic": "dr", "partition": 0, "offset": 120}],
                                       "version": 1}))
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert cli.main(["delete-records", "--bootstrap-server", c.bootstrap,
                             "--offset-json-file", str(offsets)]) == 0, out.getvalue()
        assert "partition: dr-0\tlow_watermark: 120" in out.getvalue()
        # The low watermark is the smallest start of the ISR: every replica has moved.
        for b in (1, 2, 3):
            assert _start_on_disk(c, b) == 120, b
        assert _earliest(c) == 120

        leader = c.leader_of("dr")
        c.brokers[leader].kill()
        c.wait_for(lambda: c.leader_of("dr") not in (-1, leader), 30, "a new leader of dr-0")
        assert _earliest(c) == 120
        assert c.read_partition("dr")[0][0] == 120

        # SIGKILL of every broker (faster than clean stops, and harsher): the start is on disk.
        for b in c.brokers.values():
            if b.alive():
                b.kill()
        for b in c.brokers.values():
            b.start(wait=False)
        for b in c.brokers.values():
            b.wait_serving()
        c.wait_for(lambda: c.leader_of("dr") >= 0, 30, "a leader of dr-0 after the restart")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if _earliest(c) == 120:
                    break
            except ck.KafkaException:
                pass
            time.sleep(0.2)
        assert _earliest(c) == 120
        assert [_start_on_disk(c, b) for b in (1, 2, 3)] == [120, 120, 120]
