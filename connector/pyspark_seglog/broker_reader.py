"""A task's offset range read through the brokers (Fetch over the Kafka protocol), for tasks that
cannot reach a replica's files: the same rows as the files give (partition_reader.py).

The task fetches [start, until) from the partition's leader, or, with `kafka.client.rack`
(KIP-392), from the replica the leader names as preferred for that rack. Each Fetch returns
whole batches up to the serving replica's high watermark (LSO with read_committed); they are
decoded by the same vectorised decoder as the files, aborted transactions dropped by the ranges
the response's aborted_transactions and the fetched abort markers give.

Failures, as Kafka's consumer handles them: a broken connection or a stale leader
(NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, ...) refreshes Metadata and fetches again from
the same offset, for at most `retry_timeout` without progress; so a leader killed mid-read
loses and repeats nothing (rows are yielded once, in offset order, and the next fetch starts
where the last decoded batch ended). A preferred replica that errs or lags sends the task back
to the leader. OFFSET_OUT_OF_RANGE from the leader follows failOnDataLoss, as the files do.
"""
from __future__ import annotations

import logging
import time

from logcore.errors import CorruptRecordError, OffsetOutOfRangeError
from logcore.records.arrow import decode_batches
from logcore.records.batch import CONTROL_MASK, F_BASE_OFFSET, F_ATTRIBUTES, F_PRODUCER_ID, batch_fields
from logcore.wire import error_codes as E
from logcore.wire.client import KafkaConnectionError, KafkaError, error_name
from logcore.wire.list_offsets import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from pyspark_seglog.broker_client import RETRIABLE, RETRY_BACKOFF_S, BrokerClient, ClientPool
from pyspark_seglog.data_loss import data_loss
from pyspark_seglog.kafka_rows import COLUMN_BUFFERS, ConstantColumns
from pyspark_seglog.kafka_security import PLAINTEXT
from pyspark_seglog.schema import arrow_schema

logger = logging.getLogger("pyspark_seglog.source")

INT64_MAX = (1 << 63) - 1
FETCH_MAX_WAIT_MS = 500          # the Kafka consumer's fetch.max.wait.ms
# Empty answers from a preferred replica (its HW behind the planned end) before the task goes
# back to the leader.
PREFERRED_PATIENCE = 3


_CLIENTS = ClientPool("seglog-spark-source")


def aborted_ranges(data, aborted) -> list[tuple[int, int, int]] | None:
    """(producer id, first offset, last offset) of each aborted transaction a Fetch response
    names: it ends at that producer's next control batch (its abort marker) in `data`, or runs
    past the fetched bytes when the marker is not among them (the next Fetch names it again)."""
    if not aborted:
        return None
    fields = batch_fields(data, verify_crc=False, allow_partial_tail=True)
    controls = fields[(fields[:, F_ATTRIBUTES] & CONTROL_MASK) != 0]
    out = []
    for a in aborted:
        pid, first = int(a.producer_id), int(a.first_offset)
        ends = controls[(controls[:, F_PRODUCER_ID] == pid) & (controls[:, F_BASE_OFFSET] >= first)]
        out.append((pid, first, int(ends[:, F_BASE_OFFSET].min()) if len(ends) else INT64_MAX))
    return out


