"""Kafka's admin operations over the Kafka protocol (logcore.wire.client), for the CLI's broker
mode (`seglog topics --bootstrap-server`, `seglog leader-election`).

Each operation goes to the bootstrap broker; an answer of NOT_CONTROLLER sends it once more to
the broker Metadata names as the controller (a KRaft broker forwards controller requests
itself). Broker errors raise KafkaError whose message is the Kafka error name and the broker's
message (`TOPIC_ALREADY_EXISTS: Topic 'x' already exists.`), `.code` the error code.
"""
from __future__ import annotations

from dataclasses import dataclass

from logcore.wire.api_keys import (ALTER_PARTITION_REASSIGNMENTS, CREATE_PARTITIONS, CREATE_TOPICS, DELETE_TOPICS,
                                   DESCRIBE_CONFIGS, DESCRIBE_TOPIC_PARTITIONS, ELECT_LEADERS,
                                   LIST_PARTITION_REASSIGNMENTS, METADATA)
from logcore.wire.client import KafkaConnection, KafkaError, bootstrap, error_name
from logcore.wire.config_resources import SOURCE_DEFAULT, TOPIC_RESOURCE
from logcore.wire.error_codes import NONE, NOT_CONTROLLER

ELECTION_TYPES = {"preferred": 0, "unclean": 1}
DEFAULT_TIMEOUT_MS = 30_000
# Versions this module builds: Metadata from v1 (is_internal, controller_id), DescribeConfigs
# from v1 (config_source), ElectLeaders v0..v2 (v1+: election_type).
WINDOWS = {METADATA: (1, 12), DESCRIBE_CONFIGS: (1, 4), ELECT_LEADERS: (0, 2), DELETE_TOPICS: (1, 6),
           CREATE_TOPICS: (2, 7), CREATE_PARTITIONS: (0, 3), DESCRIBE_TOPIC_PARTITIONS: (0, 0),
           ALTER_PARTITION_REASSIGNMENTS: (0, 1), LIST_PARTITION_REASSIGNMENTS: (0, 0)}


@dataclass(frozen=True)
class PartitionInfo:
    partition: int
    leader: int                             # -1: none
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    elr: tuple[int, ...] | None             # None: the broker does not report it (Metadata)
    last_known_elr: tuple[int, ...] | None


@dataclass(frozen=True)
class TopicInfo:
    name: str
    topic_id: object                        # uuid.UUID
    internal: bool
    partitions: tuple[PartitionInfo, ...]


@dataclass(frozen=True)
class Reassignment:
    """An ongoing partition reassignment (ListPartitionReassignments)."""
    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]


@dataclass(frozen=True)
class ConfigEntry:
    name: str
    value: str | None                       # None: sensitive, or no value
    source: int

    @property
    def is_default(self) -> bool:
        return self.source == SOURCE_DEFAULT


def broker_error(code: int, message: str | None, what: str = "") -> KafkaError:
    """KafkaError `NAME: message` for an error code of a response."""
    text = error_name(code) + (f": {message}" if message else "")
    return KafkaError(f"{what}{text}", int(code))


