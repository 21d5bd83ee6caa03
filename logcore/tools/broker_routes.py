"""Where a request of the operator commands goes in a cluster, as Kafka's admin client routes
it: partition requests (ListOffsets, DeleteRecords) to each partition's leader, group
requests to the group's coordinator (FindCoordinator), ListGroups to every broker. One
connection per broker, opened at first use, all closed together.

Used by `seglog consumer-groups` and `seglog delete-records`.
"""
from __future__ import annotations

import time

from logcore.wire.api_keys import (DELETE_GROUPS, DELETE_RECORDS, DESCRIBE_GROUPS, FIND_COORDINATOR,
                                   LIST_GROUPS, LIST_OFFSETS, METADATA, OFFSET_COMMIT, OFFSET_DELETE, OFFSET_FETCH)
from logcore.wire.client import KafkaConnection, KafkaError, bootstrap, error_name
from logcore.wire.error_codes import (COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, LEADER_NOT_AVAILABLE,
                                     NONE, NOT_COORDINATOR, UNKNOWN_TOPIC_OR_PARTITION)

# The versions sent (Kafka 4 brokers no longer serve the oldest ones; these are all non-batched forms).
WINDOWS = {METADATA: (1, 12), LIST_OFFSETS: (1, 7), FIND_COORDINATOR: (1, 3), DESCRIBE_GROUPS: (0, 5),
           LIST_GROUPS: (0, 4), OFFSET_FETCH: (1, 7), OFFSET_COMMIT: (2, 8), DELETE_GROUPS: (0, 2),
           OFFSET_DELETE: (0, 0), DELETE_RECORDS: (0, 2)}
COORDINATOR_RETRIES = 20
RETRY_BACKOFF_S = 0.2
EARLIEST, LATEST = -2, -1


def failure(code: int, what: str) -> KafkaError:
    return KafkaError(f"{what}: {error_name(code)}", int(code))