class BrokerRangeReader:
    """Offsets [p.start, p.until) of one partition, fetched through the brokers. `served`
    counts the records each broker returned (which replica served the read)."""

    def __init__(self, p):
        self.p = p
        self.tp = (p.topic, p.partition)
        self.served: dict[int, int] = {}
        self.preferred: int | None = None
        self._empty_from_preferred = 0

    def batches(self):
        p = self.p
        security = p.security or PLAINTEXT
        client = _CLIENTS.take(p.bootstrap_servers, retry_timeout=p.retry_timeout, security=security.client())
        ok = False
        try:
            yield from self._read(client)
            ok = True
        finally:
            if ok:
                _CLIENTS.give_back(client)
            else:
                client.close()

    def _read(self, client: BrokerClient):
        p, tp = self.p, self.tp
        schema = arrow_schema(p.include_headers)
        constants = ConstantColumns(p.topic, p.partition)
        offset = p.start
        stalled_since, failures, last_why = time.monotonic(), 0, ""
        while offset < p.until:
            if time.monotonic() - stalled_since > p.retry_timeout:
                raise KafkaError(f"{tp[0]}-{tp[1]}: no progress at offset {offset} (planned end {p.until})"
                                 f" for {p.retry_timeout:.0f} s through kafka.bootstrap.servers="
                                 f"{p.bootstrap_servers}: {last_why}")
            try:
                leader, epoch = client.leader_of(tp)
                node = self.preferred if self.preferred is not None else leader
                part = client.fetch(node, tp, offset, leader_epoch=epoch if node == leader else -1,
                                    max_bytes=p.fetch_bytes, isolation=p.isolation, rack=p.client_rack,
                                    max_wait_ms=FETCH_MAX_WAIT_MS)
            except KafkaError as exc:
                if not isinstance(exc, KafkaConnectionError) and exc.code not in RETRIABLE:
                    raise
                last_why = str(exc)
                failures = self._back_off(client, failures)
                continue
            code = int(part.error_code)
            if code == E.OFFSET_OUT_OF_RANGE and self.preferred is None:
                offset = self._out_of_range(client, offset)
                if offset is None:
                    return
                continue
            if code != E.NONE:
                if code not in RETRIABLE and code != E.OFFSET_OUT_OF_RANGE and code != E.OFFSET_NOT_AVAILABLE:
                    raise KafkaError(f"{client.node_where(node)}: Fetch of {tp[0]}-{tp[1]} at offset {offset}"
                                     f" failed: {error_name(code)}", code)
                last_why = f"{client.node_where(node)} answered {error_name(code)}"
                failures = self._back_off(client, failures)
                continue
            chosen = int(getattr(part, "preferred_read_replica", -1))
            if chosen >= 0 and chosen != node:
                logger.info("%s-%d: broker %d names broker %d as the preferred read replica for rack %r",
                            tp[0], tp[1], node, chosen, p.client_rack)
                self.preferred, self._empty_from_preferred = chosen, 0
                continue
            data = part.records
            if not data:
                bound = int(part.last_stable_offset if p.isolation == "read_committed" else part.high_watermark)
                if bound >= p.until:
                    return      # no whole batch left below the bound (compacted away)
                last_why = (f"{client.node_where(node)} holds committed offsets up to {bound}, below"
                            f" the planned end {p.until}")
                if self.preferred is not None:
                    self._empty_from_preferred += 1
                    if self._empty_from_preferred >= PREFERRED_PATIENCE:
                        self.preferred = None      # a lagging follower: back to the leader
                continue        # the fetch waited at the broker (fetch.max.wait.ms) already
            aborted = aborted_ranges(data, part.aborted_transactions)
            where = f"Fetch response of {tp[0]}-{tp[1]} from broker {node}"
            try:
                decoded = decode_batches(data, min_offset=offset, max_offset=p.until,
                                         include_headers=p.include_headers, aborted=aborted,
                                         allocate=COLUMN_BUFFERS, source=where)
            except CorruptRecordError as exc:
                raise CorruptRecordError(f"{exc.reason}; the broker sent a damaged batch (fetched at offset"
                                         f" {offset})", file=exc.file, position=exc.position) from exc
            del data, part
            if decoded.next_offset <= offset:
                raise KafkaError(f"{where}: no whole batch at or after offset {offset}"
                                 f" (a batch larger than kafka.max.partition.fetch.bytes={p.fetch_bytes}?)")
            batch = decoded.batch
            if batch.num_rows:
                self.served[node] = self.served.get(node, 0) + batch.num_rows
                yield constants.rows(batch, schema, p.include_headers)
            offset = decoded.next_offset
            stalled_since, failures = time.monotonic(), 0

    def _back_off(self, client: BrokerClient, failures: int) -> int:
        """A failed fetch: leaders are asked again and a preferred replica is dropped."""
        self.preferred = None
        client.invalidate([self.tp[0]])
        failures += 1
        time.sleep(RETRY_BACKOFF_S[min(failures, len(RETRY_BACKOFF_S)) - 1])
        return failures

    def _out_of_range(self, client: BrokerClient, offset: int) -> int | None:
        """OFFSET_OUT_OF_RANGE from the leader: the offset is below the log start (retention:
        failOnDataLoss decides) or above the log end (truncated below the planned end)."""
        p, tp = self.p, self.tp
        earliest = client.list_offsets([tp], timestamp=EARLIEST_TIMESTAMP, isolation=p.isolation)[tp]
        if offset < earliest:
            return data_loss(tp[0], tp[1], offset, earliest, p.fail_on_data_loss, " while the task was reading it")
        latest = client.list_offsets([tp], timestamp=LATEST_TIMESTAMP, isolation=p.isolation)[tp]
        if offset < latest:
            return offset       # back in range (a leader change meanwhile): fetch again
        message = (f"{tp[0]}-{tp[1]}: the log now ends at offset {latest}, below the planned end {p.until}"
                   f" (was it truncated or deleted?)")
        if p.fail_on_data_loss:
            raise OffsetOutOfRangeError(f"data loss: {message}. Set the option failOnDataLoss=false to skip it",
                                        topic=tp[0], partition=tp[1], offset=offset, log_end_offset=latest)
        logger.warning("failOnDataLoss=false: %s; stopping this range at %d", message, offset)
        return None


def read_through_brokers(p):
    """Yield Arrow record batches of the Kafka schema for offsets [p.start, p.until), fetched."""
    return BrokerRangeReader(p).batches()
