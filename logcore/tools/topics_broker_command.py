"""`seglog topics --bootstrap-server H:P`: kafka-topics through the Kafka protocol.

The flags and the output are kafka-topics.sh's (Kafka 4.1 TopicCommand): `--create` prints
`Created topic T.`, `--list` the names one per line, `--describe` a topic line and one line per
partition, `--delete` and `--alter` print nothing. `--topic` is a regular expression for
`--list`, `--describe`, `--delete` and `--alter` (',' separates alternatives), as Kafka's include
list; a `--topic` that matches nothing is an error unless `--if-exists`.

Errors from the broker exit 1 with the Kafka error name and the broker's message.
"""
from __future__ import annotations

import re
import sys
from typing import TextIO

from logcore.errors import InvalidConfigError
from logcore.log.partition_metadata import format_topic_id
from logcore.tools.client_properties import client_properties, client_security, timeout_s
from logcore.tools.kafka_admin import ConfigEntry, KafkaAdmin, TopicInfo
from logcore.wire.client import KafkaError
from logcore.wire.config_resources import SOURCE_TOPIC
from logcore.wire.error_codes import TOPIC_ALREADY_EXISTS

ROOT_ONLY = ("storage_option", "defaults", "all_configs")
# (--command-config takes the admin client's client.id, request.timeout.ms, security.protocol)
WARNING_COLLISION = ("WARNING: Due to limitations in metric names, topics with a period ('.') or underscore ('_')"
                     " could collide. To avoid issues it is best to use either, but not both.")


