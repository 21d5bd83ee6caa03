"""`seglog topics`: create, list, describe, delete and grow the topics of a log root (kafka-topics);
with --bootstrap-server, those of a running broker (topics_broker_command)."""
from __future__ import annotations

import sys
from typing import TextIO

from logcore.errors import InvalidConfigError
from logcore.log.config import validate_topic_overrides
from logcore.log.properties_file import load_properties
from logcore.log.topic_name import colliding_topic, topic_collision_warning, validate_topic_name
from logcore.tools.arguments import _configs, _open_root, _properties_file


BROKER_ONLY = ("replication_factor", "replica_assignment", "if_exists", "exclude_internal",
               "under_replicated_partitions", "unavailable_partitions", "command_config")


def cmd_topics(args) -> int:
    if getattr(args, "bootstrap_server", None):
        from logcore.tools.topics_broker_command import cmd_topics_broker
        return cmd_topics_broker(args)
    for option in BROKER_ONLY:
        if getattr(args, option, None) not in (None, False):
            raise InvalidConfigError(f"--{option.replace('_', '-')} applies to --bootstrap-server only, not --root")
    actions = [a for a in ("create", "list", "describe", "delete", "alter") if getattr(args, a)]
    if len(actions) != 1:
        raise InvalidConfigError("give exactly one of --create, --list, --describe, --delete, --alter")
    action = actions[0]
    out = sys.stdout
    if action == "create":
        name = args.create if isinstance(args.create, str) else args.topic
        if not name:
            raise InvalidConfigError("--create needs a topic: --create T or --create --topic T")
        validate_topic_name(name)
        if args.partitions is None or args.partitions < 1:
            raise InvalidConfigError(f"--create needs --partitions N with N >= 1, got {args.partitions}")
        configs = _configs(args.config)
        defaults = load_properties(_properties_file(args.defaults, "--defaults")) if args.defaults else None
        validate_topic_overrides(configs, defaults)     # bad input fails before anything is written
        owner = _served_by(args)
        if owner is not None:
            if defaults is not None:
                raise InvalidConfigError(f"--defaults applies to a new root; {args.root} exists and is served"
                                         f" by broker PLAINTEXT://{owner.bootstrap}")
            return _through_broker(args, owner, "create", name, configs)
        root = _open_root(args, create=True, defaults=defaults)
        try:
            existing = root.list_topics()
            if name in existing and args.if_not_exists:
                return 0
            other = colliding_topic(name, existing)
            if other is not None:
                raise InvalidConfigError(
                    f"Topic {name!r} collides with existing topic {other!r}: '.' and '_' are the same in "
                    "Kafka's metric names")
            warning = topic_collision_warning(name, existing)
            if warning:
                sys.stderr.write(warning + "\n")
            root.create_topic(name, args.partitions, configs)
        finally:
            root.close()
        out.write(f"Created topic {name}.\n")
        return 0

    if args.config and action != "alter":
        raise InvalidConfigError("--config applies to --create and --alter only")
    if action in ("delete", "alter"):
        _require_topic(args, f"--{action}")
        if action == "alter" and args.partitions is None and not args.config:
            raise InvalidConfigError("--alter needs --partitions N (the new, larger count) and/or --config k=v")
        owner = _served_by(args)
        if owner is not None:
            return _through_broker(args, owner, action, args.topic, _configs(args.config) if args.config else {})
    root = _open_root(args, read_only=action in ("list", "describe"))
    try:
        if action == "list":
            for name in root.list_topics():
                out.write(name + "\n")
        elif action == "describe":
            names = [args.topic] if args.topic else root.list_topics()
            if getattr(args, "topics_with_overrides", False):
                names = [n for n in names if root.describe_topic(n).config]
            for name in names:
                _describe(root, name, out, args.all_configs)
        elif action == "delete":
            _require_topic(args, "--delete")
            root.delete_topic(args.topic)
            out.write(f"Deleted topic {args.topic}.\n")
        elif action == "alter":
            _require_topic(args, "--alter")
            if args.partitions is None and not args.config:
                raise InvalidConfigError("--alter needs --partitions N (the new, larger count) and/or --config k=v")
            if args.config:
                merged = {**root.describe_topic(args.topic).config, **_configs(args.config)}
                root.set_topic_config(args.topic, merged)
                out.write(f"Updated the configs of topic {args.topic}.\n")
                if args.partitions is None:
                    return 0
            current = root.describe_topic(args.topic).partitions
            if args.partitions <= current:
                raise InvalidConfigError(
                    f"The topic {args.topic} currently has {current} partition(s); {args.partitions} would not "
                    "be an increase (partitions can only be added)")
            root.add_partitions(args.topic, args.partitions)
            out.write(f"Topic {args.topic} now has {args.partitions} partitions.\n")
    finally:
        root.close()
    return 0


