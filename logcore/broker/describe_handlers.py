"""The describe APIs of the broker: DescribeCluster, DescribeLogDirs and DescribeProducers,
what `kafka-cluster cluster-id`, `kafka-log-dirs --describe` and `kafka-transactions
describe-producers` / `find-hanging` send.

Held by the `Broker` (broker.py), built with the broker's settings and address, its log root and
partitions, and the membership (read at each request: a cluster member answers with the
cluster's brokers and controller from its replica manager).
"""
from __future__ import annotations

import asyncio
import os

from logcore.errors import SegLogError
from logcore.wire import error_codes as E
from logcore.wire.protocol import Request

INT32_MIN = -(2 ** 31)
# DescribeCluster's endpoint types (KIP-919): a broker answers for brokers only.
ENDPOINT_BROKERS = 1
UNSUPPORTED_ENDPOINT_TYPE = 119
# Kafka's AclOperation codes of what can be done on the cluster resource: with no authorizer
# every one of them is allowed, as Kafka answers without one.
CLUSTER_OPERATIONS = (5, 7, 8, 9, 10, 11, 12)  # CREATE ALTER DESCRIBE CLUSTER_ACTION DESCRIBE_CONFIGS ALTER_CONFIGS IDEMPOTENT_WRITE
TOPIC_OPERATIONS = (3, 4, 5, 6, 7, 8, 10, 11)   # READ WRITE CREATE DELETE ALTER DESCRIBE DESCRIBE_CONFIGS ALTER_CONFIGS
NO_TRANSACTION = -1


def authorized_operations(requested: bool, operations: tuple[int, ...] = CLUSTER_OPERATIONS) -> int:
    """The bit field of allowed `operations` (the cluster's by default), or INT32_MIN when not
    asked for."""
    if not requested:
        return INT32_MIN
    bits = 0
    for op in operations:
        bits |= 1 << op
    return bits


def with_authorized_operations(body, answer: dict) -> dict:
    """A Metadata `answer` with the operations its request asked for (include_topic_ and, v8-10,
    include_cluster_authorized_operations): librdkafka's DescribeTopics and DescribeCluster ask
    Metadata for them."""
    if getattr(body, "include_cluster_authorized_operations", False):
        answer["cluster_authorized_operations"] = authorized_operations(True)
    if getattr(body, "include_topic_authorized_operations", False):
        for t in answer["topics"]:
            if t["error_code"] == 0:
                t["topic_authorized_operations"] = authorized_operations(True, TOPIC_OPERATIONS)
    return answer


def failed_topic(error_code: int, name: str | None) -> dict:
    """A Metadata answer's entry for a topic it cannot describe (an unknown name or id, a failed
    auto-creation)."""
    return {"error_code": error_code, "name": name, "partitions": [],
            "topic_authorized_operations": INT32_MIN}


def auto_create_asked(body, config) -> bool:
    """Whether a Metadata request creates the missing topics it names: the broker allows it
    (auto.create.topics.enable) and the request does not refuse it (v4+)."""
    return (getattr(body, "allow_auto_topic_creation", True) and config["auto.create.topics.enable"]
            and body.topics is not None)


