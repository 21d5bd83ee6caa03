"""format("seglog") streams a compacted topic with gaps while the cleaner runs and a writer appends.

Every row the source returns must be a record that was written (same offset, key and value),
offsets must increase per partition, and the stream as a whole must contain the final record of
every key (compaction never removes it; tombstones stay for delete.retention.ms).
"""
from __future__ import annotations

import threading
import time

from logcore.cleaner.cleaner import LogCleaner
from logcore.log.log_root import LogRoot
from streaming_query import await_available_now

PARTITIONS = 2
KEYS = 25


class Rows:
    """foreachBatch sink on the driver: the rows of each micro-batch, in the order returned."""

    def __init__(self):
        self.batches: list[list[tuple]] = []

    def __call__(self, df, batch_id):
        rows = [(r.partition, r.offset, bytes(r.key), None if r.value is None else bytes(r.value))
                for r in df.select("partition", "offset", "key", "value").collect()]
        self.batches.append(rows)


class Workload:
    """One writer per partition appending keyed records (some tombstones) and committing, and a
    cleaner thread running passes over the same writer logs."""

    def __init__(self, url: str):
        self.root = LogRoot.open(url)
        self.logs = [self.root.log("c", p, writer=True) for p in range(PARTITIONS)]
        self.written: list[dict[int, tuple]] = [{} for _ in range(PARTITIONS)]
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.errors: list[BaseException] = []
        self.passes = 0
        self.n = 0

    def append(self, count: int) -> None:
        for p, log in enumerate(self.logs):
            for _ in range(count):
                i = self.n
                self.n += 1
                key = b"k%d" % ((i * 7 + p) % KEYS)
                value = None if i % 13 == 5 else b"value-%d-%d" % (p, i)
                with self.lock:
                    info = log.append_records([(key, value, (), 1_700_000_000_000 + i)])
                    self.written[p][info.first_offset] = (key, value)
            log.commit()

    def _writer(self) -> None:
        try:
            while not self.stop.is_set():
                self.append(10)
                time.sleep(0.05)
        except BaseException as exc:    # noqa: BLE001 - reported by the test
            self.errors.append(exc)

    def _cleaner(self) -> None:
        cleaner = LogCleaner(dedupe_buffer_size=1 << 16)
        try:
            while not self.stop.is_set():
                for log in self.logs:
                    if cleaner.clean(log) is not None:
                        self.passes += 1
                time.sleep(0.05)
        except BaseException as exc:    # noqa: BLE001
            self.errors.append(exc)

    def run(self) -> list[threading.Thread]:
        threads = [threading.Thread(target=self._writer), threading.Thread(target=self._cleaner)]
        for t in threads:
            t.start()
        return threads


def _available_now(spark, url, checkpoint, sink) -> None:
    df = (spark.readStream.format("seglog").option("subscribe", "c").option("startingOffsets", "earliest")
          .option("maxOffsetsPerTrigger", 600).load(url))
    q = (df.writeStream.foreachBatch(sink).option("checkpointLocation", str(checkpoint))
         .trigger(availableNow=True).start())
    await_available_now(q)


def test_stream_reads_a_compacted_topic_while_the_cleaner_runs(spark, tmp_path):
    url = str(tmp_path / "root")
    root = LogRoot.open(url, create=True)
    # file.delete.delay.ms=0: replaced segments vanish at the next pass, so readers that planned
    # a range over them must find the cleaned segments instead.
    root.create_topic("c", PARTITIONS, {"cleanup.policy": "compact", "segment.bytes": "3000",
                                        "file.delete.delay.ms": "0"})
    root.close()
    work = Workload(url)
    work.append(150)
    cleaner = LogCleaner(dedupe_buffer_size=1 << 16)
    for log in work.logs:
        assert cleaner.clean(log) is not None           # a compacted topic with gaps to begin with
    sink = Rows()
    threads = work.run()
    try:
        for _ in range(2):
            _available_now(spark, url, tmp_path / "ckpt", sink)
    finally:
        work.stop.set()
        for t in threads:
            t.join()
    assert not work.errors, work.errors
    _available_now(spark, url, tmp_path / "ckpt", sink)     # the tail, with everything committed
    try:
        assert work.passes > 0 and len(sink.batches) > 2
        last_offset = [-1] * PARTITIONS
        for batch in sink.batches:
            for partition, offset, key, value in batch:
                assert work.written[partition].get(offset) == (key, value), (partition, offset)
                assert offset > last_offset[partition], "offsets increase per partition"
                last_offset[partition] = offset
        seen = [{o for p, o, _k, _v in (r for b in sink.batches for r in b) if p == part}
                for part in range(PARTITIONS)]
        for partition in range(PARTITIONS):
            final = {}
            for offset in sorted(work.written[partition]):
                final[work.written[partition][offset][0]] = offset
            missing = sorted(o for o in final.values() if o not in seen[partition])
            assert not missing, f"partition {partition}: final records not read: {missing}"
            gaps = len(work.written[partition]) - len(seen[partition])
            assert gaps > 0, "the stream read a compacted log (with gaps)"
    finally:
        work.root.close()
