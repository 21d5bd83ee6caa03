"""Client quotas in ZooKeeper, as Kafka (ZooKeeper mode) keeps them: each entity's settings in
/config/users/<user>, /config/users/<user>/clients/<client-id>, /config/clients/<client-id>
("<default>" for a default part; names sanitized), {"version":1,"config":{"producer_byte_rate":
"1024"}}, and every change announced by /config/changes/config_change_N {"version":2,
"entity_path":"users/<user>/clients/<client-id>"}.

The user znode is shared: the SCRAM credentials of that user are kept in the same config map
(key "SCRAM-SHA-256", ...). A write reads the znode, changes only what it means to and writes it
back at the version it read (retried when another writer got in between).

Every broker watches /config/changes (logcore.cluster.change_notices) and reloads the entities
the new notifications name.
"""
from __future__ import annotations

import logging
from typing import Callable

from logcore.cluster.change_notices import config_changes
from logcore.cluster.znode_json import dumps, loads, topic_config_json
from logcore.cluster.znode_paths import CONFIG_CHANGES
from logcore.errors import CorruptRecordError
from logcore.quota.client_quota_entity import ClientQuotaEntity, QuotaEntityError

logger = logging.getLogger(__name__)

CONFIG_USERS = "/config/users"
CONFIG_CLIENTS = "/config/clients"


def entity_znode(entity: ClientQuotaEntity) -> str:
    return f"/config/{entity.path}"


class ZooKeeperQuotaStore:
    """Over a kazoo client."""

    def __init__(self, client):
        self.client = client
        self._notices = config_changes(client)
        for path in (CONFIG_USERS, CONFIG_CLIENTS, CONFIG_CHANGES):
            client.ensure_path(path)

    def _read(self, path: str) -> tuple[dict[str, str], int | None]:
        from kazoo.exceptions import NoNodeError
        try:
            raw, stat = self.client.get(path)
        except NoNodeError:
            return {}, None
        return _config_of(raw, path), stat.version

    def _children(self, path: str) -> list[str]:
        from kazoo.exceptions import NoNodeError
        try:
            return self.client.get_children(path)
        except NoNodeError:
            return []

    def load(self) -> dict[ClientQuotaEntity, dict[str, str]]:
        out = {}
        for user in self._children(CONFIG_USERS):
            self._load_one(out, f"users/{user}")
            for client in self._children(f"{CONFIG_USERS}/{user}/clients"):
                self._load_one(out, f"users/{user}/clients/{client}")
        for client in self._children(CONFIG_CLIENTS):
            self._load_one(out, f"clients/{client}")
        return out

    def _load_one(self, out: dict, path: str) -> None:
        try:
            entity = ClientQuotaEntity.from_path(path)
            config, _ = self._read(f"/config/{path}")
        except (QuotaEntityError, CorruptRecordError) as exc:
            logger.error("client quotas of /config/%s ignored: %s", path, exc)
            return
        if config:
            out[entity] = config

    def alter(self, entity: ClientQuotaEntity, change: Callable[[dict[str, str]], dict[str, str]]) -> dict[str, str]:
        """Replace the entity's config map by change(current), the other keys of the znode
        (SCRAM credentials) being what change() keeps; announced in /config/changes."""
        path = entity_znode(entity)

        def rewrite(raw: bytes | None):
            new = change(_config_of(raw, path))
            return new, topic_config_json(new)
        return self._notices.replace(path, rewrite, dumps({"version": 2, "entity_path": entity.path}))

    def watch(self, on_entity: Callable[[ClientQuotaEntity, dict[str, str]], object],
              on_all: Callable[[dict[ClientQuotaEntity, dict[str, str]]], object]):
        """on_all(every entity) now; then on_entity(entity, config) for each entity a new
        config change notification names (every entity again when one cannot be read)."""
        def on_notice(name: str, raw: bytes | None):
            try:
                entity_path = loads(raw, name).get("entity_path", "")
            except Exception:   # noqa: BLE001 - gone (raw None) or not JSON: read everything again
                on_all(self.load())
                return
            if not entity_path.startswith(("users/", "clients/")):
                return
            try:
                entity = ClientQuotaEntity.from_path(entity_path)
                config, _ = self._read(entity_znode(entity))
            except (QuotaEntityError, CorruptRecordError) as exc:
                logger.error("config change %s (%s) ignored: %s", name, entity_path, exc)
                return
            on_entity(entity, config)

        # the notifications so far are in what load() reads; the watch handles the later ones
        self._notices.mark_handled()
        on_all(self.load())
        return self._notices.watch(on_notice)


def _config_of(raw: bytes | None, path: str) -> dict[str, str]:
    """The config map of an entity's znode ({} when absent, or a parent created for its
    clients with no data)."""
    if not raw:
        return {}
    doc = loads(raw, path)
    return {k: str(v) for k, v in (doc.get("config") or {}).items()}
