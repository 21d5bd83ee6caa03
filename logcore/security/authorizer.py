"""Who may do what: the broker's authorizer, chosen by `authorizer.class.name` as in Kafka.

Unset (Kafka's default), the broker authorizes nothing: every request is allowed and the ACL APIs
answer SECURITY_DISABLED, as Kafka does without an authorizer (`NoAuthorizer`). Set to Kafka's
ZooKeeper-based `kafka.security.authorizer.AclAuthorizer`, the broker checks ACLs
(`AclAuthorizer`) with Kafka's semantics:

- a principal in `super.users` (User:admin;User:broker) may do everything;
- a resource no ACL names (no LITERAL, wildcard or PREFIXED pattern of any principal covers it)
  is open to everyone if `allow.everyone.if.no.acl.found`, else to nobody;
- otherwise a DENY of the operation (or of ALL) for the principal (or User:*) from the client's
  host (or *) wins; else an ALLOW of it, of ALL, or of an operation that implies it (READ, WRITE,
  DELETE or ALTER imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS) grants it.

The ACLs are cached in memory: loaded from the store at start and kept current by its change
notifications (acl_store.py). Handlers call `allows(request, operation, resource type, name)`;
the request carries `principal` and `client_host`.
"""
from __future__ import annotations

import logging
import threading

from logcore.errors import InvalidConfigError
from logcore.security.acl import (CLUSTER_NAME, SUPPORTED_OPERATIONS, WILDCARD, WILDCARD_PRINCIPAL,
                                  AccessControlEntry, AclBinding, AclBindingFilter, AclError, AclOperation,
                                  AclPermissionType, IMPLIED_BY, PatternType, ResourcePattern, ResourceType,
                                  check_binding, check_principal)

logger = logging.getLogger(__name__)

ACL_AUTHORIZER = "kafka.security.authorizer.AclAuthorizer"
ANONYMOUS = "User:ANONYMOUS"
_OTHER_AUTHORIZERS = {
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer":
        "it is KRaft's, and seglog keeps its metadata in ZooKeeper; use " + ACL_AUTHORIZER,
    "kafka.security.auth.SimpleAclAuthorizer":
        "it is the name Kafka removed in 3.0; use " + ACL_AUTHORIZER + " (the same ACLs in ZooKeeper)",
}

Op, Allow, Deny = AclOperation, AclPermissionType.ALLOW, AclPermissionType.DENY


class SecurityDisabledError(Exception):
    """The ACL APIs without an authorizer (Kafka's SECURITY_DISABLED)."""


def check_authorizer_class(name: str) -> str:
    """`authorizer.class.name` as accepted: empty (no authorization) or Kafka's AclAuthorizer."""
    if name in ("", ACL_AUTHORIZER):
        return name
    why = _OTHER_AUTHORIZERS.get(name, f"seglog has one authorizer, Kafka's {ACL_AUTHORIZER}")
    raise InvalidConfigError(f"authorizer.class.name={name} is not supported: {why}")


def parse_super_users(text: str) -> frozenset[str]:
    """`super.users`: principals separated by ';' (Kafka's separator: a principal's name may
    hold commas, as an X.500 name does)."""
    out = set()
    for part in text.split(";"):
        part = part.strip()
        if part:
            try:
                out.add(check_principal(part))
            except AclError as exc:
                raise InvalidConfigError(f"super.users: {exc}") from None
    return frozenset(out)