class DescribeHandlers:
    """Over the broker's `config`, `advertised` (host, port), log `root`, open `partitions` and
    `membership`."""

    def __init__(self, config, advertised: tuple[str, int], root, partitions, membership):
        self.config = config
        self.node_id = config.node_id
        self.host, self.port = advertised
        self.root = root
        self.partitions = partitions
        self.membership = membership

    def handlers(self) -> dict:
        return {35: self.describe_log_dirs, 60: self.describe_cluster, 61: self.describe_producers}

    # ------------------------------------------------------------------ DescribeCluster
    async def describe_cluster(self, req: Request) -> dict:
        body = req.body
        endpoint = getattr(body, "endpoint_type", ENDPOINT_BROKERS)
        out = {"throttle_time": 0, "error_code": E.NONE, "error_message": None, "endpoint_type": endpoint,
               "cluster_id": self.membership.cluster_id,
               "cluster_authorized_operations": authorized_operations(body.include_cluster_authorized_operations)}
        if endpoint != ENDPOINT_BROKERS:
            out.update(error_code=UNSUPPORTED_ENDPOINT_TYPE, controller_id=-1, brokers=[],
                       error_message=f"endpoint type {endpoint} is not served: a broker describes brokers (1)")
            return out
        rm = self.membership.replica_manager
        if rm is None:
            out.update(controller_id=self.node_id,
                       brokers=[{"broker_id": self.node_id, "host": self.host, "port": self.port, "rack": None}])
        else:
            out.update(controller_id=rm.controller_id,
                       brokers=[{"broker_id": b, "host": reg.host, "port": reg.port, "rack": reg.rack}
                                for b, reg in sorted(rm.brokers.items())])
        return out

    # ------------------------------------------------------------------ DescribeLogDirs
    async def describe_log_dirs(self, req: Request) -> dict:
        return {"throttle_time": 0, "error_code": E.NONE,
                "results": [await asyncio.to_thread(self._log_dir, req.body.topics)]}

    def _log_dir(self, wanted) -> dict:
        """The one log dir of this broker, with the partitions of `wanted` (None: all) it holds."""
        held = sorted(self.partitions.partitions)
        if wanted is not None:
            asked = {(t.topic, int(p)) for t in wanted for p in t.partitions}
            held = [tp for tp in held if tp in asked]
        storage = self.root.storage
        result = {"error_code": E.NONE, "log_dir": self._dir_name(), "topics": [],
                  "total_bytes": -1, "usable_bytes": -1}
        if self.partitions.log_dir_failure is not None and self.partitions.log_dir_failure.all_failed:
            result["error_code"] = E.KAFKA_STORAGE_ERROR      # offline (KIP-112): nothing to describe
            return result
        if storage.is_local:
            try:
                st = os.statvfs(storage.local_path(""))
                result["total_bytes"] = st.f_blocks * st.f_frsize
                result["usable_bytes"] = st.f_bavail * st.f_frsize
            except OSError:
                result["error_code"] = E.KAFKA_STORAGE_ERROR
                return result
        by_topic: dict[str, list] = {}
        for topic, index in held:
            part = self.partitions.get(topic, index)
            if part is None:
                continue
            try:
                log = part.log
                size = sum(seg.size() for seg in log.segments)
                lag = max(log.high_watermark - log.log_end_offset, 0)
            except (SegLogError, OSError):
                continue          # gone or unreadable since the listing: not reported, as Kafka skips it
            by_topic.setdefault(topic, []).append(
                {"partition_index": index, "partition_size": size, "offset_lag": lag, "is_future_key": False})
        result["topics"] = [{"name": t, "partitions": ps} for t, ps in by_topic.items()]
        return result

    def _dir_name(self) -> str:
        storage = self.root.storage
        if storage.is_local:
            return os.path.abspath(storage.local_path(""))
        return storage.url

    # ------------------------------------------------------------------ DescribeProducers
    async def describe_producers(self, req: Request) -> dict:
        return {"throttle_time": 0, "topics": await asyncio.to_thread(self._producers, req.body.topics)}

    def _producers(self, topics) -> list[dict]:
        out = []
        for t in topics:
            parts = []
            for p in t.partition_indexes:
                parts.append(self._partition_producers(t.name, int(p)))
            out.append({"name": t.name, "partitions": parts})
        return out

    def _partition_producers(self, topic: str, index: int) -> dict:
        res = {"partition_index": index, "error_code": E.NONE, "error_message": None, "active_producers": []}
        part = self.partitions.get(topic, index)
        code = self.partitions.replication.partition_error(topic, index)
        if code == E.NONE and part is None:
            code = E.UNKNOWN_TOPIC_OR_PARTITION
        if code != E.NONE:
            res.update(error_code=code, error_message=(
                f"{topic}-{index}: this broker does not lead it" if code == E.NOT_LEADER_OR_FOLLOWER else
                f"{topic}-{index} is not a partition of this broker" if code == E.UNKNOWN_TOPIC_OR_PARTITION
                else None))
            return res
        try:
            producers = part.log.producer_state.producers
        except SegLogError as exc:
            res.update(error_code=E.error_code(exc), error_message=str(exc))
            return res
        res["active_producers"] = [
            {"producer_id": pid, "producer_epoch": entry.producer_epoch, "last_sequence": entry.last_seq,
             "last_timestamp": entry.last_timestamp, "coordinator_epoch": entry.coordinator_epoch,
             "current_txn_start_offset": (NO_TRANSACTION if entry.current_txn_first_offset is None
                                          else entry.current_txn_first_offset)}
            for pid, entry in sorted(producers.items())]
        return res
