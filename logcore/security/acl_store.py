"""Where the ACLs live: in ZooKeeper for a cluster (Kafka's AclAuthorizer layout), in the log
root's acls.json for one broker alone.

ZooKeeper, as Kafka's AclAuthorizer keeps it:

    /kafka-acl/<Type>/<name>                      the LITERAL patterns' ACLs
    /kafka-acl-extended/prefixed/<Type>/<name>    the PREFIXED patterns' ACLs
        each {"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",
                                   "operation":"Read","host":"*"}]}
    /kafka-acl-changes/acl_changes_N              a LITERAL pattern changed: "TOPIC:<name>"
    /kafka-acl-extended-changes/acl_changes_N     a PREFIXED one: {"version":1,"resourceType":"TOPIC",
                                                  "name":..,"patternType":"PREFIXED"}

(<Type>: Topic, Group, Cluster, TransactionalId, DelegationToken.) A pattern's znode is replaced
conditionally on its version with its change notification in the same transaction, and deleted
when its last ACL goes. Every broker watches the change folders and re-reads the pattern each
new notification names; notifications older than CHANGE_EXPIRATION_MS are removed, as Kafka
does. The stores take the ZooKeeper client duck-typed (kazoo), so that this package does not
depend on logcore.cluster.
"""
from __future__ import annotations

import json
import logging
import threading
import time
from typing import Callable

from logcore.errors import InvalidConfigError, ZkVersionConflictError
from logcore.security.acl import AccessControlEntry, AclError, PatternType, ResourcePattern, ResourceType

logger = logging.getLogger(__name__)

Acls = dict[ResourcePattern, frozenset[AccessControlEntry]]
Change = Callable[[frozenset[AccessControlEntry]], frozenset[AccessControlEntry]]

LITERAL_ROOT = "/kafka-acl"
PREFIXED_ROOT = "/kafka-acl-extended/prefixed"
LITERAL_CHANGES = "/kafka-acl-changes"
EXTENDED_CHANGES = "/kafka-acl-extended-changes"
CHANGE_PREFIX = "acl_changes_"
CHANGE_EXPIRATION_MS = 15 * 60_000
ACLS_FILE = "acls.json"          # one broker alone: in its log root, beside its dynamic configs

_CAMEL_TYPES = {t.camel: t for t in ResourceType if t not in (ResourceType.ANY, ResourceType.UNKNOWN)}


def acls_json(entries) -> bytes:
    return json.dumps({"version": 1, "acls": [e.to_json() for e in sorted(entries)]},
                      separators=(",", ":")).encode()


def acls_from_json(raw: bytes, where: str) -> frozenset[AccessControlEntry]:
    try:
        doc = json.loads(raw or b'{"acls":[]}')
        return frozenset(AccessControlEntry.from_json(a) for a in doc.get("acls", ()))
    except (ValueError, KeyError, TypeError, AclError) as exc:
        raise InvalidConfigError(f"{where}: not ACLs as Kafka writes them: {exc}") from None


def pattern_path(pattern: ResourcePattern) -> str:
    root = LITERAL_ROOT if pattern.pattern_type == PatternType.LITERAL else PREFIXED_ROOT
    return f"{root}/{pattern.resource_type.camel}/{pattern.name}"


def change_notice(pattern: ResourcePattern) -> tuple[str, bytes]:
    """(folder, data) of the change notification announcing a change of `pattern`."""
    if pattern.pattern_type == PatternType.LITERAL:
        return LITERAL_CHANGES, f"{pattern.resource_type.name}:{pattern.name}".encode()
    return EXTENDED_CHANGES, json.dumps({"version": 1, "resourceType": pattern.resource_type.name,
                                         "name": pattern.name, "patternType": pattern.pattern_type.name},
                                        separators=(",", ":")).encode()


def pattern_of_notice(folder: str, raw: bytes) -> ResourcePattern:
    if folder == LITERAL_CHANGES:
        kind, _, name = raw.decode().partition(":")
        return ResourcePattern(ResourceType.parse(kind), name, PatternType.LITERAL)
    doc = json.loads(raw)
    return ResourcePattern(ResourceType.parse(doc["resourceType"]), doc["name"],
                           PatternType.parse(doc["patternType"]))


