"""`seglog configs`: describe and alter topic and broker configs, with kafka-configs' flags and
output (--entity-type topics|brokers, --entity-name / --entity-default, --describe [--all],
--alter --add-config k=v,k2=[a,b] --delete-config k), and client quotas (--entity-type users
and/or clients, each followed by its --entity-name or --entity-default, as kafka-configs pairs
them; through a broker: DescribeClientQuotas and AlterClientQuotas; on a log root: its
seglog-client-quotas.json).

With --bootstrap-server it goes through a Kafka-protocol broker (seglog broker or Apache
Kafka): DescribeConfigs and IncrementalAlterConfigs. On a log root (ROOT, or --root) it works on
the root's files: the topics' overrides in its topics file, a single broker's dynamic configs in
seglog-broker-configs.json; a root a broker serves is refused, naming the broker to go through.
"""
from __future__ import annotations

import sys
from typing import TextIO

from logcore.errors import InvalidConfigError
from logcore.log.config import CONFIG_KEYS, ConfigType, LogConfig, key_for, resolve_root_defaults
from logcore.log.config_alteration import DELETE, SET, altered, check_no_duplicates
from logcore.tools.config_admin import SOURCE_NAMES, ConfigAdmin, DescribedConfig, Synonym
from logcore.wire.config_resources import (BROKER_RESOURCE, SOURCE_DEFAULT, SOURCE_DYNAMIC_BROKER,
                                           SOURCE_DYNAMIC_DEFAULT, SOURCE_STATIC_BROKER, SOURCE_TOPIC,
                                           TOPIC_RESOURCE)

KINDS = {"topics": TOPIC_RESOURCE, "brokers": BROKER_RESOURCE}


def parse_add_config(text: str) -> list[tuple[str, str]]:
    """kafka-configs' --add-config: k=v pairs split on ',' outside [..]; a [a,b] value is a list."""
    out, depth, item = [], 0, ""
    for ch in text + ",":
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            if item.strip():
                name, eq, value = item.strip().partition("=")
                if not eq or not name:
                    raise InvalidConfigError(f"--add-config: {item.strip()!r} is not k=v")
                value = value.strip()
                if value.startswith("[") and value.endswith("]"):
                    value = ",".join(v.strip() for v in value[1:-1].split(","))
                out.append((name.strip(), value))
            item = ""
        else:
            item += ch
    return out


def requested_changes(args) -> list[tuple[str, int, str | None]]:
    changes = [(k, SET, v) for text in args.add_config or [] for k, v in parse_add_config(text)]
    changes += [(k.strip(), DELETE, None) for text in args.delete_config or [] for k in text.split(",") if k.strip()]
    if not changes:
        raise InvalidConfigError("--alter needs --add-config k=v and/or --delete-config k")
    check_no_duplicates(name for name, _, _ in changes)
    return changes


