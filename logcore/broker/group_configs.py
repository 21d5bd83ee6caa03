"""Per-group dynamic configs: Kafka 4's GROUP config resource (type 32) of DescribeConfigs,
AlterConfigs and IncrementalAlterConfigs.

A KIP-848 consumer group may override the broker's group.consumer.session.timeout.ms and
group.consumer.heartbeat.interval.ms by consumer.session.timeout.ms and
consumer.heartbeat.interval.ms; the coordinator gives its members those. Values are checked as
Kafka's GroupConfig checks them: within the broker's group.consumer.min/max.* bounds, the session
longer than the heartbeat interval. Kafka's share.* and streams.* group configs are refused by
name: seglog has neither share groups nor streams groups, so they could not do what they say.

Kept in the log root (seglog-group-configs.json) on one broker alone, in ZooKeeper's
/config/groups/<group> (announced in /config/changes as "groups/<group>") on a cluster, where
every broker follows them, since any of them may become the group's coordinator.
"""
from __future__ import annotations

import json
import logging
import threading

from logcore.broker.config_description import KAFKA_CONFIG_TYPE
from logcore.errors import InvalidConfigError
from logcore.log.config import ConfigType
from logcore.log.config_alteration import altered
from logcore.wire.config_resources import SOURCE_DEFAULT, SOURCE_DYNAMIC_GROUP

logger = logging.getLogger(__name__)

GROUP_CONFIGS_FILE = "seglog-group-configs.json"

SESSION_TIMEOUT = "consumer.session.timeout.ms"
HEARTBEAT_INTERVAL = "consumer.heartbeat.interval.ms"

# group config -> (the broker setting giving its default, documentation)
GROUP_KEYS = {
    SESSION_TIMEOUT: ("group.consumer.session.timeout.ms",
                      "The timeout to detect client failures when using the consumer group protocol."),
    HEARTBEAT_INTERVAL: ("group.consumer.heartbeat.interval.ms",
                         "The heartbeat interval given to the members of a consumer group."),
}
# Kafka 4.1's other group configs: for share and streams groups, which seglog does not have.
UNSERVED_KEYS = frozenset({
    "share.session.timeout.ms", "share.heartbeat.interval.ms", "share.record.lock.duration.ms",
    "share.auto.offset.reset", "share.isolation.level",
    "streams.session.timeout.ms", "streams.heartbeat.interval.ms", "streams.num.standby.replicas",
})


class RootGroupConfigs:
    """One broker alone: {"version":1,"groups":{"<group>":{..}}} in its log root."""

    def __init__(self, storage):
        self._storage = storage
        self._lock = threading.Lock()

    def all(self) -> dict[str, dict[str, str]]:
        if not self._storage.exists(GROUP_CONFIGS_FILE):
            return {}
        try:
            doc = json.loads(self._storage.read(GROUP_CONFIGS_FILE))
        except ValueError as exc:
            raise InvalidConfigError(f"{self._storage.url}/{GROUP_CONFIGS_FILE} is not valid JSON: {exc}") from None
        return {g: dict(c) for g, c in doc.get("groups", {}).items()}

    def set_group_config(self, group: str, change) -> dict[str, str]:
        """Replace the group's configs by change(current); an empty result removes the group."""
        with self._lock:
            groups = self.all()
            new = change(dict(groups.get(group, {})))
            if new:
                groups[group] = new
            else:
                groups.pop(group, None)
            doc = {"version": 1, "groups": groups}
            self._storage.write_atomic(GROUP_CONFIGS_FILE, json.dumps(doc, indent=1, sort_keys=True).encode())
            return new


