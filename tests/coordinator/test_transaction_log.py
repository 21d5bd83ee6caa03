"""The `__transaction_state` record codec: Kafka's TransactionLogKey v0 / TransactionLogValue
v0 layout (round trips, property-based; a hand-made v1 value with tagged fields), the
partition of an id (Java String.hashCode), and Kafka's own DumpLogSegments
--transaction-log-decoder reading the records seglog writes."""
from __future__ import annotations

import json
import re
import struct
import sys
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from logcore.coordinator import transaction_log as TL
from logcore.coordinator.transaction_log import TxnRecord, TxnState
from logcore.errors import CorruptRecordError
from logcore.log.log_root import LogRoot
from logcore.records.batch import build_batch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ids = st.text(min_size=1, max_size=40)
records = st.builds(
    TxnRecord,
    producer_id=st.integers(0, 2**63 - 1), producer_epoch=st.integers(-1, 32767),
    timeout_ms=st.integers(1, 2**31 - 1), state=st.sampled_from(list(TxnState)),
    partitions=st.dictionaries(st.text(min_size=1, max_size=20), st.sets(st.integers(0, 2**31 - 1), min_size=1,
                                                                          max_size=5), max_size=4).map(
        lambda d: TL.group_partitions((t, p) for t, ps in d.items() for p in ps)),
    last_update_ms=st.integers(-1, 2**62), start_ms=st.integers(-1, 2**62))


@given(ids)
def test_key_round_trip(tid):
    assert TL.parse_key(TL.encode_key(tid)) == tid


@given(records)
def test_value_round_trip(r):
    assert TL.parse_value(TL.encode_value(r)) == r


@given(records, st.data())
def test_truncated_value_is_corrupt(r, data):
    raw = TL.encode_value(r)
    cut = data.draw(st.integers(0, len(raw) - 1))
    with pytest.raises(CorruptRecordError):
        TL.parse_value(raw[:cut])


def test_value_v0_layout_by_hand():
    r = TxnRecord(7, 3, 60000, TxnState.ONGOING, (("t", (0, 1)),), 1000, 900)
    expected = (struct.pack(">hqhib", 0, 7, 3, 60000, 1) + struct.pack(">i", 1) + struct.pack(">h", 1) + b"t"
                + struct.pack(">iii", 2, 0, 1) + struct.pack(">qq", 1000, 900))
    assert TL.encode_value(r) == expected
    assert TL.encode_key("ab") == struct.pack(">hh", 0, 2) + b"ab"


def test_value_v1_with_tagged_fields():
    def uv(n):
        out = b""
        while True:
            b, n = n & 0x7F, n >> 7
            out += bytes([b | (0x80 if n else 0)])
            if not n:
                return out
    tags = [(0, struct.pack(">q", 5)), (2, struct.pack(">h", 2)), (3, struct.pack(">h", 4))]
    raw = (struct.pack(">hqhib", 1, 9, 4, 1000, 2) + uv(2) + uv(2) + b"t" + uv(2) + struct.pack(">i", 3) + uv(0)
           + struct.pack(">qq", 11, 10) + uv(len(tags)) + b"".join(uv(t) + uv(len(v)) + v for t, v in tags))
    r = TL.parse_value(raw)
    assert (r.producer_id, r.producer_epoch, r.state, r.partitions) == (9, 4, TxnState.PREPARE_COMMIT, (("t", (3,)),))
    assert (r.previous_producer_id, r.client_transaction_version, r.next_producer_epoch) == (5, 2, 4)


def test_partition_is_java_hashcode():
    # String.hashCode values: "a" = 97, "txn" = 116*31*31 + 120*31 + 110 = 115306, "polygenelubricants" = Integer.MIN_VALUE
    assert TL.partition_for("a", 50) == 97 % 50
    assert TL.partition_for("txn", 50) == 115306 % 50
    assert TL.partition_for("polygenelubricants", 50) == 0
    assert TL.partition_for("é", 7) == 0xE9 % 7


def test_state_names():
    assert [s.kafka_name for s in TxnState] == ["Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit",
                                                "CompleteAbort", "Dead", "PrepareEpochFence"]


def test_kafka_transaction_log_decoder_reads_our_records(kafka_jars, tmp_path):
    root = LogRoot.open(str(tmp_path / "root"), create=True)
    root.create_topic(TL.TOPIC, config={"cleanup.policy": "compact"})
    written = [("tx-a", TxnRecord(1, 0, 60000, TxnState.EMPTY, (), 10, -1)),
               ("tx-a", TxnRecord(1, 0, 60000, TxnState.ONGOING, (("orders", (0, 2)), ("x", (1,))), 11, 11)),
               ("tx-b", TxnRecord(2, 5, 1000, TxnState.PREPARE_ABORT, (("orders", (1,)),), 12, 9)),
               ("tx-a", TxnRecord(1, 0, 60000, TxnState.COMPLETE_COMMIT, (), 13, 11))]
    with root.log(TL.TOPIC, 0, writer=True) as log:
        for tid, r in written:
            log.append_batch(build_batch([(TL.encode_key(tid), TL.encode_value(r), (), 1000)]))
        log.commit()
    root.close()
    files = sorted(str(p) for p in (tmp_path / "root" / f"{TL.TOPIC}-0").glob("*.log"))
    out = kafka_jars.dump_log_segments(files, "--transaction-log-decoder", "--print-data-log")
    assert out.returncode == 0, out.stderr[-3000:]
    decoded = []
    for line in out.stdout.splitlines():
        m = re.search(r"key: (\{.*\}) payload: (\{.*\})$", line)
        if m:
            decoded.append((json.loads(m.group(1)), json.loads(m.group(2))))
    assert len(decoded) == len(written), out.stdout[-3000:]
    for (key, value), (tid, r) in zip(decoded, written):
        assert key["data"]["transactionalId"] == tid
        data = value["data"]
        assert (data["producerId"], data["producerEpoch"], data["transactionTimeoutMs"], data["transactionStatus"]) == \
            (r.producer_id, r.producer_epoch, r.timeout_ms, int(r.state))
        assert [(p["topic"], tuple(p["partitionIds"])) for p in data["transactionPartitions"]] == list(r.partitions)
        assert (data["transactionLastUpdateTimestampMs"], data["transactionStartTimestampMs"]) == \
            (r.last_update_ms, r.start_ms)
