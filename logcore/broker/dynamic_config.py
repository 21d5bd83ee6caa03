"""A broker's dynamic configs (Kafka's DynamicBrokerConfig, for what seglog applies live).

Dynamic: the topic defaults under Kafka's broker names (log.retention.ms, log.segment.bytes,
log.cleanup.policy, message.max.bytes, min.insync.replicas, ... every name in
logcore.log.config.BROKER_NAMES, all of which Kafka also updates dynamically). They are set per
broker (entity "<id>") or cluster-wide (entity "", Kafka's <default>) with AlterConfigs or
IncrementalAlterConfigs, and layered: per broker > cluster default > broker.properties (and the
root's stored defaults) > Kafka's defaults. A change is applied at once: the log root resolves
topic configs with the new layer and every open log is reconfigured. Any other broker setting
is static: refused with Kafka's INVALID_REQUEST "Cannot update these configs dynamically".
A TLS listener's stores (`listener.name.<l>.ssl.keystore.location`, ...) are dynamic per broker:
validated and applied by logcore.security.tls_reconfiguration (certificate reload).

Where they persist is the broker's policy: `RootBrokerConfigs` (one broker alone: a JSON file
in its log root, `seglog-broker-configs.json`, which also holds the users' SCRAM credentials) or,
for a cluster member,
logcore.cluster.config_store.ZooKeeperConfigStore (/config/brokers/<id>, /config/brokers/<default>,
watched by every broker).
"""
from __future__ import annotations

import json
import logging
import threading

from logcore.errors import InvalidConfigError
from logcore.log.config import BROKER_NAMES, resolve_root_defaults, unknown_message
from logcore.log.config_key import INT64_MAX, ConfigKey, ConfigType, at_least
from logcore.quota.replication_quota import FOLLOWER_RATE, LEADER_RATE
from logcore.security.tls_reconfiguration import PerBrokerOnlyError, check_value as check_store_value
from logcore.security.tls_reconfiguration import is_static_listener_setting
from logcore.security.tls_reconfiguration import is_unprefixed as is_unprefixed_store_setting
from logcore.security.tls_reconfiguration import listener_setting

logger = logging.getLogger(__name__)

# The replication throttles' rates (logcore.quota.replication_quota): dynamic, not log defaults.
REPLICATION_RATES: dict[str, ConfigKey] = {k.name: k for k in (
    ConfigKey(LEADER_RATE, ConfigType.LONG, INT64_MAX,
              "Bytes per second this broker, as leader, sends to the throttled replicas"
              " (leader.replication.throttled.replicas) that are not in sync.",
              validator=at_least(0), category="replication"),
    ConfigKey(FOLLOWER_RATE, ConfigType.LONG, INT64_MAX,
              "Bytes per second this broker, as follower, fetches of its throttled replicas"
              " (follower.replication.throttled.replicas) while they are not caught up.",
              validator=at_least(0), category="replication"))}
DYNAMIC_NAMES = frozenset(BROKER_NAMES) | frozenset(REPLICATION_RATES)
# Moving replicas between a broker's log dirs (AlterReplicaLogDirs) is not served: deleting its
# throttle (kafka-reassign-partitions --verify) is answered as done, setting it is refused.
BROKER_THROTTLES = frozenset({"replica.alter.log.dirs.io.max.bytes.per.second"})
BROKER_CONFIGS_FILE = "seglog-broker-configs.json"


class StaticConfigError(InvalidConfigError):
    """A broker setting that cannot change at runtime (Kafka's INVALID_REQUEST)."""


class UnknownBrokerConfigError(InvalidConfigError):
    """A name no broker setting has."""


def _known_static() -> set[str]:
    from logcore.broker.config import BROKER_KEYS
    from logcore.log.config import MAINTENANCE_KEYS
    from logcore.tiered.config import RSM_PREFIX, TIERED_KEYS
    return (set(BROKER_KEYS) | set(MAINTENANCE_KEYS) | set(TIERED_KEYS)
            | {RSM_PREFIX + k for k in TIERED_KEYS})


