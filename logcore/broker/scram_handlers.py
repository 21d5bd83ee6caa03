"""DescribeUserScramCredentials (50) and AlterUserScramCredentials (51): users' SCRAM
credentials, kept as Kafka keeps them (logcore.security.scram_credential) in the broker's
dynamic config store: ZooKeeper's /config/users/<user> for a cluster member (read by every
broker at each login), the root's seglog-broker-configs.json for a broker alone.

Kafka's rules: a user named twice in one request is DUPLICATE_RESOURCE; an unknown mechanism
UNSUPPORTED_SASL_MECHANISM; an empty name, iterations outside 4096..16384 or an empty salt or
salted password UNACCEPTABLE_CREDENTIAL; deleting a credential that does not exist, and
describing a user without any, RESOURCE_NOT_FOUND.
"""
from __future__ import annotations

import asyncio
import logging

from logcore.security.scram_credential import (MAX_ITERATIONS, MECHANISM_BY_TYPE, MECHANISMS, MIN_ITERATIONS,
                                               ScramCredential, credentials_of)
from logcore.wire import error_codes as E

logger = logging.getLogger(__name__)


class UserCredentials:
    """The credential lookup over `store()` (the broker's current dynamic config store, which
    becomes ZooKeeper's when the broker joins a cluster)."""

    def __init__(self, store):
        self._store = store

    def scram(self, mechanism: str, user: str) -> ScramCredential | None:
        """The user's credential for `mechanism` (blocking; None when there is none)."""
        try:
            return credentials_of(self._store().user_config(user)).get(mechanism)
        except Exception as exc:   # noqa: BLE001 - a store that cannot be read fails this login only
            logger.warning("reading the SCRAM credentials of %r failed: %s", user, exc)
            return None


class ScramHandlers:
    def __init__(self, store):
        self._store = store

    def handlers(self) -> dict:
        return {50: self.describe_user_scram_credentials, 51: self.alter_user_scram_credentials}

    async def describe_user_scram_credentials(self, req) -> dict:
        return await asyncio.to_thread(self._describe, req.body.users)

    def _describe(self, users) -> dict:
        store = self._store()
        if users is None or len(users) == 0:
            names, explicit = store.user_names(), False
        else:
            names, explicit = [u.name for u in users], True
        results, seen = [], set()
        for name in names:
            if name in seen:
                continue
            seen.add(name)
            if explicit and names.count(name) > 1:
                results.append({"user": name, "error_code": E.DUPLICATE_RESOURCE,
                                "error_message": f"Cannot describe SCRAM credentials for the same user twice in a"
                                                 f" single request: {name}", "credential_infos": []})
                continue
            creds = credentials_of(store.user_config(name))
            if not creds:
                if explicit:
                    results.append({"user": name, "error_code": E.RESOURCE_NOT_FOUND,
                                    "error_message": f"Attempt to describe a user credential that does not exist:"
                                                     f" {name}", "credential_infos": []})
                continue
            infos = [{"mechanism": MECHANISMS[m][1], "iterations": c.iterations} for m, c in sorted(creds.items())]
            results.append({"user": name, "error_code": E.NONE, "error_message": None, "credential_infos": infos})
        return {"throttle_time": 0, "error_code": E.NONE, "error_message": None, "results": results}

    async def alter_user_scram_credentials(self, req) -> dict:
        return await asyncio.to_thread(self._alter, req.body)

    def _alter(self, body) -> dict:
        store = self._store()
        changes: dict[str, list] = {}
        errors: dict[str, tuple[int, str]] = {}
        order: list[str] = []
        pairs = set()
        for kind, items in (("delete", body.deletions), ("upsert", body.upsertions)):
            for item in items:
                name = item.name
                if name not in changes:
                    changes[name] = []
                    order.append(name)
                mechanism = MECHANISM_BY_TYPE.get(int(item.mechanism))
                if (name, int(item.mechanism)) in pairs:
                    errors.setdefault(name, (E.DUPLICATE_RESOURCE, "A user credential cannot be altered twice in"
                                                                 " the same request"))
                pairs.add((name, int(item.mechanism)))
                if not name:
                    errors.setdefault(name, (E.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"))
                elif mechanism is None:
                    errors.setdefault(name, (E.UNSUPPORTED_SASL_MECHANISM, f"Unknown SCRAM mechanism {item.mechanism}"))
                elif kind == "upsert":
                    if not MIN_ITERATIONS <= item.iterations <= MAX_ITERATIONS:
                        errors.setdefault(name, (E.UNACCEPTABLE_CREDENTIAL, f"Iterations {item.iterations} not in"
                                                 f" {MIN_ITERATIONS}..{MAX_ITERATIONS} for {mechanism}"))
                    elif not item.salt or not item.salted_password:
                        errors.setdefault(name, (E.UNACCEPTABLE_CREDENTIAL, "Salt and salted password must not be"
                                                                          " empty"))
                    else:
                        cred = ScramCredential.from_salted(mechanism, bytes(item.salt), bytes(item.salted_password),
                                                           int(item.iterations))
                        changes[name].append((mechanism, cred.to_config()))
                else:
                    changes[name].append((mechanism, None))
        results = []
        for name in order:
            if name in errors:
                code, message = errors[name]
                results.append({"user": name, "error_code": code, "error_message": message})
                continue
            missing = [m for m, value in changes[name] if value is None
                       and m not in store.user_config(name)]
            if missing:
                results.append({"user": name, "error_code": E.RESOURCE_NOT_FOUND,
                                "error_message": f"Attempt to delete a user credential that does not exist:"
                                                 f" {name} {missing[0]}"})
                continue

            def change(current: dict[str, str], todo=changes[name]) -> dict[str, str]:
                new = dict(current)
                for mechanism, value in todo:
                    if value is None:
                        new.pop(mechanism, None)
                    else:
                        new[mechanism] = value
                return new
            try:
                store.set_user_config(name, change)
            except Exception as exc:   # noqa: BLE001 - this user's change fails, the others go on
                results.append({"user": name, "error_code": E.UNKNOWN_SERVER_ERROR, "error_message": str(exc)})
                continue
            logger.info("SCRAM credentials of %r changed (%s)", name,
                        ", ".join(f"{'deleted' if v is None else 'set'} {m}" for m, v in changes[name]))
            results.append({"user": name, "error_code": E.NONE, "error_message": None})
        return {"throttle_time": 0, "results": results}
