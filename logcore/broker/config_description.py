"""DescribeConfigs entries: each config's value in effect, its source and its synonyms, as Kafka
lists them.

A topic config's synonyms, in precedence order: the topic's override (DYNAMIC_TOPIC_CONFIG), then
its broker-level names (log.retention.ms, log.retention.minutes, log.retention.hours) as set for
this broker (DYNAMIC_BROKER_CONFIG), for the cluster (DYNAMIC_DEFAULT_BROKER_CONFIG), in
broker.properties or the root's stored defaults (STATIC_BROKER_CONFIG), and last Kafka's default
(DEFAULT_CONFIG). The entry's value and source are its first synonym's.
"""
from __future__ import annotations

from logcore.broker.config import BROKER_KEYS
from logcore.broker.dynamic_config import REPLICATION_RATES
from logcore.log.config import BROKER_NAMES, CONFIG_KEYS, ConfigKey, ConfigType, LogConfig
from logcore.security.security_config import LISTENER_PREFIX, SECURITY_KEYS
from logcore.security.tls_reconfiguration import SENSITIVE, listener_setting
from logcore.storage.secrets import redact_url
from logcore.tiered.config import RSM_PREFIX, TIERED_KEYS, TieredConfig
from logcore.wire.config_resources import (SOURCE_DEFAULT, SOURCE_DYNAMIC_BROKER, SOURCE_DYNAMIC_DEFAULT,
                                           SOURCE_STATIC_BROKER, SOURCE_TOPIC)

REAUTH = "connections.max.reauth.ms"
KAFKA_CONFIG_TYPE = {ConfigType.BOOLEAN: 1, ConfigType.STRING: 2, ConfigType.INT: 3,
                     ConfigType.LONG: 5, ConfigType.DOUBLE: 6, ConfigType.LIST: 7}


def _broker_names(key: ConfigKey) -> list[tuple[str, int]]:
    """(broker name, factor to the topic unit) of a topic key, most precise first."""
    out = []
    for entry in key.broker_names:
        name, _, factor = entry.partition("*")
        out.append((name, int(factor or 1)))
    return out


def _default_synonym(key: ConfigKey) -> tuple[str, str] | None:
    """Kafka's DEFAULT_CONFIG synonym of a topic key: its broker name that has a default (the
    coarsest unit, log.retention.hours=168, where there are several)."""
    names = _broker_names(key)
    if not names:
        return None
    name, factor = names[-1]
    value = key.default // factor if factor != 1 and key.default >= 0 else key.default
    return name, key.format(value)