class NoAuthorizer:
    """authorizer.class.name unset: no authorization (Kafka's default)."""

    enabled = False

    def start(self) -> None:
        pass

    def allows(self, request, operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
        return True

    def allows_any(self, request, operation: AclOperation, resource_type: ResourceType) -> bool:
        return True

    def authorized_operations(self, request, resource_type: ResourceType, name: str) -> int:
        return operations_bits(SUPPORTED_OPERATIONS[resource_type])

    def create(self, bindings):
        raise SecurityDisabledError("No Authorizer is configured.")

    describe = delete = create


class AclAuthorizer:
    """Kafka's AclAuthorizer over `store` (acl_store.ZooKeeperAclStore or RootAclStore)."""

    enabled = True

    def __init__(self, store, super_users: frozenset[str] = frozenset(), allow_if_no_acl: bool = False):
        self.store = store
        self.super_users = super_users
        self.allow_if_no_acl = allow_if_no_acl
        # pattern -> its ACLs; replaced whole on each change (readers never see a half update)
        self._acls: dict[ResourcePattern, frozenset[AccessControlEntry]] = {}
        self._write_lock = threading.Lock()

    def start(self) -> None:
        """Load every ACL, then follow the store's change notifications."""
        self._acls = dict(self.store.load())
        self.store.watch(self._changed)
        logger.info("authorizer %s: %d ACL(s) on %d resource pattern(s); super.users=%s",
                    ACL_AUTHORIZER, sum(len(v) for v in self._acls.values()), len(self._acls),
                    ";".join(sorted(self.super_users)) or "(none)")

    def _changed(self, pattern: ResourcePattern, entries: frozenset[AccessControlEntry]) -> None:
        with self._write_lock:
            acls = dict(self._acls)
            if entries:
                acls[pattern] = entries
            else:
                acls.pop(pattern, None)
            self._acls = acls

    # ------------------------------------------------------------------ checks
    def allows(self, request, operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
        """Whether the request's principal, from its host, may do `operation` on the resource."""
        return self.authorize(request.principal, request.client_host, operation, resource_type, name)

    def authorize(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType,
                  name: str) -> bool:
        if principal in self.super_users:
            return True
        entries = self.matching(resource_type, name)
        if not entries:
            return self.allow_if_no_acl
        mine = [e for e in entries if e.principal in (principal, WILDCARD_PRINCIPAL) and e.host in (host, WILDCARD)]
        if any(e.permission == Deny and e.operation in (operation, Op.ALL) for e in mine):
            return False
        granted = IMPLIED_BY.get(operation, frozenset((operation,)))
        return any(e.permission == Allow and (e.operation == Op.ALL or e.operation in granted) for e in mine)

    def matching(self, resource_type: ResourceType, name: str) -> list[AccessControlEntry]:
        """Every ACL whose pattern covers the resource: its literal name, the wildcard, and the
        prefixed patterns of each prefix of its name."""
        acls = self._acls
        out: list[AccessControlEntry] = []
        for key in (ResourcePattern(resource_type, name), ResourcePattern(resource_type, WILDCARD)):
            out.extend(acls.get(key, ()))
        for end in range(1, len(name) + 1):
            out.extend(acls.get(ResourcePattern(resource_type, name[:end], PatternType.PREFIXED), ()))
        return out

    def allows_any(self, request, operation: AclOperation, resource_type: ResourceType) -> bool:
        """Whether the principal may do `operation` on some resource of the type (Kafka's
        authorizeByResourceType: an idempotent producer needs WRITE on any topic): an ALLOW
        of it for the principal whose pattern's own resource is not denied."""
        principal, host = request.principal, request.client_host
        if principal in self.super_users:
            return True
        acls = self._acls
        if self.allow_if_no_acl and not any(p.resource_type == resource_type for p in acls):
            return True
        for pattern, entries in acls.items():
            if pattern.resource_type != resource_type:
                continue
            for e in entries:
                if e.permission == Allow and e.operation in (operation, Op.ALL) \
                        and e.principal in (principal, WILDCARD_PRINCIPAL) and e.host in (host, WILDCARD) \
                        and self.authorize(principal, host, operation, resource_type, pattern.name):
                    return True
        return False

    def authorized_operations(self, request, resource_type: ResourceType, name: str) -> int:
        """The bitfield of Metadata's and DescribeCluster's authorized operations: bit `code` set
        for each of the type's operations the principal may do on the resource."""
        return operations_bits(op for op in SUPPORTED_OPERATIONS[resource_type]
                               if self.allows(request, op, resource_type, name))

    # ------------------------------------------------------------------ the ACL APIs
    def create(self, bindings: list[AclBinding]) -> list[str | None]:
        """Store each binding; per binding None or why it was refused (blocking)."""
        out: list[str | None] = []
        for binding in bindings:
            try:
                check_binding(binding)
            except AclError as exc:
                out.append(str(exc))
                continue
            self._changed(binding.pattern, self.store.update(binding.pattern, lambda cur, e=binding.entry: cur | {e}))
            out.append(None)
        return out

    def describe(self, flt: AclBindingFilter) -> list[AclBinding]:
        flt.check()
        return sorted(AclBinding(p, e) for p, entries in self._acls.items() for e in entries
                      if flt.matches(AclBinding(p, e)))

    def delete(self, filters: list[AclBindingFilter]) -> list[list[AclBinding] | str]:
        """Per filter the bindings it deleted, or why the filter was refused (blocking)."""
        out: list[list[AclBinding] | str] = []
        for flt in filters:
            try:
                flt.check()
            except AclError as exc:
                out.append(str(exc))
                continue
            doomed = {}
            for pattern in list(self.store.load()):
                if flt.resource_type not in (ResourceType.ANY, pattern.resource_type):
                    continue
                removed: list[AclBinding] = []

                def drop(current, pattern=pattern, removed=removed):
                    removed[:] = [AclBinding(pattern, e) for e in current if flt.matches(AclBinding(pattern, e))]
                    return current - {b.entry for b in removed}
                self._changed(pattern, self.store.update(pattern, drop))
                doomed[pattern] = removed
            out.append(sorted(b for bindings in doomed.values() for b in bindings))
        return out


def operations_bits(operations) -> int:
    bits = 0
    for op in operations:
        bits |= 1 << int(op)
    return bits


def cluster_resource() -> tuple[ResourceType, str]:
    return ResourceType.CLUSTER, CLUSTER_NAME


def authorizer_for(class_name: str, store_factory, super_users: str, allow_if_no_acl: bool):
    """The authorizer `authorizer.class.name` names; `store_factory()` builds its ACL store
    (called only when there is one)."""
    if not check_authorizer_class(class_name):
        return NoAuthorizer()
    return AclAuthorizer(store_factory(), parse_super_users(super_users), allow_if_no_acl)
