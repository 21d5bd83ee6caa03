"""The config APIs of the Broker: DescribeConfigs (32), AlterConfigs (33),
IncrementalAlterConfigs (44) and ListConfigResources (74), for topics (resource type 2), brokers
(4: a broker id, or "" for the cluster-wide default) and groups (32: KIP-848's per-group configs,
group_configs.py).

A topic's overrides are validated as at creation (names, values, the rules between settings;
INVALID_CONFIG naming the key and value) and kept where the broker's topics live (its policy,
`topics`): `LocalTopicConfigs` in the log root's topics file for one broker alone, applied to
its open logs at once; `ClusterTopicConfigs` in ZooKeeper (/config/topics/<t> and a
/config/changes notification) for a cluster member, where every broker's watch applies it to its
own logs. Broker configs are the dynamic ones of logcore.broker.dynamic_config, among them the
replication throttles' rates (the throttled replicas are topic configs).
"""
from __future__ import annotations

import asyncio

from logcore.broker.config_description import ConfigDescription
from logcore.broker.dynamic_config import (BROKER_THROTTLES, DynamicBrokerConfig,
                                           RootBrokerConfigs, UnknownBrokerConfigError, check_dynamic)
from logcore.broker.group_configs import GroupConfigs
from logcore.errors import InvalidConfigError, SegLogError, TopicNotFoundError
from logcore.log.config import (BROKER_NAMES, CONFIG_KEYS, ConfigType, LogConfig, check_topic_against_root,
                                key_for, validate_topic_overrides)
from logcore.log.config_alteration import DELETE, SET, altered, check_no_duplicates
from logcore.wire import error_codes as E
from logcore.wire.config_resources import BROKER_RESOURCE, GROUP_RESOURCE, TOPIC_RESOURCE


class LocalTopicConfigs:
    """One broker alone: the overrides in its log root, applied to its open logs."""

    def __init__(self, root, partitions):
        self.root = root
        self.partitions = partitions

    def exists(self, name: str) -> bool:
        return name in self.partitions.topics

    def names(self) -> list[str]:
        return sorted(self.partitions.topics)

    def current(self, name: str) -> dict[str, str]:
        return dict(self.root.describe_topic(name).config)

    def replace(self, name: str, change) -> None:
        with self.partitions.lock:
            info = self.root.set_topic_config(name, change(self.current(name)))
            self.partitions.reconfigure_topic(info)


class ClusterTopicConfigs:
    """A cluster member: the overrides in ZooKeeper; every broker's replica manager watches them
    and applies them to its replicas."""

    def __init__(self, config_store, replica_manager):
        self.store = config_store
        self.replica_manager = replica_manager

    def exists(self, name: str) -> bool:
        return name in self.replica_manager.assignments

    def names(self) -> list[str]:
        return sorted(self.replica_manager.assignments)

    def current(self, name: str) -> dict[str, str]:
        return self.store.topic_config(name)

    def replace(self, name: str, change) -> None:
        self.store.set_topic_config(name, change)