class ConfigDescription:
    """Over the log `root` (the static and dynamic defaults) and the broker's `dynamic` configs
    (DynamicBrokerConfig); `node_id` names this broker's own layer."""

    def __init__(self, broker_config, root, dynamic):
        self.config = broker_config
        self.root = root
        self.dynamic = dynamic

    def _layers(self) -> list[tuple[int, dict[str, str]]]:
        """The broker-level layers, highest precedence first."""
        return [(SOURCE_DYNAMIC_BROKER, self.dynamic.layer(str(self.config.node_id))),
                (SOURCE_DYNAMIC_DEFAULT, self.dynamic.layer("")),
                (SOURCE_STATIC_BROKER, self.root.static_defaults())]

    @staticmethod
    def _entry(name, value, source, synonyms, key_type, doc, *, read_only=False, with_synonyms=True,
               with_doc=False) -> dict:
        return {"name": name, "value": value, "read_only": read_only, "config_source": source,
                "is_default": source == SOURCE_DEFAULT, "is_sensitive": False,
                "synonyms": synonyms if with_synonyms else [],
                "config_type": KAFKA_CONFIG_TYPE.get(key_type, 0), "documentation": doc if with_doc else None}

    # ------------------------------------------------------------------ topics
    def topic(self, config: LogConfig, keys: set[str] | None, *, synonyms: bool = True,
              documentation: bool = False) -> list[dict]:
        layers = self._layers()
        out = []
        for name, value in config.to_properties().items():
            if keys is not None and name not in keys:
                continue
            key = CONFIG_KEYS[name]
            found = []
            if name in config.overrides:
                found.append((name, config.overrides[name], SOURCE_TOPIC))
            for source, layer in layers:
                if source == SOURCE_STATIC_BROKER and name in layer:
                    found.append((name, layer[name], source))      # a root default under the topic name
                for bname, _ in _broker_names(key):
                    if bname in layer:
                        found.append((bname, layer[bname], source))
            default = _default_synonym(key)
            if default is not None:
                found.append((default[0], default[1], SOURCE_DEFAULT))
            source = found[0][2] if found else SOURCE_DEFAULT
            syn = [{"name": n, "value": v, "source": s} for n, v, s in found]
            out.append(self._entry(name, value, source, syn, key.type, key.doc,
                                   with_synonyms=synonyms, with_doc=documentation))
        return out

    # ------------------------------------------------------------------ brokers
    def broker(self, keys: set[str] | None, *, synonyms: bool = True, documentation: bool = False) -> list[dict]:
        """This broker's configs: its settings (static, read-only), the log defaults under their
        broker names (dynamic), the tiered-storage settings (static)."""
        out = []
        for name, key in BROKER_KEYS.items():
            if keys is not None and name not in keys:
                continue
            value = key.format(self.config.values[name])
            syn = [{"name": name, "value": value, "source": SOURCE_STATIC_BROKER}]
            out.append(self._entry(name, value, SOURCE_STATIC_BROKER, syn, key.type, key.doc, read_only=True,
                                   with_synonyms=synonyms, with_doc=documentation))
        layers = self._layers()
        for name in sorted(BROKER_NAMES):
            if keys is not None and name not in keys:
                continue
            out.append(self._log_default(name, layers, synonyms, documentation))
        for name, key in REPLICATION_RATES.items():
            if keys is None or name in keys:
                out.append(self._rate(name, key, layers, synonyms, documentation))
        return (out + self._reauth(keys, synonyms, documentation) + self._listener_stores(keys, synonyms, documentation)
                + self._tiered(keys, documentation))

    def _reauth(self, keys: set[str] | None, synonyms: bool, documentation: bool) -> list[dict]:
        """connections.max.reauth.ms (always, as Kafka lists every broker setting) and the
        listener overrides given (`listener.name.<l>.connections.max.reauth.ms`, whose synonym
        is the unprefixed name); static: seglog does not change it at runtime."""
        given = self.config.security.given if self.config.security is not None else {}
        key = SECURITY_KEYS[REAUTH]
        def value(name: str) -> str:
            return key.format(key.parse(given[name]))          # checked at start; as Kafka prints it
        base = [(REAUTH, value(REAUTH), SOURCE_STATIC_BROKER)] if REAUTH in given else []
        base.append((REAUTH, key.format(key.default), SOURCE_DEFAULT))
        overrides = sorted(n for n in given if n.startswith(LISTENER_PREFIX) and n.endswith("." + REAUTH))
        out = []
        for name in [REAUTH, *overrides]:
            if keys is not None and name not in keys:
                continue
            found = base if name == REAUTH else [(name, value(name), SOURCE_STATIC_BROKER), *base]
            syn = [{"name": n, "value": v, "source": s} for n, v, s in found]
            out.append(self._entry(name, found[0][1], found[0][2], syn, key.type, key.doc, read_only=True,
                                   with_synonyms=synonyms, with_doc=documentation))
        return out

    def _listener_stores(self, keys: set[str] | None, synonyms: bool, documentation: bool) -> list[dict]:
        """The TLS listeners' dynamic store settings of this broker; passwords and keys are
        sensitive: named, their value withheld (as Kafka answers)."""
        out = []
        for name, value in sorted(self.dynamic.layer(str(self.config.node_id)).items()):
            found = listener_setting(name)
            if found is None or (keys is not None and name not in keys):
                continue
            secret = found[1] in SENSITIVE
            shown = None if secret else value
            syn = [{"name": name, "value": shown, "source": SOURCE_DYNAMIC_BROKER}]
            entry = self._entry(name, shown, SOURCE_DYNAMIC_BROKER, syn, ConfigType.STRING,
                                SECURITY_KEYS[found[1]].doc, with_synonyms=synonyms, with_doc=documentation)
            entry["is_sensitive"] = secret
            out.append(entry)
        return out

    def _rate(self, name: str, key: ConfigKey, layers, synonyms: bool, documentation: bool) -> dict:
        """A replication throttle's rate: this broker's, the cluster default, or unbounded."""
        found = [(name, layer[name], source) for source, layer in layers
                 if source != SOURCE_STATIC_BROKER and name in layer]
        value, source = (found[0][1], found[0][2]) if found else (key.format(key.default), SOURCE_DEFAULT)
        syn = [{"name": n, "value": v, "source": s} for n, v, s in found]
        return self._entry(name, value, source, syn, key.type, key.doc,
                           with_synonyms=synonyms, with_doc=documentation)

    def broker_default(self, keys: set[str] | None, *, synonyms: bool = True,
                       documentation: bool = False) -> list[dict]:
        """The cluster-wide entity: only what is set dynamically for it (as Kafka answers)."""
        out = []
        for name, value in sorted(self.dynamic.layer("").items()):
            if keys is not None and name not in keys:
                continue
            key = REPLICATION_RATES[name] if name in REPLICATION_RATES else BROKER_NAMES[name][0]
            syn = [{"name": name, "value": value, "source": SOURCE_DYNAMIC_DEFAULT}]
            out.append(self._entry(name, value, SOURCE_DYNAMIC_DEFAULT, syn, key.type, key.doc,
                                   with_synonyms=synonyms, with_doc=documentation))
        return out

    def _log_default(self, name: str, layers, synonyms: bool, documentation: bool) -> dict:
        key, _, rank = BROKER_NAMES[name]
        names = [n for n, _ in _broker_names(key)][rank:]      # this name and the coarser ones
        found = [(n, layer[n], source) for source, layer in layers for n in names if n in layer]
        default = _default_synonym(key)
        if default is not None and default[0] in names:
            found.append((default[0], default[1], SOURCE_DEFAULT))
        own = [f for f in found if f[0] == name]
        value = own[0][1] if own else None
        source = own[0][2] if own else SOURCE_DEFAULT
        syn = [{"name": n, "value": v, "source": s} for n, v, s in found]
        entry_type = ConfigType.LONG if key.type is ConfigType.LONG or name != key.name and \
            BROKER_NAMES[name][1] != 1 else key.type
        return self._entry(name, value, source, syn, entry_type, key.doc,
                           with_synonyms=synonyms, with_doc=documentation)

    def _tiered(self, keys: set[str] | None, documentation: bool) -> list[dict]:
        """The root's tiered-storage settings in effect; the rsm.config.storage.* options other
        than the URL (credentials, endpoints) are not reported."""
        defaults = self.root.static_defaults()
        tiered = TieredConfig.from_props(defaults)
        out = []
        for short, key in TIERED_KEYS.items():
            name = short if key.category == "tiered" else RSM_PREFIX + short
            if keys is not None and name not in keys:
                continue
            source = SOURCE_STATIC_BROKER if name in defaults else SOURCE_DEFAULT
            value = redact_url(key.format(tiered.get(short)))
            out.append(self._entry(name, value, source, [{"name": name, "value": value, "source": source}],
                                   key.type, key.doc, read_only=True, with_doc=documentation))
        return out
