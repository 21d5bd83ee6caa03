"""Retention runs between two triggers of a streaming query: failOnDataLoss decides what the
source does with offsets that are gone (real Spark, local[2])."""
from __future__ import annotations

from logcore.log.log_root import LogRoot
from test_source import Collector, run_available_now, stream
from test_source_read import T0, append, make_root, value_of


def test_retention_between_triggers_fails_or_skips(spark, tmp_path):
    url = make_root(tmp_path / "r", {"t": 1},
                    {"segment.bytes": "400", "retention.bytes": "600", "file.delete.delay.ms": "0"})
    append(url, "t", 0, 0, 50)
    strict, lenient = Collector(), Collector()
    options = {"subscribe": "t", "startingOffsets": "earliest"}
    run_available_now(stream(spark, url, **options), tmp_path / "strict", strict)
    run_available_now(stream(spark, url, failOnDataLoss="false", **options), tmp_path / "lenient",
                      lenient)
    assert len(strict.rows) == len(lenient.rows) == 50

    append(url, "t", 0, 50, 50)
    root = LogRoot.open(url)
    log = root.log("t", 0, writer=True)
    result = log.apply_retention(now_ms=T0)          # retention.bytes: the oldest segments go
    root.close()
    start = result.log_start_offset
    assert result.segments_deleted > 0 and 50 < start < 100

    try:
        run_available_now(stream(spark, url, **options), tmp_path / "strict", strict)
        raise AssertionError("the query did not fail on lost offsets")
    except AssertionError:
        raise
    except Exception as exc:                          # StreamingQueryException from Spark
        message = str(exc)
    assert "t-0" in message and f"offsets 50 to {start - 1}" in message
    assert "failOnDataLoss" in message

    run_available_now(stream(spark, url, failOnDataLoss="false", **options), tmp_path / "lenient",
                      lenient)
    later = sorted(offset for _t, _p, offset, _v in lenient.rows[50:])
    assert later == list(range(start, 100))
    assert all(v == value_of("t", 0, o) for _t, _p, o, v in lenient.rows)
