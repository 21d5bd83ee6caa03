"""The answer to a request whose handler failed unexpectedly: Kafka error codes, not a dropped
connection.

A handler that raises (a bug, or a metadata state it did not expect) costs that request only:
every topic and partition it named gets the error code, or the response's top-level error code
when it has one. None for an API this cannot answer (the server then closes that connection,
as before).
"""
from __future__ import annotations

import dataclasses
from typing import Any

from logcore.wire.api_keys import (ADD_PARTITIONS_TO_TXN, ALTER_CLIENT_QUOTAS, ALTER_CONFIGS, ALTER_USER_SCRAM_CREDENTIALS, CONSUMER_GROUP_DESCRIBE, CREATE_ACLS,
                                   CREATE_PARTITIONS, CREATE_TOPICS, DELETE_ACLS, DELETE_GROUPS, DELETE_RECORDS,
                                   DELETE_TOPICS, DESCRIBE_ACLS, DESCRIBE_CLIENT_QUOTAS, DESCRIBE_CONFIGS, DESCRIBE_USER_SCRAM_CREDENTIALS, DESCRIBE_GROUPS, DESCRIBE_LOG_DIRS,
                                   DESCRIBE_PRODUCERS, DESCRIBE_TRANSACTIONS, FETCH, FIND_COORDINATOR, INCREMENTAL_ALTER_CONFIGS,
                                   LIST_OFFSETS, METADATA, OFFSET_COMMIT, OFFSET_DELETE, OFFSET_FETCH,
                                   OFFSET_FOR_LEADER_EPOCH, PRODUCE, TXN_OFFSET_COMMIT, WRITE_TXN_MARKERS)
from logcore.wire.protocol import Request, response_type


def _fields(api_key: int, api_version: int) -> set[str]:
    return {f.name for f in dataclasses.fields(response_type(api_key, api_version))}


