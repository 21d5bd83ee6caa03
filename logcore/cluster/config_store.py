"""Dynamic configs in ZooKeeper, with Kafka's (ZooKeeper-mode) layout: a topic's overrides in
/config/topics/<t>, a broker's in /config/brokers/<id>, the cluster-wide broker defaults in
/config/brokers/<default>, each {"version":1,"config":{..}}, and every change announced by a
/config/changes/config_change_N node {"version":2,"entity_path":"topics/<t>"} (or
"brokers/<id>", "brokers/<default>"), as Kafka's AdminZkClient writes them. Users' configs (their
SCRAM credentials) are in /config/users/<user, URL-encoded> ("users/<user>").

Brokers watch the znodes themselves (the replica manager watches each topic's; the broker's
DynamicBrokerConfig watches its own and the default): a change reaches every broker at once.
"""
from __future__ import annotations

import time
from typing import Callable

from logcore.cluster.change_notices import config_changes
from logcore.cluster.znode_json import dumps, topic_config_from_json, topic_config_json
from logcore.cluster.zookeeper_store import ZooKeeperStore
from logcore.errors import CorruptRecordError, ZkVersionConflictError

CONFIG_BROKERS = "/config/brokers"
CONFIG_USERS = "/config/users"
CONFIG_GROUPS = "/config/groups"
DEFAULT_ENTITY = "<default>"        # Kafka's name of the cluster-wide broker entity


def user_config_path(user: str) -> str:
    """Kafka's Sanitizer: the user name URL-encoded."""
    from urllib.parse import quote
    return f"{CONFIG_USERS}/{quote(user, safe='')}"


def group_config_path(group: str) -> str:
    """Kafka's /config/groups/<group> (the name URL-encoded, as its Sanitizer does)."""
    from urllib.parse import quote
    return f"{CONFIG_GROUPS}/{quote(group, safe='')}"


def broker_config_path(entity: str) -> str:
    """`entity`: a broker id as a string, or "" for the cluster-wide default."""
    return f"{CONFIG_BROKERS}/{entity or DEFAULT_ENTITY}"


class ZooKeeperConfigStore:
    """Reads and replaces the config znodes of `store`'s cluster."""

    def __init__(self, store: ZooKeeperStore):
        self.store = store

    @property
    def _client(self):
        return self.store.client

    @property
    def _notices(self):
        return config_changes(self.store.client)

    def topic_config(self, name: str) -> dict[str, str]:
        """The topic's overrides as ZooKeeper has them now (TopicNotFoundError when absent)."""
        self._client.sync(f"/config/topics/{name}")
        return self.store.topic_config(name)[0]

    def set_topic_config(self, name: str, change: Callable[[dict[str, str]], dict[str, str]]) -> dict[str, str]:
        """Replace the topic's overrides by change(current), retried when another writer got
        in between; announced in /config/changes. Returns what was written."""
        for _ in range(50):
            current, version = self.store.topic_config(name)
            new = change(current)
            try:
                self.store.set_topic_config(name, new, version)
                return new
            except ZkVersionConflictError:
                time.sleep(0.02)
        raise ZkVersionConflictError(f"/config/topics/{name}: too many concurrent changes")

    def broker_config(self, entity: str) -> dict[str, str]:
        from kazoo.exceptions import NoNodeError
        path = broker_config_path(entity)
        try:
            raw, _ = self._client.get(path)
        except NoNodeError:
            return {}
        return topic_config_from_json(raw or b"{}", path)

    def set_broker_config(self, entity: str, change: Callable[[dict[str, str]], dict[str, str]]) -> dict[str, str]:
        """Replace the entity's dynamic broker configs by change(current) (the znode created when
        absent), announced in /config/changes."""
        path = broker_config_path(entity)
        notice = dumps({"version": 2, "entity_path": f"brokers/{entity or DEFAULT_ENTITY}"})
        return self._notices.replace(path, _config_rewrite(path, change), notice)

    def watch_broker_config(self, entity: str, fn: Callable[[dict[str, str]], object]):
        """fn(configs) now and whenever the entity's znode changes ({} while it is absent)."""
        path = broker_config_path(entity)

        def on_data(raw, stat):
            if stat is None:
                return fn({})
            try:
                return fn(topic_config_from_json(raw or b"{}", path))
            except CorruptRecordError:
                return None             # not JSON: the last good configs stay
        return self._client.DataWatch(path, on_data)

    # ------------------------------------------------------------------ users
    def user_config(self, user: str) -> dict[str, str]:
        from kazoo.exceptions import NoNodeError
        path = user_config_path(user)
        try:
            raw, _ = self._client.get(path)
        except NoNodeError:
            return {}
        try:
            return topic_config_from_json(raw or b"{}", path)
        except CorruptRecordError:
            return {}

    def user_names(self) -> list[str]:
        from urllib.parse import unquote

        from kazoo.exceptions import NoNodeError
        try:
            return sorted(unquote(n) for n in self._client.get_children(CONFIG_USERS))
        except NoNodeError:
            return []

    def set_user_config(self, user: str, change: Callable[[dict[str, str]], dict[str, str]]) -> dict[str, str]:
        """Replace the user's configs by change(current) (the znode created when absent; kept,
        emptied, when nothing is left, as Kafka leaves it), announced in /config/changes."""
        path = user_config_path(user)
        notice = dumps({"version": 2, "entity_path": f"users/{path.rsplit('/', 1)[1]}"})
        return self._notices.replace(path, _config_rewrite(path, change), notice)


    # ------------------------------------------------------------------ groups
    def set_group_config(self, group: str, change: Callable[[dict[str, str]], dict[str, str]]) -> dict[str, str]:
        """Replace the group's configs by change(current) (the znode created when absent, kept
        emptied when nothing is left), announced in /config/changes as "groups/<group>"."""
        path = group_config_path(group)
        notice = dumps({"version": 2, "entity_path": f"groups/{path.rsplit('/', 1)[1]}"})
        return self._notices.replace(path, _config_rewrite(path, change), notice)

    def watch_group_configs(self, fn: Callable[[str, dict[str, str]], object]) -> None:
        """fn(group, configs) for every group's configs now and whenever they change ({} once
        removed): every broker follows them, since any may become a group's coordinator."""
        from urllib.parse import unquote
        watched: set[str] = set()

        def watch(child: str) -> None:
            group, path = unquote(child), f"{CONFIG_GROUPS}/{child}"

            def on_data(raw, stat):
                if stat is None:
                    watched.discard(child)
                    fn(group, {})
                    return False            # the znode is gone: stop watching it
                try:
                    fn(group, topic_config_from_json(raw or b"{}", path))
                except CorruptRecordError:
                    pass                    # not JSON: the last good configs stay
                return None
            self._client.DataWatch(path, on_data)

        def on_children(children):
            for child in children:
                if child not in watched:
                    watched.add(child)
                    watch(child)
        self._client.ensure_path(CONFIG_GROUPS)
        self._client.ChildrenWatch(CONFIG_GROUPS, on_children)


def _config_rewrite(path: str, change: Callable[[dict[str, str]], dict[str, str]]):
    """ChangeNotices.replace's rewrite of a config znode: (change(current), its JSON)."""
    def rewrite(raw: bytes | None):
        new = change({} if raw is None else topic_config_from_json(raw or b"{}", path))
        return new, topic_config_json(new)
    return rewrite
