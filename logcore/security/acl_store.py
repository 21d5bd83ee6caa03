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
new notification names; notifications older than 15 minutes are removed, as Kafka does (both
through logcore.cluster.change_notices). The stores take the ZooKeeper client duck-typed (kazoo).
"""
from __future__ import annotations

import json
import logging
import threading
from typing import Callable

from logcore.cluster.change_notices import UNCHANGED, ChangeNotices
from logcore.errors import InvalidConfigError
from logcore.security.acl import AccessControlEntry, AclError, PatternType, ResourcePattern, ResourceType

logger = logging.getLogger(__name__)

Acls = dict[ResourcePattern, frozenset[AccessControlEntry]]
Change = Callable[[frozenset[AccessControlEntry]], frozenset[AccessControlEntry]]

LITERAL_ROOT = "/kafka-acl"
PREFIXED_ROOT = "/kafka-acl-extended/prefixed"
LITERAL_CHANGES = "/kafka-acl-changes"
EXTENDED_CHANGES = "/kafka-acl-extended-changes"
CHANGE_PREFIX = "acl_changes_"
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
        self._notices = {folder: ChangeNotices(client, folder, CHANGE_PREFIX)
                         for folder in (LITERAL_CHANGES, EXTENDED_CHANGES)}

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
        path = pattern_path(pattern)
        folder, notice = change_notice(pattern)

        def rewrite(raw: bytes | None):
            current = frozenset() if raw is None else acls_from_json(raw, path)
            new = frozenset(change(current))
            if new == current:
                return new, UNCHANGED
            return new, (acls_json(new) if new else None)      # None: the last ACL went, so does the znode
        return self._notices[folder].replace(path, rewrite, notice)

    def watch(self, on_change: Callable[[ResourcePattern, frozenset[AccessControlEntry]], None]) -> None:
        """on_change(pattern, its ACLs now) for each change notification that appears from now
        on (the caller loads everything first)."""
        for folder, notices in self._notices.items():
            def on_notice(name: str, raw: bytes | None, folder=folder):
                if raw is None:
                    return          # gone before it was read (purged by another broker)
                try:
                    pattern = pattern_of_notice(folder, raw)
                    on_change(pattern, self.read(pattern))
                except (ValueError, KeyError, AclError, InvalidConfigError) as exc:
                    logger.warning("ACL change notification %s/%s ignored: %s", folder, name, exc)
            notices.mark_handled()
            notices.watch(on_notice)


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
