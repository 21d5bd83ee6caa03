"""The Spark source reads a topic whose older half lives only in S3 (tiered storage) and gets
exactly the records it got before tiering; startingTimestamp / endingTimestamp there find offsets
through the remote tier."""
from __future__ import annotations

from logcore.log.log_root import LogRoot
from logcore.maintenance.service import MaintenanceService
from tests.tiered.tiered_root import produce, tiering_defaults


def test_batch_read_of_a_topic_half_in_s3(spark, tmp_path, storage_targets):
    remote = storage_targets.make("s3")
    url = str(tmp_path / "root")
    settings = tiering_defaults(remote.url, remote.storage_options)
    root = LogRoot.open(url, create=True, defaults=settings)
    # The root does not store the remote tier's credentials: readers pass them as options.
    creds = {k: v for k, v in settings.items() if k in ("rsm.config.storage.key", "rsm.config.storage.secret")}
    assert len(creds) == 2 and not any(v in (root.storage.read("seglog-topics.json").decode())
                                       for v in creds.values() if len(v) > 3)
    root.create_topic("t", config={"remote.storage.enable": "true", "segment.bytes": "16384",
                                   "local.retention.bytes": "120000", "retention.bytes": "-1"})
    log = root.log("t", 0, writer=True)
    produce(log, 120, aborted_every=11)
    hw = log.high_watermark
    root.release_log(log)

    def read() -> list[tuple]:
        df = spark.read.format("seglog").options(**creds).option("subscribe", "t").load(url)
        return sorted(tuple(r) for r in df.select("offset", "key", "value", "timestamp").collect())

    before = read()
    assert len(before) > 1000
    MaintenanceService(root).run_once()
    reader = LogRoot.open(url, read_only=True, defaults=creds).log("t", 0)
    assert reader.log_start_offset == 0 and reader.local_log_start_offset >= hw // 2
    assert "00000000000000000000.log" not in root.storage.list_dir("t-0")    # only in S3 now
    reader.close()
    assert read() == before

    # startingTimestamp / endingTimestamp in the part only S3 holds: found by the remote search,
    # the range is [first offset reaching the start, first offset reaching the end).
    def times() -> list[tuple[int, int]]:
        df = spark.read.format("seglog").options(**creds).option("subscribe", "t").load(url)
        return sorted(tuple(r) for r in df.selectExpr("offset", "unix_millis(timestamp)").collect())

    stamps = times()
    first_local = next(i for i, (o, _ts) in enumerate(stamps) if o >= hw // 2)
    start_ts, end_ts = stamps[first_local // 4][1], stamps[first_local // 2][1] + 1
    assert start_ts > stamps[0][1]                       # not simply the earliest offset
    start_at = next(o for o, ts in stamps if ts >= start_ts)
    end_at = next(o for o, ts in stamps if ts >= end_ts)
    df = (spark.read.format("seglog").options(**creds).option("subscribe", "t").option("startingTimestamp", str(start_ts))
          .option("endingTimestamp", str(end_ts)).load(url))
    got = sorted(r.offset for r in df.select("offset").collect())
    assert got == [o for o, _ts in stamps if start_at <= o < end_at] and got
    root.close()