def cmd_topics_broker(args, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    for name in ROOT_ONLY:
        if getattr(args, name, None):
            raise InvalidConfigError(f"--{name.replace('_', '-')} applies to --root only, not --bootstrap-server")
    actions = [a for a in ("create", "list", "describe", "delete", "alter") if getattr(args, a)]
    if len(actions) != 1:
        raise InvalidConfigError("give exactly one of --create, --list, --describe, --delete, --alter")
    action = actions[0]
    if args.if_not_exists and action != "create":
        raise InvalidConfigError("--if-not-exists applies to --create only")
    if args.if_exists and action not in ("alter", "delete", "describe"):
        raise InvalidConfigError("--if-exists applies to --alter, --delete and --describe only")
    reports = [name for name, on in (("under", args.under_replicated_partitions),
                                     ("unavailable", args.unavailable_partitions)) if on]
    if reports and action != "describe":
        raise InvalidConfigError("--under-replicated-partitions and --unavailable-partitions apply to --describe only")
    if len(reports) > 1:
        raise InvalidConfigError("give one of --under-replicated-partitions, --unavailable-partitions")
    report = reports[0] if reports else None
    props = client_properties(args.command_config, None, (), command="seglog topics --bootstrap-server",
                              item_option="--command-config")
    admin_options = {"client_id": props.get("client.id", "seglog-topics"),
                     "timeout_ms": int(timeout_s(props) * 1000), "security": client_security(props)}
    if args.config and action not in ("create", "alter"):
        raise InvalidConfigError("--config applies to --create and --alter only")
    if args.replication_factor is not None and action != "create":
        raise InvalidConfigError("--replication-factor applies to --create only")
    if args.replica_assignment and action not in ("create", "alter"):
        raise InvalidConfigError("--replica-assignment applies to --create and --alter only")
    if action == "create":
        return _create(args, out, admin_options)
    if action == "alter" and args.partitions is None and not args.config:
        raise InvalidConfigError("--alter needs --partitions N (the new, larger count) and/or --config k=v")
    with KafkaAdmin(args.bootstrap_server, **admin_options) as admin:
        topics = _matching(admin, args.topic, args.exclude_internal)
        if args.topic and not topics and not args.if_exists:
            raise InvalidConfigError(f"Topic '{args.topic}' does not exist as expected")
        if action == "list":
            out.write("\n".join(topics) + "\n")
        elif action == "describe":
            _describe(admin, topics, out, report, getattr(args, "topics_with_overrides", False))
        elif action == "delete":
            if not args.topic:
                raise InvalidConfigError("--delete needs --topic T")
            if topics:
                admin.delete_topics(topics)
        else:
            if not args.topic:
                raise InvalidConfigError("--alter needs --topic T")
            if args.config:
                _alter_configs(args.bootstrap_server, topics, parse_configs(args.config))
                if args.partitions is None:
                    return 0
            assignment = parse_replica_assignment(args.replica_assignment) if args.replica_assignment else None
            infos = {t.name: t for t in admin.describe_topics(topics)} if assignment else {}
            for name in topics:
                new = assignment[len(infos[name].partitions):] if assignment else None
                admin.create_partitions(name, args.partitions, new)
    return 0


def _create(args, out: TextIO, admin_options: dict) -> int:
    name = args.topic or (args.create if isinstance(args.create, str) else None)
    if not name:
        raise InvalidConfigError("--create needs --topic T")
    rf, partitions = args.replication_factor, args.partitions
    assignment = None
    if args.replica_assignment:
        if partitions is not None or rf is not None:
            raise InvalidConfigError("--replica-assignment cannot be used with --partitions or --replication-factor")
        assignment = parse_replica_assignment(args.replica_assignment)
    if rf is not None and not 1 <= rf <= 32767:
        raise InvalidConfigError("The replication factor must be between 1 and 32767 inclusive")
    if partitions is not None and partitions < 1:
        raise InvalidConfigError("The partitions must be greater than 0")
    configs = parse_configs(args.config or [])
    if "." in name or "_" in name:
        out.write(WARNING_COLLISION + "\n")
    with KafkaAdmin(args.bootstrap_server, **admin_options) as admin:
        try:
            admin.create_topic(name, -1 if partitions is None else partitions, -1 if rf is None else rf,
                               assignment, configs)
        except KafkaError as exc:
            if exc.code == TOPIC_ALREADY_EXISTS and args.if_not_exists:
                return 0
            raise
    out.write(f"Created topic {name}.\n")
    return 0


def parse_configs(items: list[str]) -> dict[str, str]:
    """`k=v` items (spaces around '=' allowed), as kafka-topics parses --config."""
    out = {}
    for item in items:
        parts = re.split(r"\s*=\s*", item)
        if len(parts) != 2:
            raise InvalidConfigError(f"--config {item!r}: all configs to be added must be in the format \"key=val\"")
        out[parts[0].strip()] = parts[1].strip()
    return out


def parse_replica_assignment(text: str) -> list[list[int]]:
    """`1:2:3,2:3:1`: the broker ids of partition 0, 1, ... (kafka-topics' --replica-assignment)."""
    out: list[list[int]] = []
    for i, item in enumerate(text.split(",")):
        try:
            ids = [int(x.strip()) for x in item.split(":")]
        except ValueError:
            raise InvalidConfigError(f"--replica-assignment {text!r}: {item!r} is not broker ids separated by ':'") from None
        dups = sorted({x for x in ids if ids.count(x) > 1})
        if dups:
            raise InvalidConfigError("Partition replica lists may not contain duplicate entries: "
                                     + ",".join(map(str, dups)))
        if out and len(ids) != len(out[0]):
            raise InvalidConfigError(f"Partition {i} has different replication factor: {ids}")
        out.append(ids)
    return out


def topic_regex(text: str) -> re.Pattern:
    """kafka-topics' include list: ',' separates alternatives, spaces and surrounding quotes dropped."""
    raw = re.sub(r"[\"']+$", "", re.sub(r"^[\"']+", "", text.strip().replace(",", "|").replace(" ", "")))
    try:
        return re.compile(raw)
    except re.error as exc:
        raise InvalidConfigError(f"--topic {text!r} is an invalid regex: {exc}") from None


def _matching(admin: KafkaAdmin, topic: str | None, exclude_internal: bool) -> list[str]:
    pattern = topic_regex(topic) if topic else None
    return [name for name, internal in admin.list_topics()
            if not (internal and exclude_internal) and (pattern is None or pattern.fullmatch(name))]


def _alter_configs(servers: str, topics: list[str], configs: dict[str, str]) -> None:
    """IncrementalAlterConfigs SET of each config, for each topic (kafka-configs --alter)."""
    from logcore.tools.config_admin import ConfigAdmin
    from logcore.wire.config_resources import OP_SET, TOPIC_RESOURCE
    with ConfigAdmin(servers) as admin:
        for name in topics:
            admin.incremental_alter(TOPIC_RESOURCE, name, [(k, OP_SET, v) for k, v in configs.items()])


def _describe(admin: KafkaAdmin, names: list[str], out: TextIO, report: str | None = None,
              with_overrides: bool = False) -> None:
    infos = sorted(admin.describe_topics(names), key=lambda t: t.name)
    configs = admin.describe_configs([t.name for t in infos]) if report is None else {}
    moving = admin.list_partition_reassignments([(t.name, p.partition) for t in infos for p in t.partitions])
    for info in infos:
        if report is not None:
            out.write(report_lines(info, report, moving))
            continue
        lines = describe_lines(info, configs.get(info.name, []), moving)
        if with_overrides:
            # kafka-topics --topics-with-overrides: the topic line of topics with overrides only
            if any(c.source == SOURCE_TOPIC for c in configs.get(info.name, [])):
                out.write(lines.splitlines(keepends=True)[0])
            continue
        out.write(lines)


def report_lines(info: TopicInfo, report: str, reassignments: dict) -> str:
    """kafka-topics --describe --under-replicated-partitions / --unavailable-partitions: only the
    lines of those partitions, without the topic line (TopicCommand leaves it out for a report).
    Under-replicated: fewer in-sync replicas than assigned ones (a partition being reassigned
    counts its target replicas, not the ones being added); unavailable: no leader."""
    lines = describe_lines(info, [], reassignments).splitlines(keepends=True)[1:]
    out = []
    for p, line in zip(info.partitions, lines):
        moving = reassignments.get((info.name, p.partition))
        wanted = len(p.replicas) - (len(moving.adding) if moving is not None else 0)
        if (report == "under" and len(p.isr) < wanted) or (report == "unavailable" and p.leader < 0):
            out.append(line)
    return "".join(out)


def describe_lines(info: TopicInfo, configs: list[ConfigEntry], reassignments: dict | None = None) -> str:
    """kafka-topics --describe's lines for one topic (Kafka 4.1's TopicCommand): a partition
    being reassigned adds `Adding Replicas` / `Removing Replicas`, and the replication factor
    is then Kafka's replicas - adding replicas."""
    reassignments = reassignments or {}
    overrides = ",".join(f"{c.name}={'null' if c.value is None else c.value}"
                         for c in java_hash_order(configs) if not c.is_default)
    rf = len(info.partitions[0].replicas) if info.partitions else 0
    first = reassignments.get((info.name, info.partitions[0].partition)) if info.partitions else None
    if first is not None:
        rf = len(first.replicas) - len(first.adding)
    head = f"Topic: {info.name}"
    if info.topic_id is not None and info.topic_id.int != 0:
        head += f"\tTopicId: {format_topic_id(info.topic_id)}"
    lines = [f"{head}\tPartitionCount: {len(info.partitions)}\tReplicationFactor: {rf}\tConfigs: {overrides}"]
    for p in info.partitions:
        lines.append(f"\tTopic: {info.name}\tPartition: {p.partition}\tLeader: {p.leader if p.leader >= 0 else 'none'}"
                     f"\tReplicas: {_ids(p.replicas)}\tIsr: {_ids(p.isr)}"
                     + (f"\tAdding Replicas: {_ids(r.adding)}\tRemoving Replicas: {_ids(r.removing)}"
                        if (r := reassignments.get((info.name, p.partition))) is not None else "")
                     + f"\tElr: {'N/A' if p.elr is None else _ids(p.elr)}"
                     f"\tLastKnownElr: {'N/A' if p.last_known_elr is None else _ids(p.last_known_elr)}")
    return "\n".join(lines) + "\n"


def _ids(ids) -> str:
    return ",".join(str(i) for i in ids)


def java_string_hash(text: str) -> int:
    """Java's String.hashCode (UTF-16 code units, 32-bit wrap-around), signed."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def java_hash_order(entries: list[ConfigEntry]) -> list[ConfigEntry]:
    """`entries` in the iteration order of a java.util.HashMap they were put into one by one
    (kafka-topics prints a topic's configs from one: admin.Config keeps its entries in a HashMap).
    The table starts at 16 buckets and doubles when it holds more than 3/4 of that; iteration is
    by bucket (hash ^ hash >>> 16, masked), then in insertion order within a bucket."""
    capacity = 16
    while len(entries) > capacity * 3 // 4:
        capacity *= 2
    def bucket(entry: ConfigEntry) -> int:
        h = java_string_hash(entry.name) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (capacity - 1)
    return sorted(entries, key=bucket)          # sorted() is stable: insertion order within a bucket