def error_response(req: Request, code: int, message: str, brokers: list[dict]) -> dict | None:
    """The response (a dict of Kafka field names, see protocol.build) answering `req` with
    `code` everywhere, or None when the request's API has no way to carry an error."""
    b: Any = req.body
    k = req.api_key
    out: dict[str, Any] = {"throttle_time": 0}
    if "error_code" in _fields(k, req.api_version):
        out["error_code"] = code
    if k == PRODUCE:
        out["responses"] = [{"name": t.name, "partition_responses": [
            {"index": p.index, "error_code": code, "base_offset": -1, "log_append_time": -1,
             "log_start_offset": -1, "record_errors": [], "error_message": message}
            for p in t.partition_data]} for t in b.topic_data]
    elif k == FETCH:
        out["session_id"] = 0
        out["responses"] = [{"topic": getattr(t, "topic", None), "topic_id": getattr(t, "topic_id", None),
                             "partitions": [{"partition_index": p.partition, "error_code": code,
                                             "high_watermark": -1, "last_stable_offset": -1,
                                             "log_start_offset": -1, "preferred_read_replica": -1,
                                             "aborted_transactions": None, "records": b""}
                                            for p in t.partitions]} for t in b.topics]
    elif k == LIST_OFFSETS:
        out["topics"] = [{"name": t.name, "partitions": [
            {"partition_index": p.partition_index, "error_code": code, "timestamp": -1, "offset": -1,
             "leader_epoch": -1, "old_style_offsets": []} for p in t.partitions]} for t in b.topics]
    elif k == METADATA:
        out.update(brokers=brokers, cluster_id=None, controller_id=-1,
                   topics=[{"error_code": code, "name": t.name, "partitions": []}
                           for t in (b.topics or ())],
                   cluster_authorized_operations=-(2 ** 31))
    elif k == OFFSET_COMMIT:
        out["topics"] = [{"name": t.name, "partitions": [
            {"partition_index": p.partition_index, "error_code": code} for p in t.partitions]}
            for t in b.topics]
    elif k == OFFSET_FETCH and req.api_version >= 8:
        out["groups"] = [{"group_id": g.group_id, "error_code": code, "topics": []} for g in b.groups]
    elif k == CREATE_TOPICS:
        out["topics"] = [{"name": t.name, "error_code": code, "error_message": message,
                          "num_partitions": -1, "replication_factor": -1, "configs": []} for t in b.topics]
    elif k == DELETE_TOPICS:
        if req.api_version >= 6:
            out["responses"] = [{"name": t.name, "topic_id": t.topic_id, "error_code": code,
                                 "error_message": message} for t in b.topics]
        else:
            out["responses"] = [{"name": n, "error_code": code} for n in b.topic_names]
    elif k == OFFSET_FOR_LEADER_EPOCH:
        out["topics"] = [{"topic": t.topic, "partitions": [
            {"partition": p.partition, "error_code": code, "leader_epoch": -1, "end_offset": -1}
            for p in t.partitions]} for t in b.topics]
    elif k == DESCRIBE_CONFIGS:
        out["results"] = [{"error_code": code, "error_message": message, "resource_type": r.resource_type,
                           "resource_name": r.resource_name, "configs": []} for r in b.resources]
    elif k == FIND_COORDINATOR and req.api_version >= 4:
        out["coordinators"] = [{"key": key, "node_id": -1, "host": "", "port": -1, "error_code": code,
                                "error_message": message} for key in b.coordinator_keys]
    elif k == ADD_PARTITIONS_TO_TXN and req.api_version <= 3:
        out["results_by_topic_v3_and_below"] = [{"name": t.name, "results_by_partition": [
            {"partition_index": p, "partition_error_code": code} for p in t.partitions]}
            for t in b.v3_and_below_topics]
    elif k == TXN_OFFSET_COMMIT:
        out["topics"] = [{"name": t.name, "partitions": [
            {"partition_index": p.partition_index, "error_code": code} for p in t.partitions]} for t in b.topics]
    elif k == WRITE_TXN_MARKERS:
        out["markers"] = [{"producer_id": m.producer_id, "topics": [
            {"name": t.name, "partitions": [{"partition_index": p, "error_code": code} for p in t.partition_indexes]}
            for t in m.topics]} for m in b.markers]
    elif k == DESCRIBE_TRANSACTIONS:
        out["transaction_states"] = [{"error_code": code, "transactional_id": tid, "transaction_state": "",
                                      "transaction_timeout": 0, "transaction_start_time": -1, "producer_id": -1,
                                      "producer_epoch": -1, "topics": []} for tid in b.transactional_ids]
    elif k == DELETE_RECORDS:
        out["topics"] = [{"name": t.name, "partitions": [
            {"partition_index": p.partition_index, "low_watermark": -1, "error_code": code}
            for p in t.partitions]} for t in b.topics]
    elif k == DESCRIBE_PRODUCERS:
        out["topics"] = [{"name": t.name, "partitions": [
            {"partition_index": p, "error_code": code, "error_message": message, "active_producers": []}
            for p in t.partition_indexes]} for t in b.topics]
    elif k == CREATE_PARTITIONS:
        out["results"] = [{"name": t.name, "error_code": code, "error_message": message} for t in b.topics]
    elif k == DELETE_GROUPS:
        out["results"] = [{"group_id": g, "error_code": code} for g in b.groups_names]
    elif k == DESCRIBE_GROUPS:
        out["groups"] = [{"error_code": code, "error_message": message, "group_id": g, "group_state": "",
                          "protocol_type": "", "protocol_data": "", "members": [],
                          "authorized_operations": -(2 ** 31)} for g in b.groups]
    elif k in (ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS):
        out["responses"] = [{"error_code": code, "error_message": message, "resource_type": r.resource_type,
                             "resource_name": r.resource_name} for r in b.resources]
    elif k == CONSUMER_GROUP_DESCRIBE:
        out["groups"] = [{"error_code": code, "error_message": message, "group_id": g, "group_state": "",
                          "group_epoch": -1, "assignment_epoch": -1, "assignor_name": "", "members": [],
                          "authorized_operations": -(2 ** 31)} for g in b.group_ids]
    elif k == DESCRIBE_LOG_DIRS:
        out["results"] = []
        if "error_code" in out:
            out["results"] = [{"error_code": code, "log_dir": "", "topics": [], "total_bytes": -1,
                               "usable_bytes": -1}]
    elif k == DESCRIBE_USER_SCRAM_CREDENTIALS:
        out.update(error_message=message, results=[])
    elif k == ALTER_USER_SCRAM_CREDENTIALS:
        users = dict.fromkeys([u.name for u in b.deletions] + [u.name for u in b.upsertions])
        out["results"] = [{"user": u, "error_code": code, "error_message": message} for u in users]
    elif k == DESCRIBE_CLIENT_QUOTAS:
        out.update(error_message=message, entries=None)
    elif k == ALTER_CLIENT_QUOTAS:
        out["entries"] = [{"error_code": code, "error_message": message,
                           "entity": [{"entity_type": c.entity_type, "entity_name": c.entity_name}
                                      for c in e.entity]} for e in b.entries]
    elif k == OFFSET_DELETE:
        out["error_code"], out["topics"] = code, []
    elif k == CREATE_ACLS:
        out["results"] = [{"error_code": code, "error_message": message} for _ in b.creations]
    elif k == DELETE_ACLS:
        out["filter_results"] = [{"error_code": code, "error_message": message, "matching_acls": []}
                                 for _ in b.filters]
    elif k == DESCRIBE_ACLS:
        out["resources"] = []
    elif "error_code" not in out:
        return None
    if "error_message" in _fields(k, req.api_version):
        out["error_message"] = message
    return out
