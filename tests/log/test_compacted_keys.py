"""The log refuses records without a key on a compacted topic (`compact` or `compact,delete`),
whatever way they come (records, client batches plain or compressed): the whole batch, every
keyless record named, nothing appended."""
from __future__ import annotations

import pytest

from logcore.errors import RejectedRecordsError
from logcore.log.log_root import LogRoot
from logcore.records.batch import build_batch
from logcore.records.compression import Compression

T0 = 1_700_000_000_000


@pytest.mark.parametrize("policy", ["compact", "compact,delete"])
def test_keyless_records_are_refused_on_compacted_topics(tmp_path, policy):
    with LogRoot.open(str(tmp_path / "r"), create=True) as root:
        root.create_topic("t", 1, {"cleanup.policy": policy})
        log = root.log("t", 0, writer=True)
        log.append_records([(b"k", b"v", (), T0)])
        with pytest.raises(RejectedRecordsError) as info:
            log.append_records([(b"a", b"1", (), T0), (None, b"2", (), T0), (None, b"3", (), T0)])
        assert str(info.value).startswith(f"topic t has cleanup.policy={policy}:")
        assert "batch of 3 records to t-0: 2 records have none, the first is record 1" in str(info.value)
        assert [i for i, _ in info.value.record_errors] == [1, 2]
        for compression in (Compression.NONE, Compression.ZSTD, Compression.GZIP):
            batch = build_batch([(None, b"x", (), T0)] + [(b"k%d" % i, b"y", (), T0) for i in range(300)]
                                + [(None, b"z", (), T0)], compression=compression)
            with pytest.raises(RejectedRecordsError) as info:
                log.append_batch(batch)
            assert [i for i, _ in info.value.record_errors] == [0, 301], compression
            assert "t-0: 2 records have none, the first is record 0" in str(info.value)
        log.commit()
        assert log.log_end_offset == 1
        assert [r.key for r in log.read_records(0)] == [b"k"]
        log.close()


def test_keyless_records_are_kept_on_delete_topics(tmp_path):
    with LogRoot.open(str(tmp_path / "r"), create=True) as root:
        root.create_topic("t", 1, {"cleanup.policy": "delete"})
        log = root.log("t", 0, writer=True)
        log.append_records([(None, b"1", (), T0)])
        log.append_batch(build_batch([(None, b"2", (), T0)], compression=Compression.ZSTD))
        log.commit()
        assert [r.value for r in log.read_records(0)] == [b"1", b"2"]
        log.close()