def _served_by(args):
    """The broker that serves the root (its OwnerRecord), or None; a root that does not exist
    yet is served by none."""
    from logcore.errors import NotALogRootError

    try:
        root = _open_root(args, read_only=True)
    except NotALogRootError:
        return None
    try:
        from logcore.log.root_owner import live_owner
        # (LogRoot.served_by answers None for a read-only root: it guards writes)
        return None if root.kafka_copy else live_owner(root.storage)
    finally:
        root.close()


def _through_broker(args, owner, action: str, name: str, configs: dict[str, str]) -> int:
    """Create, delete or alter (grow, set configs) a topic of a served root through the broker that serves it
    (CreateTopics, DeleteTopics, CreatePartitions): a root a broker serves is written only
    through it, and every topic change then takes the same way."""
    from logcore.tools.kafka_admin import KafkaAdmin
    from logcore.wire.client import KafkaError
    from logcore.wire.error_codes import TOPIC_ALREADY_EXISTS

    sys.stderr.write(f"{args.root} is served by broker PLAINTEXT://{owner.bootstrap}: the topic is"
                     f" {'created' if action == 'create' else 'deleted' if action == 'delete' else 'altered'}"
                     " through it\n")
    out = sys.stdout
    with KafkaAdmin(owner.bootstrap, client_id="seglog-topics") as admin:
        if action == "create":
            try:
                admin.create_topic(name, args.partitions, -1, None, configs)
            except KafkaError as exc:
                if exc.code == TOPIC_ALREADY_EXISTS and args.if_not_exists:
                    return 0
                raise
            out.write(f"Created topic {name}.\n")
        elif action == "delete":
            admin.delete_topics([name])
            out.write(f"Deleted topic {name}.\n")
        else:
            if configs:
                from logcore.tools.config_admin import ConfigAdmin
                from logcore.wire.config_resources import OP_SET, TOPIC_RESOURCE
                with ConfigAdmin(owner.bootstrap) as config_admin:
                    config_admin.incremental_alter(TOPIC_RESOURCE, name,
                                                   [(k, OP_SET, v) for k, v in configs.items()])
                out.write(f"Updated the configs of topic {name}.\n")
            if args.partitions is not None:
                admin.create_partitions(name, args.partitions, None)
                out.write(f"Topic {name} now has {args.partitions} partitions.\n")
    return 0


def _require_topic(args, action: str) -> None:
    if not args.topic:
        raise InvalidConfigError(f"{action} needs --topic T")


def _describe(root, name: str, out: TextIO, all_configs: bool) -> None:
    info = root.describe_topic(name)
    if all_configs:
        configs = root.topic_config(name).to_properties()
    else:
        configs = info.config
    config_text = ",".join(f"{k}={v}" for k, v in sorted(configs.items()))
    out.write(f"Topic: {info.name}\tTopicId: {info.topic_id}\tPartitionCount: {info.partitions}\t"
              f"ReplicationFactor: 1\tConfigs: {config_text}\n")
    for p in range(info.partitions):
        if info.hosted is not None and p not in info.hosted:
            out.write(f"\tTopic: {info.name}\tPartition: {p}\tReplica: none in this log dir\n")
            continue
        log = root.log(name, p)
        try:
            out.write(f"\tTopic: {info.name}\tPartition: {p}\tLogStartOffset: {log.log_start_offset}\t"
                      f"HighWatermark: {log.high_watermark}\tLogEndOffset: {log.log_end_offset}\n")
        finally:
            log.close()
