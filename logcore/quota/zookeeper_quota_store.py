"""Client quotas in ZooKeeper, as Kafka (ZooKeeper mode) keeps them: each entity's settings in
/config/users/<user>, /config/users/<user>/clients/<client-id>, /config/clients/<client-id>
("<default>" for a default part; names sanitized), {"version":1,"config":{"producer_byte_rate":
"1024"}}, and every change announced by /config/changes/config_change_N {"version":2,
"entity_path":"users/<user>/clients/<client-id>"}.

The user znode is shared: the SCRAM credentials of that user are kept in the same config map
(key "SCRAM-SHA-256", ...). A write reads the znode, changes only what it means to and writes it
back at the version it read (retried when another writer got in between).

Every broker watches /config/changes and reloads the entities the new notifications name.
"""
from __future__ import annotations

import logging
import time
from typing import Callable

from logcore.cluster.znode_json import dumps, loads, topic_config_json
from logcore.cluster.znode_paths import CONFIG_CHANGE_PREFIX, CONFIG_CHANGES
from logcore.errors import CorruptRecordError, ZkVersionConflictError
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
        self._seen = -1             # the highest config change notification handled
        for path in (CONFIG_USERS, CONFIG_CLIENTS, CONFIG_CHANGES):
            client.ensure_path(path)

    def _read(self, path: str) -> tuple[dict[str, str], int | None]:
        from kazoo.exceptions import NoNodeError
        try:
            raw, stat = self.client.get(path)
        except NoNodeError:
            return {}, None
        if not raw:
            return {}, stat.version          # a parent created for its clients: no config
        doc = loads(raw, path)
        return {k: str(v) for k, v in (doc.get("config") or {}).items()}, stat.version

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
        from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
        path = entity_znode(entity)
        notice = dumps({"version": 2, "entity_path": entity.path})
        for _ in range(50):
            current, version = self._read(path)
            new = change(dict(current))
            if version is None:
                self.client.ensure_path(path.rpartition("/")[0])
            t = self.client.transaction()
            if version is None:
                t.create(path, topic_config_json(new))
            else:
                t.set_data(path, topic_config_json(new), version=version)
            t.create(CONFIG_CHANGE_PREFIX, notice, sequence=True)
            results = t.commit()
            if isinstance(results[0], (BadVersionError, NodeExistsError, NoNodeError)):
                time.sleep(0.02)
                continue
            for r in results:
                if isinstance(r, Exception):
                    raise r
            return new
        raise ZkVersionConflictError(f"{path}: too many concurrent changes")

    def watch(self, on_entity: Callable[[ClientQuotaEntity, dict[str, str]], object],
              on_all: Callable[[dict[ClientQuotaEntity, dict[str, str]]], object]):
        """on_all(every entity) now; then on_entity(entity, config) for each entity a new
        config change notification names (every entity again when one cannot be read)."""
        def numbered(name: str) -> int:
            try:
                return int(name.rpartition("_")[2])
            except ValueError:
                return -1

        def on_children(children):
            numbers = sorted((numbered(c), c) for c in children)
            fresh = [(n, c) for n, c in numbers if n > self._seen]
            if not fresh:
                return
            self._seen = fresh[-1][0]
            for _, name in fresh:
                try:
                    raw, _ = self.client.get(f"{CONFIG_CHANGES}/{name}")
                    entity_path = loads(raw, name).get("entity_path", "")
                except Exception:   # noqa: BLE001 - gone or not JSON: read everything again
                    on_all(self.load())
                    return
                if not entity_path.startswith(("users/", "clients/")):
                    continue
                try:
                    entity = ClientQuotaEntity.from_path(entity_path)
                    config, _ = self._read(entity_znode(entity))
                except (QuotaEntityError, CorruptRecordError) as exc:
                    logger.error("config change %s (%s) ignored: %s", name, entity_path, exc)
                    continue
                on_entity(entity, config)

        # the notifications so far are in what load() reads; the watch handles the later ones
        self._seen = max((numbered(c) for c in self._children(CONFIG_CHANGES)), default=-1)
        on_all(self.load())
        return self.client.ChildrenWatch(CONFIG_CHANGES, on_children)
