"""The driver's view of the subscribed partitions through the brokers alone (readFrom=brokers, or
no `path`): which partitions exist (Metadata), their earliest and latest offsets and offsets by
timestamp (ListOffsets to each leader: the LSO with read_committed, else the HW), as Spark's
Kafka source plans. The same questions root_logs.RootLogs answers from a log root.
"""
from __future__ import annotations

from logcore.wire.list_offsets import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from pyspark_seglog.subscription import subscribed_partitions


class BrokerLogs:
    def __init__(self, opts):
        from pyspark_seglog.broker_client import BrokerClient
        self.opts = opts
        self._client = BrokerClient(opts.bootstrap_servers, client_id="seglog-spark-source",
                                    retry_timeout=opts.retry_timeout_ms / 1000.0,
                                    security=opts.security.client())
        self._earliest: dict = {}
        self._latest: dict = {}

    def topic_partitions(self) -> list:
        """The subscribed partitions the cluster has now (internal topics only when named)."""
        return subscribed_partitions(self.opts, self._client)

    def refresh(self, tps) -> None:
        tps = list(tps)
        if not tps:
            return
        isolation = self.opts.isolation
        # The log start first: a partition's range is then never below what it answered.
        self._earliest.update(self._client.list_offsets(tps, timestamp=EARLIEST_TIMESTAMP, isolation=isolation))
        self._latest.update(self._client.list_offsets(tps, timestamp=LATEST_TIMESTAMP, isolation=isolation))

    def seen(self, tp) -> bool:
        return tp in self._earliest

    def earliest(self, tp) -> int:
        if tp not in self._earliest:
            self.refresh([tp])
        return self._earliest[tp]

    def latest(self, tp) -> int:
        if tp not in self._latest:
            self.refresh([tp])
        return self._latest[tp]

    def offset_for_timestamp(self, tp, timestamp_ms: int) -> tuple[int] | None:
        """(offset,) of the first record at or after `timestamp_ms`, or None (ListOffsets -1)."""
        found = self._client.list_offsets([tp], timestamp=timestamp_ms, isolation=self.opts.isolation)[tp]
        return None if found < 0 else (found,)

    def close(self) -> None:
        self._client.close()
        self._earliest.clear()
        self._latest.clear()