def check_dynamic(name: str, value: str | None) -> str | None:
    """The canonical value of dynamic broker config `name` (None for a removal); InvalidConfigError
    naming the key and value when it is not valid, StaticConfigError when it is not dynamic."""
    if listener_setting(name) is not None or is_unprefixed_store_setting(name):
        return check_store_value(name, value)       # a TLS listener's stores (tls_reconfiguration)
    if is_static_listener_setting(name):
        raise StaticConfigError(f"Cannot update these configs dynamically: Set({name}) (of a listener's"
                                " settings, only its key and trust stores change at runtime)")
    if name not in DYNAMIC_NAMES:
        if name not in _known_static():
            raise UnknownBrokerConfigError(unknown_message(name, sorted(DYNAMIC_NAMES) + sorted(_known_static()),
                                                           "broker config"))
        raise StaticConfigError(f"Cannot update these configs dynamically: Set({name}) (seglog"
                                " changes at runtime only the log defaults under their broker names,"
                                " e.g. log.retention.ms, log.segment.bytes, log.cleanup.policy, and"
                                " the replication throttles' rates)")
    if value is None:
        return None
    if name in REPLICATION_RATES:
        key = REPLICATION_RATES[name]
        return key.format(key.parse(value))
    try:
        resolve_root_defaults({name: value})
    except InvalidConfigError as exc:
        raise InvalidConfigError(f"Invalid value {value} for configuration {name}: {exc}") from None
    return str(value)


class RootBrokerConfigs:
    """One broker's dynamic configs in its log root: {"version":1,"default":{..},"brokers":{"<id>":{..}}}."""

    def __init__(self, storage):
        self._storage = storage
        self._lock = threading.Lock()

    def _doc(self) -> dict:
        if not self._storage.exists(BROKER_CONFIGS_FILE):
            return {"version": 1, "default": {}, "brokers": {}}
        try:
            doc = json.loads(self._storage.read(BROKER_CONFIGS_FILE))
        except ValueError as exc:
            raise InvalidConfigError(f"{self._storage.url}/{BROKER_CONFIGS_FILE} is not valid JSON: {exc}") from None
        doc.setdefault("default", {})
        doc.setdefault("brokers", {})
        return doc

    def broker_config(self, entity: str) -> dict[str, str]:
        doc = self._doc()
        return dict(doc["default"] if entity == "" else doc["brokers"].get(entity, {}))

    def set_broker_config(self, entity: str, change) -> dict[str, str]:
        with self._lock:
            doc = self._doc()
            new = change(self.broker_config(entity))
            if entity == "":
                doc["default"] = new
            else:
                doc["brokers"][entity] = new
            self._storage.write_atomic(BROKER_CONFIGS_FILE, json.dumps(doc, indent=1, sort_keys=True).encode())
            return new

    def watch_broker_config(self, entity: str, fn) -> None:
        fn(self.broker_config(entity))          # no other writer: read once, then each write applies

    # Users' configs (SCRAM credentials, as Kafka's /config/users/<user>) under "users".
    def user_config(self, user: str) -> dict[str, str]:
        return dict(self._doc().get("users", {}).get(user, {}))

    def user_names(self) -> list[str]:
        return sorted(self._doc().get("users", {}))

    def set_user_config(self, user: str, change) -> dict[str, str]:
        """Replace the user's configs by change(current); an empty result removes the user."""
        with self._lock:
            doc = self._doc()
            users = doc.setdefault("users", {})
            new = change(dict(users.get(user, {})))
            if new:
                users[user] = new
            else:
                users.pop(user, None)
            self._storage.write_atomic(BROKER_CONFIGS_FILE, json.dumps(doc, indent=1, sort_keys=True).encode())
            return new