class KafkaAdmin:
    """One admin session over a connection to the first reachable bootstrap server."""

    def __init__(self, servers: str, *, timeout_ms: int = DEFAULT_TIMEOUT_MS, client_id: str = "seglog-admin",
                 option: str = "--bootstrap-server", security=None):
        self.timeout_ms = timeout_ms
        self.conn: KafkaConnection = bootstrap(servers, timeout_s=timeout_ms / 1000 + 5, client_id=client_id,
                                               windows=WINDOWS, option=option, security=security)
        self._controller: KafkaConnection | None = None

    def close(self) -> None:
        for conn in (self._controller, self.conn):
            if conn is not None:
                conn.close()

    def __enter__(self) -> "KafkaAdmin":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def serves(self, api_key: int) -> bool:
        return api_key in self.conn.served

    def _to_controller(self, api_key: int, body: dict, codes) -> object:
        """Send a controller request; once more to the controller when it answers NOT_CONTROLLER
        (`codes(response)` lists the response's error codes)."""
        response = (self._controller or self.conn).request(api_key, body)
        if NOT_CONTROLLER in codes(response) and self._controller is None:
            self._controller = self.conn.controller()
            response = self._controller.request(api_key, body)
        return response

    def broker_ids(self) -> list[int]:
        """The ids of the brokers Metadata lists (the live ones), sorted."""
        body = self.conn.request(METADATA, {"topics": [], "allow_auto_topic_creation": False})
        return sorted(int(b.node_id) for b in body.brokers)

    # ------------------------------------------------------------------ topics
    def list_topics(self) -> list[tuple[str, bool]]:
        """(name, internal) of every topic, sorted by name."""
        body = self.conn.request(METADATA, {"topics": None, "allow_auto_topic_creation": False})
        out = []
        for t in body.topics:
            if t.error_code != NONE:
                raise broker_error(t.error_code, None, f"Metadata of topic {t.name!r}: ")
            out.append((t.name, bool(t.is_internal)))
        return sorted(out)

    def describe_topics(self, names: list[str]) -> list[TopicInfo]:
        """The partitions of each topic (DescribeTopicPartitions when the broker serves it, as
        Kafka's admin client does; else Metadata)."""
        if not names:
            return []
        if self.serves(DESCRIBE_TOPIC_PARTITIONS):
            return self._describe_topic_partitions(names)
        body = self.conn.request(METADATA, {"topics": [{"name": n} for n in names],
                                            "allow_auto_topic_creation": False})
        out = []
        for t in body.topics:
            if t.error_code != NONE:
                raise broker_error(t.error_code, None, f"topic {t.name!r}: ")
            parts = tuple(sorted((PartitionInfo(p.partition_index, p.leader_id, tuple(p.replica_nodes),
                                                tuple(p.isr_nodes), None, None) for p in t.partitions),
                                 key=lambda p: p.partition))
            out.append(TopicInfo(t.name, getattr(t, "topic_id", None), bool(t.is_internal), parts))
        return out

    def _describe_topic_partitions(self, names: list[str]) -> list[TopicInfo]:
        found: dict[str, tuple[object, bool, list]] = {}
        cursor = None
        while True:
            body = self.conn.request(DESCRIBE_TOPIC_PARTITIONS, {
                "topics": [{"name": n} for n in names], "response_partition_limit": 2000, "cursor": cursor})
            for t in body.topics:
                if t.error_code != NONE:
                    raise broker_error(t.error_code, None, f"topic {t.name!r}: ")
                entry = found.setdefault(t.name, (t.topic_id, bool(t.is_internal), []))
                entry[2].extend(PartitionInfo(p.partition_index, p.leader_id, tuple(p.replica_nodes),
                                              tuple(p.isr_nodes),
                                              None if p.eligible_leader_replicas is None else tuple(p.eligible_leader_replicas),
                                              None if p.last_known_elr is None else tuple(p.last_known_elr))
                                for p in t.partitions)
            if body.next_cursor is None:
                break
            cursor = {"topic_name": body.next_cursor.topic_name, "partition_index": body.next_cursor.partition_index}
        return [TopicInfo(name, topic_id, internal, tuple(sorted(parts, key=lambda p: p.partition)))
                for name, (topic_id, internal, parts) in found.items()]

    def describe_configs(self, names: list[str]) -> dict[str, list[ConfigEntry]]:
        """Every config of each topic, in the order the broker lists them."""
        if not names:
            return {}
        body = self.conn.request(DESCRIBE_CONFIGS, {
            "resources": [{"resource_type": TOPIC_RESOURCE, "resource_name": n, "configuration_keys": None}
                          for n in names],
            "include_synonyms": False, "include_documentation": False})
        out = {}
        for r in body.results:
            if r.error_code != NONE:
                raise broker_error(r.error_code, r.error_message, f"DescribeConfigs of topic {r.resource_name!r}: ")
            out[r.resource_name] = [ConfigEntry(c.name, None if c.is_sensitive else c.value, int(c.config_source))
                                    for c in r.configs]
        return out

    def create_topic(self, name: str, partitions: int, replication_factor: int,
                     assignment: list[list[int]] | None, configs: dict[str, str]) -> None:
        """CreateTopics for one topic (-1: the broker's default count or factor)."""
        body = {"topics": [{"name": name, "num_partitions": -1 if assignment else partitions,
                            "replication_factor": -1 if assignment else replication_factor,
                            "assignments": [{"partition_index": i, "broker_ids": ids}
                                            for i, ids in enumerate(assignment or [])],
                            "configs": [{"name": k, "value": v} for k, v in configs.items()]}],
                "timeout": self.timeout_ms, "validate_only": False}
        response = self._to_controller(CREATE_TOPICS, body, lambda r: [t.error_code for t in r.topics])
        for t in response.topics:
            if t.error_code != NONE:
                raise broker_error(t.error_code, getattr(t, "error_message", None))

    def delete_topics(self, names: list[str]) -> None:
        body = {"topic_names": names, "topics": [{"name": n} for n in names], "timeout": self.timeout_ms}
        response = self._to_controller(DELETE_TOPICS, body, lambda r: [t.error_code for t in r.responses])
        for t in response.responses:
            if t.error_code != NONE:
                raise broker_error(t.error_code, getattr(t, "error_message", None), f"topic {t.name!r}: ")

    def create_partitions(self, name: str, count: int, assignment: list[list[int]] | None) -> None:
        """CreatePartitions: grow `name` to `count` partitions (new ones on `assignment` if given)."""
        body = {"topics": [{"name": name, "count": count,
                            "assignments": None if not assignment else [{"broker_ids": ids} for ids in assignment]}],
                "timeout": self.timeout_ms, "validate_only": False}
        response = self._to_controller(CREATE_PARTITIONS, body, lambda r: [t.error_code for t in r.results])
        for t in response.results:
            if t.error_code != NONE:
                raise broker_error(t.error_code, t.error_message)

    # ------------------------------------------------------------------ leaders
    def elect_leaders(self, election_type: str, partitions: list[tuple[str, int]] | None
                      ) -> dict[tuple[str, int], tuple[int, str | None]]:
        """ElectLeaders (None: every partition); (error code, message) per partition."""
        kind = ELECTION_TYPES[election_type]
        version = self.conn.version_for(ELECT_LEADERS)
        if version == 0 and kind != 0:
            raise KafkaError(f"{self.conn.where()} serves ElectLeaders v0 only, which elects preferred"
                             f" leaders: an {election_type} election needs v1 or later")
        by_topic: dict[str, list[int]] = {}
        for t, p in partitions or ():
            by_topic.setdefault(t, []).append(p)
        body = {"election_type": kind, "timeout": self.timeout_ms,
                "topic_partitions": None if partitions is None else
                [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]}
        response = self._to_controller(
            ELECT_LEADERS, body,
            lambda r: [getattr(r, "error_code", NONE)] + [p.error_code for t in r.replica_election_results
                                                          for p in t.partition_result])
        top = int(getattr(response, "error_code", NONE))
        if top != NONE:
            raise broker_error(top, None, "ElectLeaders: ")
        return {(t.topic, p.partition_id): (int(p.error_code), p.error_message)
                for t in response.replica_election_results for p in t.partition_result}

    # ------------------------------------------------------------------ reassignments
    def alter_partition_reassignments(self, targets: dict[tuple[str, int], list[int] | None]
                                      ) -> dict[tuple[str, int], tuple[int, str | None]]:
        """AlterPartitionReassignments: {(topic, partition): replicas, or None to cancel};
        (error code, message) per partition."""
        if not self.serves(ALTER_PARTITION_REASSIGNMENTS):
            raise KafkaError(f"{self.conn.where()} does not serve AlterPartitionReassignments (API 45)")
        by_topic: dict[str, list] = {}
        for (t, p), replicas in sorted(targets.items()):
            by_topic.setdefault(t, []).append({"partition_index": p,
                                               "replicas": None if replicas is None else list(replicas)})
        body = {"timeout": self.timeout_ms, "allow_replication_factor_change": True,
                "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}
        response = self._to_controller(
            ALTER_PARTITION_REASSIGNMENTS, body,
            lambda r: [r.error_code] + [p.error_code for t in r.responses for p in t.partitions])
        if int(response.error_code) != NONE:
            raise broker_error(response.error_code, response.error_message, "AlterPartitionReassignments: ")
        return {(t.name, p.partition_index): (int(p.error_code), p.error_message)
                for t in response.responses for p in t.partitions}

    def list_partition_reassignments(self, partitions: list[tuple[str, int]] | None = None
                                     ) -> dict[tuple[str, int], Reassignment]:
        """The ongoing reassignments (of `partitions`, None: all). A broker that does not serve
        ListPartitionReassignments has none, as Kafka's TopicCommand takes it."""
        if not self.serves(LIST_PARTITION_REASSIGNMENTS):
            return {}
        by_topic: dict[str, list[int]] = {}
        for t, p in partitions or ():
            by_topic.setdefault(t, []).append(p)
        body = {"timeout": self.timeout_ms, "topics": None if partitions is None else
                [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()]}
        response = self._to_controller(LIST_PARTITION_REASSIGNMENTS, body, lambda r: [r.error_code])
        if int(response.error_code) != NONE:
            raise broker_error(response.error_code, response.error_message, "ListPartitionReassignments: ")
        return {(t.name, p.partition_index): Reassignment(tuple(p.replicas), tuple(p.adding_replicas),
                                                          tuple(p.removing_replicas))
                for t in response.topics for p in t.partitions}