class ZooKeeperAclStore:
    """A cluster's ACLs in ZooKeeper (`client`: a started kazoo client)."""

    def __init__(self, client):
        self.client = client
        for path in (LITERAL_ROOT, PREFIXED_ROOT, LITERAL_CHANGES, EXTENDED_CHANGES):
            client.ensure_path(path)
        self._seen: dict[str, set[str]] = {LITERAL_CHANGES: set(), EXTENDED_CHANGES: set()}
        self._lock = threading.Lock()

    def load(self) -> Acls:
        out: Acls = {}
        for root, pattern_type in ((LITERAL_ROOT, PatternType.LITERAL), (PREFIXED_ROOT, PatternType.PREFIXED)):
            for camel in self.client.get_children(root):
                kind = _CAMEL_TYPES.get(camel)
                if kind is None:
                    continue        # a folder of no resource type Kafka knows
                for name in self.client.get_children(f"{root}/{camel}"):
                    pattern = ResourcePattern(kind, name, pattern_type)
                    entries = self.read(pattern)
                    if entries:
                        out[pattern] = entries
        return out

    def read(self, pattern: ResourcePattern) -> frozenset[AccessControlEntry]:
        from kazoo.exceptions import NoNodeError
        path = pattern_path(pattern)
        try:
            raw, _ = self.client.get(path)
        except NoNodeError:
            return frozenset()
        return acls_from_json(raw, path)

    def update(self, pattern: ResourcePattern, change: Change) -> frozenset[AccessControlEntry]:
        """Replace the pattern's ACLs by change(current), conditional on the znode's version
        (retried when another broker got in between), with its change notification."""
        from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
        path = pattern_path(pattern)
        folder, notice = change_notice(pattern)
        for _ in range(50):
            try:
                raw, stat = self.client.get(path)
                current, version = acls_from_json(raw, path), stat.version
            except NoNodeError:
                current, version = frozenset(), None
            new = frozenset(change(current))
            if new == current:
                return new
            t = self.client.transaction()
            if version is None:
                self.client.ensure_path(path.rsplit("/", 1)[0])
                t.create(path, acls_json(new))
            elif new:
                t.set_data(path, acls_json(new), version=version)
            else:
                t.delete(path, version=version)
            t.create(f"{folder}/{CHANGE_PREFIX}", notice, sequence=True)
            results = t.commit()
            if isinstance(results[0], (BadVersionError, NodeExistsError, NoNodeError)):
                time.sleep(0.02)
                continue
            for r in results:
                if isinstance(r, Exception):
                    raise r
            return new
        raise ZkVersionConflictError(f"{path}: too many concurrent ACL changes")

    def watch(self, on_change: Callable[[ResourcePattern, frozenset[AccessControlEntry]], None]) -> None:
        """on_change(pattern, its ACLs now) for each change notification that appears from now
        on (the caller loads everything first)."""
        for folder in (LITERAL_CHANGES, EXTENDED_CHANGES):
            self._seen[folder] = set(self.client.get_children(folder))

            def on_children(children, folder=folder):
                self._notified(folder, children, on_change)
            self.client.ChildrenWatch(folder, on_children)

    def _notified(self, folder: str, children, on_change) -> None:
        from kazoo.exceptions import NoNodeError
        with self._lock:
            fresh = sorted(set(children) - self._seen[folder])
            self._seen[folder] = set(children)
        now_ms = time.time() * 1000
        for child in fresh:
            path = f"{folder}/{child}"
            try:
                raw, stat = self.client.get(path)
                pattern = pattern_of_notice(folder, raw)
                on_change(pattern, self.read(pattern))
            except NoNodeError:
                continue
            except (ValueError, KeyError, AclError, InvalidConfigError) as exc:
                logger.warning("ACL change notification %s ignored: %s", path, exc)
                continue
            if now_ms - stat.ctime > CHANGE_EXPIRATION_MS:
                self._purge(path)
        for child in sorted(set(children) - set(fresh)):
            self._purge_if_old(f"{folder}/{child}", now_ms)

    def _purge_if_old(self, path: str, now_ms: float) -> None:
        from kazoo.exceptions import NoNodeError
        try:
            stat = self.client.exists(path)
        except NoNodeError:
            return
        if stat is not None and now_ms - stat.ctime > CHANGE_EXPIRATION_MS:
            self._purge(path)

    def _purge(self, path: str) -> None:
        from kazoo.exceptions import NoNodeError
        try:
            self.client.delete(path)
        except NoNodeError:
            pass


class RootAclStore:
    """One broker alone: its ACLs in its log root's acls.json
    ({"version":1,"resources":[{"resourceType":"Topic","name":..,"patternType":"Literal","acls":[..]}]});
    the broker is the only writer, so there is nothing to watch."""

    def __init__(self, storage):
        self._storage = storage
        self._lock = threading.Lock()

    def load(self) -> Acls:
        if not self._storage.exists(ACLS_FILE):
            return {}
        where = f"{self._storage.url}/{ACLS_FILE}"
        try:
            doc = json.loads(self._storage.read(ACLS_FILE))
            out: Acls = {}
            for r in doc.get("resources", ()):
                pattern = ResourcePattern(ResourceType.parse(r["resourceType"]), r["name"],
                                          PatternType.parse(r["patternType"]))
                entries = frozenset(AccessControlEntry.from_json(a) for a in r["acls"])
                if entries:
                    out[pattern] = entries
            return out
        except (ValueError, KeyError, TypeError, AclError) as exc:
            raise InvalidConfigError(f"{where}: not seglog's ACL file: {exc}") from None

    def read(self, pattern: ResourcePattern) -> frozenset[AccessControlEntry]:
        return self.load().get(pattern, frozenset())

    def update(self, pattern: ResourcePattern, change: Change) -> frozenset[AccessControlEntry]:
        with self._lock:
            acls = self.load()
            new = frozenset(change(acls.get(pattern, frozenset())))
            if new:
                acls[pattern] = new
            else:
                acls.pop(pattern, None)
            doc = {"version": 1, "resources": [
                {"resourceType": p.resource_type.camel, "name": p.name, "patternType": p.pattern_type.camel,
                 "acls": [e.to_json() for e in sorted(entries)]} for p, entries in sorted(acls.items())]}
            self._storage.write_atomic(ACLS_FILE, json.dumps(doc, indent=1).encode())
            return new

    def watch(self, on_change) -> None:
        """Nothing to watch: every change goes through this broker's update."""
