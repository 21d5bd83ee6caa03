"""A single broker's client quotas, kept in its log root beside the dynamic broker configs:
`seglog-client-quotas.json`, {"version":1,"entities":{"<entity path>":{"<key>":"<value>"}}}
(the entity paths and values as Kafka writes them below /config in ZooKeeper)."""
from __future__ import annotations

import json
import threading
from typing import Callable

from logcore.errors import InvalidConfigError
from logcore.quota.client_quota_entity import ClientQuotaEntity

QUOTAS_FILE = "seglog-client-quotas.json"


class RootQuotaStore:
    def __init__(self, storage):
        self._storage = storage
        self._lock = threading.Lock()

    def _doc(self) -> dict:
        if not self._storage.exists(QUOTAS_FILE):
            return {"version": 1, "entities": {}}
        try:
            doc = json.loads(self._storage.read(QUOTAS_FILE))
        except ValueError as exc:
            raise InvalidConfigError(f"{self._storage.url}/{QUOTAS_FILE} is not valid JSON: {exc}") from None
        doc.setdefault("entities", {})
        return doc

    def load(self) -> dict[ClientQuotaEntity, dict[str, str]]:
        """Every entity's stored config."""
        out = {}
        for path, config in self._doc()["entities"].items():
            out[ClientQuotaEntity.from_path(path)] = {k: str(v) for k, v in config.items()}
        return out

    def alter(self, entity: ClientQuotaEntity, change: Callable[[dict[str, str]], dict[str, str]]) -> dict[str, str]:
        """Replace the entity's config by change(current); returns what was written."""
        with self._lock:
            doc = self._doc()
            new = change(dict(doc["entities"].get(entity.path, {})))
            if new:
                doc["entities"][entity.path] = new
            else:
                doc["entities"].pop(entity.path, None)
            self._storage.write_atomic(QUOTAS_FILE, json.dumps(doc, indent=1, sort_keys=True).encode())
            return new

    def watch(self, on_entity, on_all) -> None:
        on_all(self.load())       # no other writer: read once, then each alter applies