class ConfigHandlers:
    """`config`: the broker's BrokerConfig; `root` and `partitions` its log root and open logs."""

    def __init__(self, config, root, partitions, rates=None):
        """`rates`: the broker's ReplicationQuotas, given the throttles' rates."""
        self.node_id = config.node_id
        self.root = root
        self.topics = LocalTopicConfigs(root, partitions)
        self.dynamic = DynamicBrokerConfig(config.node_id, root, partitions, RootBrokerConfigs(root.storage),
                                           rates)
        self.describer = ConfigDescription(config, root, self.dynamic)
        self.groups = GroupConfigs(config, root.storage)
        self._cluster = False
        self._broker_ids = lambda: [self.node_id]

    def start(self) -> None:
        """Read the persisted dynamic broker and group configs (before the logs open)."""
        self.dynamic.start()
        self.groups.start()

    def attach_cluster(self, store, replica_manager) -> None:
        """A cluster member: topic overrides and dynamic broker configs in ZooKeeper."""
        from logcore.cluster.config_store import ZooKeeperConfigStore
        zk = ZooKeeperConfigStore(store)
        self.topics = ClusterTopicConfigs(zk, replica_manager)
        self.dynamic.attach(zk)
        self.groups.attach(zk)
        self._cluster = True
        self._broker_ids = lambda: sorted(replica_manager.brokers)

    # ------------------------------------------------------------------ DescribeConfigs
    async def describe_configs(self, req) -> dict:
        body = req.body
        synonyms = bool(getattr(body, "include_synonyms", False))
        documentation = bool(getattr(body, "include_documentation", False))
        results = []
        for r in body.resources:
            keys = None if r.configuration_keys is None else set(r.configuration_keys)
            res = {"error_code": E.NONE, "error_message": None, "resource_type": r.resource_type,
                   "resource_name": r.resource_name, "configs": []}
            try:
                res["configs"] = await asyncio.to_thread(self._describe, int(r.resource_type), r.resource_name,
                                                         keys, synonyms, documentation)
            except _Failed as exc:
                res.update(error_code=exc.code, error_message=str(exc))
            except SegLogError as exc:
                res.update(error_code=E.error_code(exc), error_message=str(exc))
            results.append(res)
        return {"throttle_time": 0, "results": results}

    def _describe(self, kind: int, name: str, keys, synonyms: bool, documentation: bool) -> list[dict]:
        if kind == TOPIC_RESOURCE:
            if not self.topics.exists(name):
                raise _Failed(E.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist.")
            config = LogConfig.from_props(self.topics.current(name), self.root.defaults())
            return self.describer.topic(config, keys, synonyms=synonyms, documentation=documentation)
        if kind == BROKER_RESOURCE:
            entity = self._broker_entity(name)
            if entity == "":
                return self.describer.broker_default(keys, synonyms=synonyms, documentation=documentation)
            if entity != str(self.node_id):
                raise _Failed(E.INVALID_REQUEST, f"this is broker {self.node_id}: ask broker {entity} for"
                              " its configs")
            return self.describer.broker(keys, synonyms=synonyms, documentation=documentation)
        if kind == GROUP_RESOURCE:
            _check_group_name(name)
            return self.groups.describe(name, keys, synonyms=synonyms, documentation=documentation)
        raise _Failed(E.INVALID_REQUEST, f"resource type {kind} is not served")

    # ------------------------------------------------------------------ ListConfigResources
    async def list_config_resources(self, req) -> dict:
        """Kafka 4.1's ListConfigResources v1 (kafka-configs --describe lists groups by it): the
        resources of the types asked (all when none) that seglog describes: the groups with
        configs of their own, the brokers, the topics."""
        wanted = list(req.body.resource_types) or list(_LISTED)
        unserved = [t for t in wanted if t not in _LISTED]
        if unserved:
            return {"throttle_time": 0, "error_code": E.UNSUPPORTED_VERSION, "config_resources": [],
                    "error_message": f"config resource types {unserved} are not served: seglog lists"
                                     f" {sorted(_LISTED)}"}
        found = []
        for kind in dict.fromkeys(wanted):
            names = (self.groups.names() if kind == GROUP_RESOURCE else
                     [str(b) for b in self._broker_ids()] if kind == BROKER_RESOURCE else self.topics.names())
            found += [{"resource_name": n, "resource_type": kind} for n in names]
        return {"throttle_time": 0, "error_code": E.NONE, "config_resources": found}

    # ------------------------------------------------------------------ AlterConfigs / IncrementalAlterConfigs
    async def alter_configs(self, req) -> dict:
        """AlterConfigs: each resource's dynamic configs become exactly the ones given."""
        body = req.body
        out = []
        for r in body.resources:
            changes = [(c.name, SET, c.value) for c in r.configs]
            out.append(await self._alter(r, changes, body.validate_only, replace=True))
        return {"throttle_time": 0, "responses": out}

    async def incremental_alter_configs(self, req) -> dict:
        body = req.body
        out = []
        for r in body.resources:
            changes = [(c.name, int(c.config_operation), c.value) for c in r.configs]
            out.append(await self._alter(r, changes, body.validate_only, replace=False))
        return {"throttle_time": 0, "responses": out}

    async def _alter(self, r, changes, validate_only: bool, *, replace: bool) -> dict:
        res = {"error_code": E.NONE, "error_message": None, "resource_type": r.resource_type,
               "resource_name": r.resource_name}
        try:
            kind = int(r.resource_type)
            try:
                check_no_duplicates(name for name, _, _ in changes)
            except InvalidConfigError as exc:
                raise _Failed(E.INVALID_REQUEST, str(exc)) from None
            if kind == TOPIC_RESOURCE:
                await asyncio.to_thread(self._alter_topic, r.resource_name, changes, validate_only, replace)
            elif kind == BROKER_RESOURCE:
                await asyncio.to_thread(self._alter_broker, r.resource_name, changes, validate_only, replace)
            elif kind == GROUP_RESOURCE:
                await asyncio.to_thread(self._alter_group, r.resource_name, changes, validate_only, replace)
            else:
                raise _Failed(E.INVALID_REQUEST, f"resource type {kind} is not served")
        except _Failed as exc:
            res.update(error_code=exc.code, error_message=str(exc))
        except TopicNotFoundError:
            res.update(error_code=E.UNKNOWN_TOPIC_OR_PARTITION, error_message=f"Topic '{r.resource_name}' does not exist.")
        except SegLogError as exc:
            res.update(error_code=E.error_code(exc), error_message=str(exc))
        return res

    def _alter_topic(self, name: str, changes, validate_only: bool, replace: bool) -> None:
        if not self.topics.exists(name):
            raise _Failed(E.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist.")
        wanted = []
        for key, op, value in changes:
            try:
                key_for(key)
            except InvalidConfigError as exc:
                raise _Failed(E.INVALID_CONFIG, str(exc)) from None
            wanted.append((key, op, value))
        if not wanted and not replace:
            return

        def change(current: dict[str, str]) -> dict[str, str]:
            try:
                new = altered({} if replace else current, wanted, _topic_list_default)
                defaults = self.root.defaults()
                new = validate_topic_overrides(new, defaults)
                config = LogConfig.from_props(new, defaults)
                check_topic_against_root(name, config, defaults)
                config.check_change_from(LogConfig.from_props(current, defaults))
            except InvalidConfigError as exc:
                raise _Failed(E.INVALID_CONFIG, str(exc)) from None
            return new

        if validate_only:
            change(self.topics.current(name))
        else:
            self.topics.replace(name, change)

    def _alter_broker(self, name: str, changes, validate_only: bool, replace: bool) -> None:
        entity = self._broker_entity(name)
        wanted = []
        for key, op, value in changes:
            if key in BROKER_THROTTLES:
                if op == DELETE:
                    continue
                raise _Failed(E.INVALID_CONFIG, f"{key}={value}: seglog does not move replicas"
                              " between log dirs (AlterReplicaLogDirs), so it has no such throttle")
            try:
                check_dynamic(key, value if op == SET else None)
            except UnknownBrokerConfigError as exc:
                raise _Failed(E.INVALID_CONFIG, str(exc)) from None
            except InvalidConfigError as exc:       # static, or an invalid value: Kafka's INVALID_REQUEST
                raise _Failed(E.INVALID_REQUEST, str(exc)) from None
            wanted.append((key, op, value))
        if not wanted and not replace:
            return

        def change(current: dict[str, str]) -> dict[str, str]:
            try:
                new = altered({} if replace else current, wanted, _broker_list_default)
                for key in new:
                    check_dynamic(key, new[key])
                self.dynamic.check_tls(entity, new)
                # the topic configs these defaults give must stay valid (the rules between settings)
                LogConfig.from_props({}, {**self.root.static_defaults(),
                                          **{k: v for k, v in new.items() if k in BROKER_NAMES}})
            except InvalidConfigError as exc:
                raise _Failed(E.INVALID_REQUEST, str(exc)) from None
            return new

        if validate_only:
            change(self.dynamic.layer(entity))
        else:
            self.dynamic.alter(entity, change)

    def _alter_group(self, name: str, changes, validate_only: bool, replace: bool) -> None:
        _check_group_name(name)
        try:
            self.groups.alter(name, changes, replace=replace, validate_only=validate_only)
        except InvalidConfigError as exc:       # Kafka's InvalidConfigurationException
            raise _Failed(E.INVALID_CONFIG, str(exc)) from None

    def _broker_entity(self, name: str) -> str:
        """"" (the cluster-wide default) or a broker id; a single broker knows only itself."""
        if name == "":
            return ""
        try:
            node = int(name)
        except ValueError:
            raise _Failed(E.INVALID_REQUEST, f"broker resource name {name!r} is not a broker id") from None
        if node < 0 or (not self._cluster and node != self.node_id):
            raise _Failed(E.INVALID_REQUEST, f"this single broker is node {self.node_id}; there is no broker {name}")
        return str(node)


_LISTED = (GROUP_RESOURCE, BROKER_RESOURCE, TOPIC_RESOURCE)


def _check_group_name(name: str) -> None:
    if not name:
        raise _Failed(E.INVALID_REQUEST, "Group name must not be empty")


def _topic_list_default(name: str) -> str | None:
    key = CONFIG_KEYS.get(name)
    return key.format(key.default) if key is not None and key.type is ConfigType.LIST else None


def _broker_list_default(name: str) -> str | None:
    entry = BROKER_NAMES.get(name)
    return entry[0].format(entry[0].default) if entry is not None and entry[0].type is ConfigType.LIST else None


class _Failed(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code
