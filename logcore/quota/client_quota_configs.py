"""The client quota settings of a broker: where they are kept (`store`: RootQuotaStore for one
broker alone, ZooKeeperQuotaStore for a cluster member), what DescribeClientQuotas and
AlterClientQuotas read and change there, and the broker's ClientQuotas kept in step with them
(at once for a change made here, through the store's watch for one made through another broker).
"""
from __future__ import annotations

from logcore.quota.client_quota_entity import (CLIENT_ID, IP, USER, ClientQuotaEntity, QuotaEntityError,
                                               check_quota_value, parse_quota_config, QUOTA_KEYS,
                                               UNENFORCED_KEYS)
from logcore.quota.client_quotas import ClientQuotas

MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY = 0, 1, 2


class ClientQuotaConfigs:
    def __init__(self, quotas: ClientQuotas, store):
        self.quotas = quotas
        self.store = store
        self._watch = None

    def start(self) -> None:
        """Read (and, where the store has watches, follow) every entity's quotas."""
        self._watch = self.store.watch(self._entity_changed, self._reloaded)

    def attach(self, store) -> None:
        """Keep the quotas in `store` from now on (a cluster member's ZooKeeper)."""
        self.store = store
        self.start()

    def _entity_changed(self, entity: ClientQuotaEntity, config: dict[str, str]) -> None:
        self.quotas.set_entity(entity, parse_quota_config(config))

    def _reloaded(self, configs: dict[ClientQuotaEntity, dict[str, str]]) -> None:
        self.quotas.replace_all({e: parse_quota_config(c) for e, c in configs.items()})

    # ------------------------------------------------------------------ DescribeClientQuotas
    def describe(self, components, strict: bool) -> list[tuple[ClientQuotaEntity, dict[str, float]]]:
        """The entities with quotas that match every filter component ((entity_type,
        match_type, match) triples); `strict`: and name no other entity type."""
        wanted: dict[str, tuple[int, str | None]] = {}
        for kind, match_type, match in components:
            if kind not in (USER, CLIENT_ID, IP):
                raise QuotaEntityError(f"Custom entity type '{kind}' not supported")
            if kind in wanted:
                raise QuotaEntityError(f"Entity type {kind} cannot appear more than once in the filter.")
            if match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY):
                raise QuotaEntityError(f"Unknown match type {match_type}")
            if match_type == MATCH_EXACT and match is None:
                raise QuotaEntityError(f"Component for entity type {kind} has an exact match without a name")
            wanted[kind] = (match_type, match)
        if IP in wanted and (USER in wanted or CLIENT_ID in wanted):
            raise QuotaEntityError("Invalid entity filter component combination, IP filter component should"
                                   " not be used with user or clientId filter component.")
        out = []
        if IP in wanted:
            return out                  # seglog keeps no IP quotas
        for entity, config in sorted(self.store.load().items(), key=lambda ec: ec[0].path):
            quotas = parse_quota_config(config)
            if quotas and _matches(entity, wanted, strict):
                out.append((entity, quotas))
        return out

    # ------------------------------------------------------------------ AlterClientQuotas
    def alter(self, parts, ops, validate_only: bool) -> ClientQuotaEntity:
        """Apply (key, value, remove) `ops` to the entity named by (entity_type, entity_name)
        `parts`; QuotaEntityError for what Kafka refuses. The entity's other settings (a user's
        SCRAM credentials) stay as they are."""
        entity = ClientQuotaEntity.from_parts(parts)
        changes: dict[str, str | None] = {}
        for key, value, remove in ops:
            if key in changes:
                raise QuotaEntityError(f"Duplicate quota key {key} not updating quota for entity {entity}")
            if remove:
                if key not in QUOTA_KEYS:
                    if key in UNENFORCED_KEYS:
                        raise QuotaEntityError(f"{key}: {UNENFORCED_KEYS[key]}")
                    raise QuotaEntityError(f"Invalid configuration key {key}")
                changes[key] = None
            else:
                changes[key] = check_quota_value(key, value)
        if validate_only or not changes:
            return entity

        def change(current: dict[str, str]) -> dict[str, str]:
            for key, value in changes.items():
                if value is None:
                    current.pop(key, None)
                else:
                    current[key] = value
            return current

        new = self.store.alter(entity, change)
        self.quotas.set_entity(entity, parse_quota_config(new))
        return entity


def _matches(entity: ClientQuotaEntity, wanted: dict[str, tuple[int, str | None]], strict: bool) -> bool:
    names = {USER: entity.user, CLIENT_ID: entity.client_id}
    for kind, (match_type, match) in wanted.items():
        name = names[kind]
        if name is False:
            return False
        if match_type == MATCH_EXACT and name != match:
            return False
        if match_type == MATCH_DEFAULT and name is not None:
            return False
    if strict:
        return all(kind in wanted for kind, name in names.items() if name is not False)
    return True
