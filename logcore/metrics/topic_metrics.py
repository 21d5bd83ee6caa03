"""Kafka's BrokerTopicMetrics per topic: BytesInPerSec, MessagesInPerSec (client produces) and
BytesOutPerSec (consumer fetches; a follower's replica fetch is replication traffic, which Kafka
counts apart and which is not counted here), as the JMX exporter names them. One update per
produced batch or fetched partition; a topic's labelled children are cached."""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

# RecordBatch v2 header: batchLength at 8 (int32, the bytes after offset 12), recordCount at 57.
_LENGTH_AT, _COUNT_AT, _HEADER = 8, 57, 61


def batch_record_count(records) -> int:
    """Records in a produce request's record set: the sum of its batches' recordCount fields
    (one header read per batch; a truncated tail counts nothing)."""
    total, at, end = 0, 0, len(records)
    while at + _HEADER <= end:
        length = int.from_bytes(records[at + _LENGTH_AT:at + _LENGTH_AT + 4], "big", signed=True)
        if length <= 0:
            break
        total += max(0, int.from_bytes(records[at + _COUNT_AT:at + _HEADER], "big", signed=True))
        at += 12 + length
    return total


class TopicMetrics:
    """bytesin_total, messagesin_total and bytesout_total by topic. Without a registry the
    counters are kept but exported nowhere (a Broker built without metrics)."""

    def __init__(self, registry: CollectorRegistry | None = None):
        kw = {"registry": registry}
        self._bytes_in = Counter("kafka_server_brokertopicmetrics_bytesin",
                                 "Bytes of record batches produced by clients, by topic", ["topic"], **kw)
        self._messages_in = Counter("kafka_server_brokertopicmetrics_messagesin",
                                    "Records produced by clients, by topic", ["topic"], **kw)
        self._bytes_out = Counter("kafka_server_brokertopicmetrics_bytesout",
                                  "Bytes of records sent to consumers, by topic", ["topic"], **kw)
        self._in: dict[str, tuple] = {}
        self._out: dict[str, object] = {}

    def produced(self, topic: str, records) -> None:
        """A client's batch (the record set of one partition of a Produce) taken for appending."""
        children = self._in.get(topic)
        if children is None:
            children = self._in[topic] = (self._bytes_in.labels(topic), self._messages_in.labels(topic))
        children[0].inc(len(records))
        children[1].inc(batch_record_count(records))

    def fetched(self, topic: str, size: int) -> None:
        """`size` bytes of `topic` put in a consumer's fetch response."""
        child = self._out.get(topic)
        if child is None:
            child = self._out[topic] = self._bytes_out.labels(topic)
        child.inc(size)