class DynamicBrokerConfig:
    """This broker's dynamic layers over `root` and its open logs (`partitions`); `store` is where
    they persist (RootBrokerConfigs or ZooKeeperConfigStore)."""

    def __init__(self, node_id: int, root, partitions, store, rates=None):
        self.node_id = node_id
        self.root = root
        self.partitions = partitions
        self.store = store
        self.rates = rates          # ReplicationQuotas: takes the replication throttles' rates
        self.tls = None             # ListenerTlsUpdates: takes the TLS listeners' store settings
        self._layers: dict[str, dict[str, str]] = {"": {}, str(node_id): {}}
        self._lock = threading.Lock()

    def attach(self, store) -> None:
        """Persist in `store` from now on (a cluster member's ZooKeeper) and follow its changes."""
        self.store = store
        self.start()

    def start(self) -> None:
        """Read (and, where the store has watches, follow) both layers; applied at once."""
        for entity in ("", str(self.node_id)):
            self.store.watch_broker_config(entity, lambda config, entity=entity: self._changed(entity, config))

    def layer(self, entity: str) -> dict[str, str]:
        """The dynamic configs of `entity` ("" the cluster default, "<id>" a broker): this
        broker's known layers from memory, any other broker's from the store."""
        if entity in self._layers:
            return dict(self._layers[entity])
        return self.store.broker_config(entity)

    def serve_tls(self, updates) -> None:
        """Give the TLS listeners' store settings to `updates` (ListenerTlsUpdates) from now on,
        starting with the ones already persisted for this broker."""
        with self._lock:
            self.tls = updates
            updates.apply(self._layers[str(self.node_id)])

    def check_tls(self, entity: str, new: dict[str, str]) -> None:
        """The TLS store settings of layer `new` for `entity` are usable (InvalidConfigError
        otherwise): only per broker, only this broker's (its files are read here), only its TLS
        listeners, and the stores they name valid (tls_reconfiguration)."""
        names = sorted(n for n in new if listener_setting(n) is not None)
        if not names:
            return
        if entity == "":
            raise PerBrokerOnlyError("Cannot update these configs at default cluster level, broker id must be"
                                     f" specified: {', '.join(names)}")
        if entity != str(self.node_id):
            raise InvalidConfigError(f"{', '.join(names)}: the stores are read by the broker that uses them:"
                                     f" send this change to broker {entity} (this is broker {self.node_id})")
        if self.tls is None:
            raise InvalidConfigError(f"{', '.join(names)}: this broker has no TLS listener")
        self.tls.check(new)

    def alter(self, entity: str, change) -> dict[str, str]:
        """Persist change(current) for `entity` (already validated) and apply it here."""
        new = self.store.set_broker_config(entity, change)
        if entity in self._layers:
            self._changed(entity, new)
        return new

    def _changed(self, entity: str, config: dict[str, str]) -> None:
        usable = {}
        for name, value in config.items():
            try:
                if entity == "" and listener_setting(name) is not None:
                    raise PerBrokerOnlyError("a TLS listener's store settings are per broker")
                check_dynamic(name, value)
                usable[name] = value
            except InvalidConfigError as exc:       # written by another tool: skipped, said once
                logger.error("dynamic broker config %s=%s of %s ignored: %s", name, value,
                             f"broker {entity}" if entity else "the cluster default", exc)
        with self._lock:
            if self._layers.get(entity) == usable:
                return
            self._layers[entity] = usable
            layer = {**self._layers[""], **self._layers[str(self.node_id)]}
            self.root.set_dynamic_defaults({k: v for k, v in layer.items()
                                            if k not in REPLICATION_RATES and listener_setting(k) is None})
            if self.rates is not None:
                self.rates.apply({k: v for k, v in layer.items() if k in REPLICATION_RATES})
            if self.tls is not None:
                self.tls.apply(self._layers[str(self.node_id)])
        logger.info("dynamic broker configs of %s now %s", f"broker {entity}" if entity else
                    "the cluster default", usable or "{}")
        for info in list(self.partitions.topics.values()):
            try:
                self.partitions.reconfigure_topic(info)
            except InvalidConfigError as exc:
                logger.error("topic %s keeps its config: %s", info.name, exc)
