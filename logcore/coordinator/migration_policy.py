"""KIP-848's online migration policy, Kafka's `group.consumer.migration.policy`: whether a live
classic group turns into a consumer group when a consumer-protocol member joins it (upgrade),
and whether a consumer group whose last consumer-protocol member left, with classic members
left in it, turns back into a classic group (downgrade)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MigrationPolicy:
    name: str
    upgrade: bool
    downgrade: bool


DISABLED = MigrationPolicy("disabled", upgrade=False, downgrade=False)
UPGRADE = MigrationPolicy("upgrade", upgrade=True, downgrade=False)
DOWNGRADE = MigrationPolicy("downgrade", upgrade=False, downgrade=True)
BIDIRECTIONAL = MigrationPolicy("bidirectional", upgrade=True, downgrade=True)     # Kafka 4's default
POLICIES = {p.name: p for p in (DISABLED, UPGRADE, DOWNGRADE, BIDIRECTIONAL)}


def migration_policy(name: str) -> MigrationPolicy:
    """The policy of this name (case-insensitive, as Kafka); ValueError for another."""
    policy = POLICIES.get(name.strip().lower())
    if policy is None:
        raise ValueError(f"unknown group.consumer.migration.policy {name!r}: one of {', '.join(POLICIES)}")
    return policy