class BrokerRoutes:
    def __init__(self, servers: str, *, client_id: str, timeout_ms: int = 30_000):
        self.timeout_ms = timeout_ms
        self.first: KafkaConnection = bootstrap(servers, timeout_s=timeout_ms / 1000 + 5, client_id=client_id,
                                                windows=WINDOWS, option="--bootstrap-server")
        self._nodes: dict[int, KafkaConnection] = {}
        self._metadata = None

    def close(self) -> None:
        for conn in [*self._nodes.values(), self.first]:
            conn.close()

    def __enter__(self) -> "BrokerRoutes":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def node(self, node_id: int) -> KafkaConnection:
        conn = self._nodes.get(node_id)
        if conn is None:
            conn = self._nodes[node_id] = self.first.connection_to(node_id)
        return conn

    # ------------------------------------------------------------------ metadata
    def metadata(self, topics: list[str] | None):
        """Metadata of `topics` (None: all)."""
        return self.first.request(METADATA, {"topics": None if topics is None else [{"name": t} for t in topics],
                                             "allow_auto_topic_creation": False})

    def partitions(self, topics: list[str] | None) -> dict[str, dict[int, int]]:
        """topic -> partition -> leader id, for the topics that exist (None: every topic)."""
        body = self.metadata(topics)
        out = {}
        for t in body.topics:
            if t.error_code == NONE:
                out[t.name] = {p.partition_index: p.leader_id for p in t.partitions}
        return out

    def broker_ids(self) -> list[int]:
        return sorted(int(b.node_id) for b in self.metadata([]).brokers)

    # ------------------------------------------------------------------ partitions, at their leaders
    def list_offsets(self, tps: list[tuple[str, int]], timestamp: int) -> dict[tuple[str, int], int]:
        """The offset for `timestamp` (EARLIEST, LATEST or a time in ms) of each partition; a
        time after the last record gives the log end, as Kafka's tool takes it (-1 there)."""
        leaders = self.partitions(sorted({t for t, _ in tps}))
        by_leader: dict[int, list[tuple[str, int]]] = {}
        for t, p in tps:
            leader = leaders.get(t, {}).get(p, -1)
            if leader < 0:
                raise KafkaError(f"partition {t}-{p} has no leader (or does not exist)")
            by_leader.setdefault(leader, []).append((t, p))
        out = {}
        for leader, mine in by_leader.items():
            topics: dict[str, list] = {}
            for t, p in mine:
                topics.setdefault(t, []).append({"partition_index": p, "timestamp": timestamp,
                                                 "current_leader_epoch": -1})
            body = self.node(leader).request(LIST_OFFSETS, {
                "replica_id": -1, "isolation_level": 0,
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]})
            for t in body.topics:
                for p in t.partitions:
                    if p.error_code != NONE:
                        raise failure(p.error_code, f"ListOffsets of {t.name}-{p.partition_index}")
                    out[(t.name, p.partition_index)] = int(p.offset)
        return out

    def delete_records(self, offsets: dict[tuple[str, int], int]) -> dict[tuple[str, int], tuple[int, int]]:
        """DeleteRecords at each partition's leader: (error code, low watermark) per partition."""
        leaders = self.partitions(sorted({t for t, _ in offsets}))
        out: dict[tuple[str, int], tuple[int, int]] = {}
        by_leader: dict[int, dict[str, list]] = {}
        for (t, p), offset in offsets.items():
            leader = leaders.get(t, {}).get(p)
            if leader is None:
                out[(t, p)] = (UNKNOWN_TOPIC_OR_PARTITION, -1)
                continue
            by_leader.setdefault(leader, {}).setdefault(t, []).append({"partition_index": p, "offset": offset})
        for leader, topics in by_leader.items():
            if leader < 0:
                for t, ps in topics.items():
                    for p in ps:
                        out[(t, p["partition_index"])] = (LEADER_NOT_AVAILABLE, -1)
                continue
            body = self.node(leader).request(DELETE_RECORDS, {
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()], "timeout": self.timeout_ms})
            for t in body.topics:
                for p in t.partitions:
                    out[(t.name, p.partition_index)] = (int(p.error_code), int(p.low_watermark))
        return out

    # ------------------------------------------------------------------ groups, at their coordinator
    def coordinator(self, group_id: str) -> tuple[int, KafkaConnection]:
        """(node id, connection) of the group's coordinator."""
        code = NONE
        for _ in range(COORDINATOR_RETRIES):
            body = self.first.request(FIND_COORDINATOR, {"key": group_id, "key_type": 0})
            code = int(body.error_code)
            if code == NONE:
                return int(body.node_id), self.node(int(body.node_id))
            if code != COORDINATOR_NOT_AVAILABLE:
                break
            time.sleep(RETRY_BACKOFF_S)
        raise failure(code, f"FindCoordinator of group {group_id!r}")

    def group_request(self, group_id: str, api_key: int, body: dict, code_of) -> object:
        """A request to the group's coordinator, once more (after a new FindCoordinator) while
        `code_of(response)` says the coordinator moved or is loading."""
        response = None
        for _ in range(COORDINATOR_RETRIES):
            _, conn = self.coordinator(group_id)
            response = conn.request(api_key, body)
            if code_of(response) not in (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE):
                return response
            time.sleep(RETRY_BACKOFF_S)
        return response

    def list_groups(self) -> list[tuple[str, str, str]]:
        """(group id, protocol type, state) of every group of every broker."""
        out = []
        for node in self.broker_ids():
            body = self.node(node).request(LIST_GROUPS, {"states_filter": []})
            if body.error_code != NONE:
                raise failure(body.error_code, f"ListGroups at broker {node}")
            out += [(g.group_id, g.protocol_type, getattr(g, "group_state", "")) for g in body.groups]
        return sorted(set(out))

    def describe_group(self, group_id: str):
        body = self.group_request(group_id, DESCRIBE_GROUPS, {"groups": [group_id],
                                                              "include_authorized_operations": False},
                                  lambda r: int(r.groups[0].error_code))
        g = body.groups[0]
        if g.error_code != NONE:
            raise failure(g.error_code, f"DescribeGroups of {group_id!r}")
        return g

    def committed(self, group_id: str) -> dict[tuple[str, int], int]:
        """The group's committed offsets (OffsetFetch of all its partitions)."""
        body = self.group_request(group_id, OFFSET_FETCH, {"group_id": group_id, "topics": None,
                                                           "require_stable": False},
                                  lambda r: int(r.error_code))
        if body.error_code != NONE:
            raise failure(body.error_code, f"OffsetFetch of group {group_id!r}")
        return {(t.name, p.partition_index): int(p.committed_offset) for t in body.topics for p in t.partitions
                if p.error_code == NONE and p.committed_offset >= 0}

    def commit(self, group_id: str, offsets: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        """OffsetCommit as a client outside the group (generation -1); the error per partition."""
        topics: dict[str, list] = {}
        for (t, p), o in sorted(offsets.items()):
            topics.setdefault(t, []).append({"partition_index": p, "committed_offset": o,
                                             "committed_leader_epoch": -1, "committed_metadata": ""})
        body = self.group_request(group_id, OFFSET_COMMIT, {
            "group_id": group_id, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "retention_time_ms": -1, "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]},
            lambda r: next((int(p.error_code) for t in r.topics for p in t.partitions), NONE))
        return {(t.name, p.partition_index): int(p.error_code) for t in body.topics for p in t.partitions}

    def delete_groups(self, group_ids: list[str]) -> dict[str, int]:
        out = {}
        for g in group_ids:
            body = self.group_request(g, DELETE_GROUPS, {"groups_names": [g]},
                                      lambda r: int(r.results[0].error_code))
            out[g] = int(body.results[0].error_code)
        return out

    def delete_offsets(self, group_id: str, tps: list[tuple[str, int]]) -> tuple[int, dict[tuple[str, int], int]]:
        topics: dict[str, list] = {}
        for t, p in tps:
            topics.setdefault(t, []).append({"partition_index": p})
        body = self.group_request(group_id, OFFSET_DELETE, {
            "group_id": group_id, "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]},
            lambda r: int(r.error_code))
        return int(body.error_code), {(t.name, p.partition_index): int(p.error_code)
                                      for t in body.topics for p in t.partitions}