def cmd_configs(args, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    if any(kind in QUOTA_TYPES for kind, _ in quota_entity_args(args)):
        return cmd_client_quotas(args, out)
    kind = KINDS[args.entity_type]
    if args.describe == args.alter:
        raise InvalidConfigError("give exactly one of --describe, --alter")
    if args.entity_default and args.entity_name is not None:
        raise InvalidConfigError("give --entity-name or --entity-default, not both")
    if args.entity_default and kind != BROKER_RESOURCE:
        raise InvalidConfigError("--entity-default applies to --entity-type brokers only")
    if args.alter and not args.entity_default and args.entity_name is None:
        raise InvalidConfigError("--alter needs --entity-name (or --entity-default for brokers)")
    if args.describe and (args.add_config or args.delete_config):
        raise InvalidConfigError("--add-config and --delete-config apply to --alter only")
    name = "" if args.entity_default else args.entity_name
    root_url = args.root or getattr(args, "root_path", None)
    if args.bootstrap_server and root_url:
        raise InvalidConfigError("give a log root or --bootstrap-server, not both")
    if not args.bootstrap_server and not root_url:
        raise InvalidConfigError("give a log root (seglog configs ROOT ...) or --bootstrap-server H:P")
    entity = RootEntities(root_url, args.storage_option) if root_url else BrokerEntities(args.bootstrap_server)
    try:
        if args.alter:
            entity.alter(kind, name, requested_changes(args))
            out.write(_done(kind, name) + "\n")
            return 0
        names = [name] if name is not None else entity.names(kind)
        for n in names:
            configs = entity.describe(kind, n)
            if not args.all:
                dynamic = SOURCE_TOPIC if kind == TOPIC_RESOURCE else (
                    SOURCE_DYNAMIC_DEFAULT if n == "" else SOURCE_DYNAMIC_BROKER)
                configs = [c for c in configs if c.source == dynamic]
            out.write(_heading(kind, n, args.all) + "\n")
            for c in configs:
                synonyms = ", ".join(f"{SOURCE_NAMES.get(s.source, s.source)}:{s.name}={s.value}"
                                     for s in c.synonyms)
                out.write(f"  {c.name}={'' if c.value is None else c.value} sensitive="
                          f"{str(c.sensitive).lower()} synonyms={{{synonyms}}}\n")
        return 0
    finally:
        entity.close()


def _done(kind: int, name: str) -> str:
    if kind == TOPIC_RESOURCE:
        return f"Completed updating config for topic {name}."
    return "Completed updating default config for brokers in the cluster." if name == "" else \
        f"Completed updating config for broker {name}."


def _heading(kind: int, name: str, all_configs: bool) -> str:
    what = f"topic {name}" if kind == TOPIC_RESOURCE else f"broker {name}"
    if kind == BROKER_RESOURCE and name == "":
        return "Default configs for brokers in the cluster are:"
    return f"{'All' if all_configs else 'Dynamic'} configs for {what} are:"


class BrokerEntities:
    """Through a broker (DescribeConfigs, IncrementalAlterConfigs)."""

    def __init__(self, servers: str):
        self.admin = ConfigAdmin(servers)

    def close(self) -> None:
        self.admin.close()

    def names(self, kind: int) -> list[str]:
        if kind == BROKER_RESOURCE:
            brokers, _ = self.admin.conn.metadata_brokers()
            return [str(b) for b in sorted(brokers)]
        from logcore.tools.kafka_admin import KafkaAdmin
        with KafkaAdmin(self.admin.conn.address) as topics:
            return [n for n, _ in topics.list_topics()]

    def describe(self, kind: int, name: str) -> list[DescribedConfig]:
        return self.admin.describe(kind, name)

    def alter(self, kind: int, name: str, changes) -> None:
        self.admin.incremental_alter(kind, name, changes)


class RootEntities:
    """On a log root's files (refused while a broker serves the root)."""

    def __init__(self, url: str, storage_options):
        from logcore.broker.dynamic_config import RootBrokerConfigs
        from logcore.log.log_root import LogRoot
        from logcore.tools.arguments import parse_storage_options
        from logcore.tiered import install_remote_tier
        install_remote_tier()

        self.root = LogRoot.open(url, storage_options=parse_storage_options(storage_options))
        self.brokers = RootBrokerConfigs(self.root.storage)

    def close(self) -> None:
        self.root.close()

    def names(self, kind: int) -> list[str]:
        return self.root.list_topics() if kind == TOPIC_RESOURCE else ["0"]

    def _served_check(self, what: str) -> None:
        self.root.check_not_served(what, "alter it through the broker: seglog configs --bootstrap-server"
                                         " HOST:PORT with the same flags")

    def alter(self, kind: int, name: str, changes) -> None:
        if kind == TOPIC_RESOURCE:
            self._served_check(f"cannot alter the configs of topic {name!r}")
            for key, _, _ in changes:
                key_for(key)            # an unknown name fails, naming the closest known one
            current = self.root.describe_topic(name).config
            self.root.set_topic_config(name, altered(current, changes, _list_default))
            return
        from logcore.broker.dynamic_config import check_dynamic
        self._served_check("cannot alter its dynamic broker configs")
        from logcore.security.tls_reconfiguration import listener_setting
        for key, op, value in changes:
            if listener_setting(key) is not None:       # checked against the listener in use
                raise InvalidConfigError(f"{key}: a TLS listener's stores are changed through the running"
                                         " broker, which checks them: seglog configs --bootstrap-server HOST:PORT")
            check_dynamic(key, value if op == SET else None)

        def change(current):
            new = altered(current, changes, lambda _n: None)
            LogConfig.from_props({}, {**self.root.static_defaults(), **new})
            return new
        self.brokers.set_broker_config(name, change)

    def describe(self, kind: int, name: str) -> list[DescribedConfig]:
        if kind == BROKER_RESOURCE:
            layer = self.brokers.broker_config(name)
            source = SOURCE_DYNAMIC_DEFAULT if name == "" else SOURCE_DYNAMIC_BROKER
            return [DescribedConfig(k, v, source, False, False, (Synonym(k, v, source),))
                    for k, v in sorted(layer.items())]
        info = self.root.describe_topic(name)
        config = self.root.topic_config(name)
        static = set(resolve_root_defaults(self.root.static_defaults()))
        out = []
        for key, value in config.to_properties().items():
            source = SOURCE_TOPIC if key in info.config else SOURCE_STATIC_BROKER if key in static \
                else SOURCE_DEFAULT
            out.append(DescribedConfig(key, value, source, False, False, (Synonym(key, value, source),)))
        return out


def _list_default(name: str) -> str | None:
    key = CONFIG_KEYS.get(name)
    return key.format(key.default) if key is not None and key.type is ConfigType.LIST else None



# ---------------------------------------------------------------------- client quotas
QUOTA_TYPES = {"users": "user", "clients": "client-id"}
_MATCH_EXACT, _MATCH_DEFAULT, _MATCH_ANY = 0, 1, 2


def quota_entity_args(args) -> list[tuple[str, object]]:
    """(entity type, name / None for --entity-default / False for neither) in the order given:
    kafka-configs pairs each --entity-type with the --entity-name or --entity-default after it."""
    parts = getattr(args, "entity_parts", None)
    if not parts:
        name = None if args.entity_default else (args.entity_name if args.entity_name is not None else False)
        return [(args.entity_type, name)]
    out: list[list] = []
    for dest, value in parts:
        if dest == "entity_type":
            out.append([value, False])
        elif not out:
            raise InvalidConfigError("--entity-name and --entity-default follow the --entity-type they name")
        elif out[-1][1] is not False:
            raise InvalidConfigError(f"--entity-type {out[-1][0]} is given two names")
        else:
            out[-1][1] = None if dest == "entity_default" else value
    return [(kind, name) for kind, name in out]


def cmd_client_quotas(args, out: TextIO) -> int:
    """kafka-configs on users and clients: --alter --add-config producer_byte_rate=1024
    --delete-config k, or --describe."""
    entities = quota_entity_args(args)
    kinds = [kind for kind, _ in entities]
    if any(kind not in QUOTA_TYPES for kind in kinds) or len(set(kinds)) != len(kinds):
        raise InvalidConfigError("client quota entities are --entity-type users and/or clients, each once"
                                 f" (not {', '.join(kinds)})")
    if kinds == ["clients", "users"]:
        entities.reverse()               # users first, as kafka-configs names them
    if args.describe == args.alter:
        raise InvalidConfigError("give exactly one of --describe, --alter")
    if args.describe and (args.add_config or args.delete_config):
        raise InvalidConfigError("--add-config and --delete-config apply to --alter only")
    if args.all:
        raise InvalidConfigError("--all applies to topics and brokers")
    root_url = args.root or getattr(args, "root_path", None)
    if args.bootstrap_server and root_url:
        raise InvalidConfigError("give a log root or --bootstrap-server, not both")
    if not args.bootstrap_server and not root_url:
        raise InvalidConfigError("give a log root (seglog configs ROOT ...) or --bootstrap-server H:P")
    quotas = RootQuotas(root_url, args.storage_option) if root_url else BrokerQuotas(args.bootstrap_server)
    try:
        if args.alter:
            if any(name is False for _, name in entities):
                raise InvalidConfigError("--alter needs --entity-name or --entity-default after each --entity-type")
            ops = []
            for text in args.add_config or []:
                for key, value in parse_add_config(text):
                    try:
                        ops.append((key, float(value)))
                    except ValueError:
                        raise InvalidConfigError(f"--add-config {key}={value}: a quota is a number") from None
            ops += [(k.strip(), None) for text in args.delete_config or [] for k in text.split(",") if k.strip()]
            if not ops:
                raise InvalidConfigError("--alter needs --add-config k=v and/or --delete-config k")
            check_no_duplicates(key for key, _ in ops)
            quotas.alter([(QUOTA_TYPES[kind], name) for kind, name in entities], ops)
            kind, name = entities[0]
            out.write(f"Completed updating config for {kind[:-1]} {name}.\n" if name is not None else
                      f"Completed updating default config for {kind} in the cluster.\n")
            return 0
        components = [(QUOTA_TYPES[kind], _MATCH_ANY if name is False else _MATCH_DEFAULT if name is None
                       else _MATCH_EXACT, name if isinstance(name, str) else None) for kind, name in entities]
        for parts, values in quotas.describe(components, True):
            settings = ", ".join(f"{k}={_java_double(v)}" for k, v in sorted(values.items()))
            out.write(f"Quota configs for {_entity_words(parts)} are {settings}\n")
        return 0
    finally:
        quotas.close()


def _entity_words(parts) -> str:
    words = {"user": "user-principal", "client-id": "client-id"}
    return ", ".join(f"the default {words[kind]}" if name is None else f"{words[kind]} '{name}'"
                     for kind, name in parts)


def _java_double(value: float) -> str:
    """As Java's Double.toString writes it (what kafka-configs prints): 1024.0, 12.5, 1.0E7."""
    if value != 0 and not 1e-3 <= abs(value) < 1e7:
        mantissa, _, exponent = f"{value:.16e}".partition("e")
        mantissa = mantissa.rstrip("0")
        return f"{mantissa}0E{int(exponent)}" if mantissa.endswith(".") else f"{mantissa}E{int(exponent)}"
    return repr(float(value))


class BrokerQuotas:
    """Through a broker (DescribeClientQuotas, AlterClientQuotas)."""

    def __init__(self, servers: str):
        from logcore.tools.client_quota_admin import ClientQuotaAdmin
        self.admin = ClientQuotaAdmin(servers)

    def close(self) -> None:
        self.admin.close()

    def describe(self, components, strict: bool):
        return self.admin.describe(components, strict)

    def alter(self, parts, ops) -> None:
        self.admin.alter(parts, ops)


class RootQuotas:
    """On a log root's seglog-client-quotas.json (refused while a broker serves the root)."""

    def __init__(self, url: str, storage_options):
        from logcore.log.log_root import LogRoot
        from logcore.quota.client_quota_configs import ClientQuotaConfigs
        from logcore.quota.client_quotas import ClientQuotas
        from logcore.quota.root_quota_store import RootQuotaStore
        from logcore.tools.arguments import parse_storage_options
        from logcore.tiered import install_remote_tier
        install_remote_tier()

        self.root = LogRoot.open(url, storage_options=parse_storage_options(storage_options))
        self.configs = ClientQuotaConfigs(ClientQuotas(), RootQuotaStore(self.root.storage))

    def close(self) -> None:
        self.root.close()

    def describe(self, components, strict: bool):
        return [(entity.parts(), values) for entity, values in self.configs.describe(components, strict)]

    def alter(self, parts, ops) -> None:
        self.root.check_not_served("cannot alter its client quotas", "alter them through the broker: seglog"
                                   " configs --bootstrap-server HOST:PORT with the same flags")
        self.configs.alter(parts, [(key, value, value is None) for key, value in ops], False)
