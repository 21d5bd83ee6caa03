"""Kafka's BrokerTopicMetrics per topic: BytesInPerSec, MessagesInPerSec (client produces) and
BytesOutPerSec (consumer fetches; a follower's replica fetch is replication traffic, which Kafka
counts apart and which is not counted here), as the JMX exporter names them.

One update per produced batch or fetched partition, in plain numbers on the event loop's thread;
the scrape thread reads them (collect())."""
from __future__ import annotations

import struct

from prometheus_client.core import CounterMetricFamily

# RecordBatch v2 header: batchLength at 8 (int32, the bytes after offset 12), recordCount at 57,
# read in one unpack.
_LENGTH_COUNT = struct.Struct(">8xi45xi")
_HEADER = 61


def batch_record_count(records) -> int:
    """Records in a produce request's record set: the sum of its batches' recordCount fields
    (one header read per batch; a truncated tail counts nothing)."""
    total, at, end = 0, 0, len(records)
    while at + _HEADER <= end:
        length, count = _LENGTH_COUNT.unpack_from(records, at)
        if length <= 0:
            break
        if count > 0:
            total += count
        at += 12 + length
    return total


class TopicMetrics:
    """bytesin_total, messagesin_total and bytesout_total by topic (a collector)."""

    def __init__(self):
        self._in: dict[str, list[int]] = {}       # topic -> [bytes, records]
        self._out: dict[str, int] = {}

    def produced(self, topic: str, records) -> None:
        """A client's batch (the record set of one partition of a Produce) taken for appending."""
        counts = self._in.get(topic)
        if counts is None:
            counts = self._in[topic] = [0, 0]
        counts[0] += len(records)
        counts[1] += batch_record_count(records)

    def fetched(self, topic: str, size: int) -> None:
        """`size` bytes of `topic` put in a consumer's fetch response."""
        self._out[topic] = self._out.get(topic, 0) + size

    def describe(self):
        return []

    def collect(self):
        bytes_in = CounterMetricFamily("kafka_server_brokertopicmetrics_bytesin",
                                       "Bytes of record batches produced by clients, by topic", labels=["topic"])
        messages_in = CounterMetricFamily("kafka_server_brokertopicmetrics_messagesin",
                                          "Records produced by clients, by topic", labels=["topic"])
        bytes_out = CounterMetricFamily("kafka_server_brokertopicmetrics_bytesout",
                                        "Bytes of records sent to consumers, by topic", labels=["topic"])
        for topic, (size, records) in sorted((t, list(c)) for t, c in dict(self._in).items()):
            bytes_in.add_metric([topic], size)
            messages_in.add_metric([topic], records)
        for topic, size in sorted(dict(self._out).items()):
            bytes_out.add_metric([topic], size)
        return [bytes_in, messages_in, bytes_out]
