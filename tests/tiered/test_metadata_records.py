"""The records of `__remote_log_metadata` in Kafka's layout: they round-trip, bad bytes are an error
naming where, and Kafka's own RemoteLogMetadataSerde reads them and writes them back byte for
byte; the metadata partition of a user partition is the one Kafka's partitioner picks."""
from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from logcore.errors import CorruptIndexError
from logcore.log.partition_metadata import format_topic_id
from logcore.tiered.metadata import RemoteLogSegmentState as S, TopicIdPartition
from logcore.tiered.metadata_records import (PartitionDelete, SegmentUpdate, decode,
                                             encode_partition_delete, encode_segment_metadata,
                                             encode_segment_snapshot, encode_segment_update,
                                             metadata_partition)
from tests.tiered.helpers import TIP, new_metadata

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from kafka_reference import KafkaUnavailable, resolve_jars  # noqa: E402

META = new_metadata(100, 199, 5000, epochs={3: 100, 5: 150})
FINISHED = META.with_update(S.COPY_SEGMENT_FINISHED, custom_metadata=b"\x01\x02\x03", broker_id=2)
TIPS = [TopicIdPartition(uuid.UUID(int=(i * 0x9E3779B97F4A7C15_F39CC0605CEDC834) % 2**128), f"t{i}", i % 7)
        for i in range(1, 40)]


def _records() -> list[bytes]:
    return [encode_segment_metadata(META), encode_segment_update(FINISHED),
            encode_partition_delete(PartitionDelete(TIP, 1, 2, 1_700_000_000_000)),
            encode_segment_snapshot(FINISHED)]


def test_round_trip():
    add, update, delete, snapshot = _records()
    assert add[:3] == b"\x01\x00\x00" and update[:3] == b"\x01\x01\x00" and snapshot[:3] == b"\x01\x03\x00"
    assert decode(add) == META
    assert decode(update) == SegmentUpdate(FINISHED.segment_id, S.COPY_SEGMENT_FINISHED, 2,
                                           FINISHED.event_timestamp_ms, b"\x01\x02\x03")
    assert decode(delete) == PartitionDelete(TIP, 1, 2, 1_700_000_000_000)
    assert decode(snapshot, tip=TIP) == FINISHED
    for bad in (add[:-3], add + b"\x00", b"\x00" + add[1:], b"\x01\x09\x00", update[:3] + b"\xff" * 8):
        with pytest.raises(CorruptIndexError, match="__remote_log_metadata"):
            decode(bad)


def test_partitions_spread_and_stay_in_range():
    found = {metadata_partition(tip, 50) for tip in TIPS}
    assert found <= set(range(50)) and len(found) > 10
    assert all(metadata_partition(tip, 1) == 0 for tip in TIPS)


_CHECK = """
import java.util.*;
import org.apache.kafka.common.*;
import org.apache.kafka.server.log.remote.metadata.storage.RemoteLogMetadataTopicPartitioner;
import org.apache.kafka.server.log.remote.metadata.storage.serialization.RemoteLogMetadataSerde;
import org.apache.kafka.server.log.remote.storage.RemoteLogMetadata;

public class RlmmCheck {
    public static void main(String[] args) {
        RemoteLogMetadataSerde serde = new RemoteLogMetadataSerde();
        Scanner in = new Scanner(System.in);
        while (in.hasNextLine()) {
            String[] f = in.nextLine().trim().split(" ");
            if (f[0].equals("record")) {
                RemoteLogMetadata m = serde.deserialize(HexFormat.of().parseHex(f[1]));
                System.out.println(HexFormat.of().formatHex(serde.serialize(m)) + " " + m);
            } else if (f[0].equals("partition")) {
                TopicIdPartition tip = new TopicIdPartition(Uuid.fromString(f[1]),
                    new TopicPartition("t", Integer.parseInt(f[2])));
                System.out.println(new RemoteLogMetadataTopicPartitioner(Integer.parseInt(f[3])).metadataPartition(tip));
            }
        }
    }
}
"""


def test_kafka_reads_and_writes_the_same_bytes(tmp_path):
    try:
        jars = resolve_jars()
    except KafkaUnavailable as exc:
        pytest.skip(f"Kafka's jars: {exc}")
    source = tmp_path / "RlmmCheck.java"
    source.write_text(_CHECK)
    records = _records()
    lines = [f"record {r.hex()}" for r in records[:3]]
    lines += [f"partition {format_topic_id(t.topic_id)} {t.partition} 50" for t in TIPS]
    cmd = jars.java_command(str(source), [], extra_jvm=["-XX:TieredStopAtLevel=1"])
    proc = subprocess.run(cmd, input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout.splitlines()
    assert len(out) == len(lines), proc.stdout
    for record, line in zip(records, out[:3]):
        assert line.split(" ", 1)[0] == record.hex(), line
    assert "COPY_SEGMENT_FINISHED" in out[1] and "startOffset=100" in out[0]
    assert [int(x) for x in out[3:]] == [metadata_partition(t, 50) for t in TIPS]
