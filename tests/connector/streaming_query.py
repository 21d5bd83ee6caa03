"""Streaming queries the connector tests run: an AvailableNow query awaited to its end, and what a
streaming job run as its own driver process prints for its test ("STARTED <query id>" once the
query runs, "BATCH <id> rows <n>" after each micro-batch and "DONE" when it ends)."""
from __future__ import annotations


def await_available_now(q, timeout_s: float = 120) -> None:
    """Wait for an AvailableNow query to finish; its error raised; the query stopped either way."""
    try:
        assert q.awaitTermination(timeout_s), "AvailableNow query did not finish"
        if q.exception():
            raise q.exception()
    finally:
        q.stop()


def run_printing_progress(spark, start) -> None:
    """Start the query (`start()`), print its progress to stdout until it terminates."""
    from pyspark.sql.streaming import StreamingQueryListener

    class Progress(StreamingQueryListener):
        def onQueryStarted(self, event):
            pass

        def onQueryProgress(self, event):
            print(f"BATCH {event.progress.batchId} rows {event.progress.numInputRows}", flush=True)

        def onQueryIdle(self, event):
            pass

        def onQueryTerminated(self, event):
            pass

    spark.streams.addListener(Progress())
    q = start()
    print(f"STARTED {q.id}", flush=True)
    q.awaitTermination()
    print("DONE", flush=True)