class GroupConfigs:
    """The groups' overrides, over the broker's `config` (its group.consumer.* settings); kept in
    `storage` (the log root) until attach() moves them to ZooKeeper."""

    def __init__(self, config, storage):
        self.config = config
        self.store = RootGroupConfigs(storage)
        self._groups: dict[str, dict[str, str]] = {}

    def start(self) -> None:
        self._groups = self.store.all()

    def attach(self, zk_store) -> None:
        """A cluster member: the overrides in ZooKeeper, followed as they change."""
        self.store = zk_store
        self._groups = {}
        zk_store.watch_group_configs(self._watched)

    def _watched(self, group: str, configs: dict[str, str]) -> None:
        """A group's znode as another writer may have left it: the last good configs stay when
        it does not pass the checks."""
        try:
            configs = self.validate(configs)
        except InvalidConfigError as exc:
            logger.warning("group %s: its configs in ZooKeeper are ignored: %s", group, exc)
            return
        self._changed(group, configs)

    def _changed(self, group: str, configs: dict[str, str]) -> None:
        # copied, never changed in place: the ZooKeeper watch writes from its own thread
        groups = dict(self._groups)
        if configs:
            groups[group] = dict(configs)
        else:
            groups.pop(group, None)
        self._groups = groups

    def names(self) -> list[str]:
        """The groups that have configs of their own (ListConfigResources)."""
        return sorted(self._groups)

    def overrides(self, group: str) -> dict[str, str]:
        """The group's own configs now ({} when it has none)."""
        return dict(self._groups.get(group, {}))

    def session_timeout_ms(self, group: str) -> int:
        return int(self._value(group, SESSION_TIMEOUT))

    def heartbeat_interval_ms(self, group: str) -> int:
        return int(self._value(group, HEARTBEAT_INTERVAL))

    def _value(self, group: str, name: str) -> str:
        own = self._groups.get(group, {})
        return own[name] if name in own else str(self.config[GROUP_KEYS[name][0]])

    # ------------------------------------------------------------------ alter
    @staticmethod
    def check_name(name: str) -> None:
        if name in UNSERVED_KEYS:
            raise InvalidConfigError(f"{name}: seglog has no {name.split('.')[0]} groups, so it does not take"
                                     " their group configs")
        if name not in GROUP_KEYS:
            raise InvalidConfigError(f"Unknown group config name: {name}")

    def validate(self, props: dict[str, str]) -> dict[str, str]:
        """Kafka's GroupConfig.validate: the names, the values as ints, the broker's bounds."""
        for name in props:
            self.check_name(name)
        values = {}
        for name, (broker_key, _) in GROUP_KEYS.items():
            raw = props.get(name)
            if raw is None:
                values[name] = int(self.config[broker_key])
                continue
            try:
                values[name] = int(str(raw).strip())
            except ValueError:
                raise InvalidConfigError(f"Invalid value {raw} for configuration {name}:"
                                         " Not a number of type INT") from None
            if values[name] < 1:
                raise InvalidConfigError(f"Invalid value {raw} for configuration {name}: Value must be at least 1")
        for name, what in ((HEARTBEAT_INTERVAL, "heartbeat.interval.ms"), (SESSION_TIMEOUT, "session.timeout.ms")):
            if values[name] < int(self.config[f"group.consumer.min.{what}"]):
                raise InvalidConfigError(f"{name} must be greater than or equal to group.consumer.min.{what}")
            if values[name] > int(self.config[f"group.consumer.max.{what}"]):
                raise InvalidConfigError(f"{name} must be less than or equal to group.consumer.max.{what}")
        if values[SESSION_TIMEOUT] <= values[HEARTBEAT_INTERVAL]:
            raise InvalidConfigError(f"{SESSION_TIMEOUT} must be greater than {HEARTBEAT_INTERVAL}")
        return {name: str(int(str(props[name]).strip())) for name in props}

    def alter(self, group: str, changes, *, replace: bool, validate_only: bool) -> dict[str, str]:
        """Apply (name, op, value) `changes` (or, `replace`, make them the group's only configs)."""
        if not group:
            raise ValueError("Group name must not be empty")
        for name, _, _ in changes:
            self.check_name(name)

        def change(current: dict[str, str]) -> dict[str, str]:
            return self.validate(altered({} if replace else current, changes, lambda name: None))

        if validate_only:
            return change(self.overrides(group))
        new = self.store.set_group_config(group, change)
        self._changed(group, new)           # this broker at once; the others by their watch
        return new

    # ------------------------------------------------------------------ describe
    def describe(self, group: str, keys: set[str] | None, *, synonyms: bool, documentation: bool) -> list[dict]:
        """Kafka's answer for a group (one that does not exist too): each config, the group's
        own value (DYNAMIC_GROUP_CONFIG) or the broker's (DEFAULT_CONFIG)."""
        if not group:
            raise ValueError("Group name must not be empty")
        own = self.overrides(group)
        out = []
        for name, (broker_key, doc) in GROUP_KEYS.items():
            if keys is not None and name not in keys:
                continue
            if name in own:
                value, source = own[name], SOURCE_DYNAMIC_GROUP
            else:
                value, source = str(self.config[broker_key]), SOURCE_DEFAULT
            out.append({"name": name, "value": value, "read_only": False, "config_source": source,
                        "is_default": source == SOURCE_DEFAULT, "is_sensitive": False,
                        "synonyms": [{"name": name, "value": value, "source": source}] if synonyms else [],
                        "config_type": KAFKA_CONFIG_TYPE[ConfigType.INT],
                        "documentation": doc if documentation else None})
        return out
