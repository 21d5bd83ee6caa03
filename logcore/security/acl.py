"""Kafka's ACL model: who (principal, host) may do what (operation) to which resources (a
resource pattern), allowed or denied.

The codes are Kafka's (the wire values of CreateAcls, DescribeAcls, DeleteAcls and the bits of the
authorized-operations fields); the names are Kafka's too, in both of its spellings: the enum
names the admin API and kafka-acls print (TOPIC, READ, ALLOW, LITERAL) and the ones its
AclAuthorizer writes into ZooKeeper (Topic, Read, Allow, Literal).

A pattern matches a resource as Kafka's do: LITERAL by equal name or by the wildcard name "*",
PREFIXED by a name that starts with the pattern's. A filter (DescribeAcls, DeleteAcls) matches
bindings with ANY for any value and MATCH for "every pattern that would match this name".
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from enum import IntEnum

WILDCARD = "*"                  # a LITERAL name matching every resource of its type; a host: every host
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"  # the one CLUSTER resource's name


class AclError(ValueError):
    """An ACL or filter that Kafka would refuse (INVALID_REQUEST, or a clear CLI error)."""


class _Named(IntEnum):
    """An enum with Kafka's two spellings: `name` (TOPIC) and `camel` (Topic)."""

    @property
    def camel(self) -> str:
        return "".join(part.capitalize() for part in self.name.split("_"))

    @classmethod
    def parse(cls, text: str):
        """By either spelling, any case, with or without underscores (kafka-acls accepts
        "describe-configs", "DescribeConfigs", "DESCRIBE_CONFIGS")."""
        key = re.sub(r"[-_ ]", "", text).upper()
        for member in cls:
            if member.name.replace("_", "") == key:
                return member
        raise AclError(f"unknown {cls.__name__} {text!r}: one of "
                       f"{', '.join(m.name for m in cls if m.name not in ('UNKNOWN', 'ANY', 'MATCH'))}")


class ResourceType(_Named):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7

    @property
    def camel(self) -> str:
        return "TransactionalId" if self is ResourceType.TRANSACTIONAL_ID else super().camel


class PatternType(_Named):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(_Named):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(_Named):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


Op = AclOperation

# What an ALLOW of each operation also allows (Kafka's implied operations): DESCRIBE comes with
# READ, WRITE, DELETE and ALTER; DESCRIBE_CONFIGS with ALTER_CONFIGS. A DENY implies nothing.
IMPLIED_BY: dict[AclOperation, frozenset[AclOperation]] = {
    Op.DESCRIBE: frozenset({Op.DESCRIBE, Op.READ, Op.WRITE, Op.DELETE, Op.ALTER}),
    Op.DESCRIBE_CONFIGS: frozenset({Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS}),
}

# The operations each resource type has (the bits of the authorized-operations fields).
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (Op.READ, Op.WRITE, Op.CREATE, Op.DESCRIBE, Op.DELETE, Op.ALTER,
                         Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS),
    ResourceType.GROUP: (Op.READ, Op.DESCRIBE, Op.DELETE),
    ResourceType.CLUSTER: (Op.CREATE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS,
                           Op.IDEMPOTENT_WRITE, Op.ALTER, Op.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (Op.DESCRIBE, Op.WRITE),
    ResourceType.DELEGATION_TOKEN: (Op.DESCRIBE,),
    ResourceType.USER: (Op.CREATE_TOKENS, Op.DESCRIBE_TOKENS),
}


@dataclass(frozen=True, order=True)
class ResourcePattern:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType = PatternType.LITERAL

    def matches(self, resource_type: ResourceType, name: str) -> bool:
        """Whether this pattern covers the resource `name` of `resource_type`."""
        if self.resource_type != resource_type:
            return False
        if self.pattern_type == PatternType.LITERAL:
            return self.name == name or self.name == WILDCARD
        return self.pattern_type == PatternType.PREFIXED and name.startswith(self.name)

    def __str__(self) -> str:
        return (f"ResourcePattern(resourceType={self.resource_type.name}, name={self.name},"
                f" patternType={self.pattern_type.name})")


@dataclass(frozen=True, order=True)
class AccessControlEntry:
    principal: str
    host: str
    operation: AclOperation
    permission: AclPermissionType

    def __str__(self) -> str:
        return (f"(principal={self.principal}, host={self.host}, operation={self.operation.name},"
                f" permissionType={self.permission.name})")

    def to_json(self) -> dict:
        """As Kafka's AclAuthorizer stores it in a /kafka-acl znode."""
        return {"principal": self.principal, "permissionType": self.permission.camel,
                "operation": self.operation.camel, "host": self.host}

    @classmethod
    def from_json(cls, doc: dict) -> "AccessControlEntry":
        return cls(doc["principal"], doc["host"], AclOperation.parse(doc["operation"]),
                   AclPermissionType.parse(doc["permissionType"]))


@dataclass(frozen=True, order=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry


def check_principal(principal: str) -> str:
    """A principal is "<type>:<name>" (User:alice); Kafka refuses anything else."""
    kind, sep, name = principal.partition(":")
    if not sep or not kind or not name:
        raise AclError(f"principal {principal!r} is not <type>:<name> (for example User:alice)")
    return principal


def check_binding(binding: AclBinding) -> AclBinding:
    """A binding CreateAcls may store: concrete values only (no ANY/MATCH/UNKNOWN), a valid
    principal, a non-empty name; Kafka's rules."""
    p, e = binding.pattern, binding.entry
    if p.resource_type in (ResourceType.ANY, ResourceType.UNKNOWN):
        raise AclError(f"resource type {p.resource_type.name} is not a resource type an ACL can name")
    if p.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise AclError(f"pattern type {p.pattern_type.name}: an ACL is LITERAL or PREFIXED")
    if not p.name:
        raise AclError("an ACL's resource name must not be empty")
    if p.pattern_type == PatternType.PREFIXED and p.name == WILDCARD:
        raise AclError("a PREFIXED pattern cannot be '*': use a LITERAL '*' for every resource")
    if p.resource_type == ResourceType.CLUSTER and p.name != CLUSTER_NAME:
        raise AclError(f"the CLUSTER resource is named {CLUSTER_NAME!r}, not {p.name!r}")
    if e.operation in (Op.ANY, Op.UNKNOWN):
        raise AclError(f"operation {e.operation.name} is not an operation an ACL can allow or deny")
    if e.permission not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        raise AclError(f"permission type {e.permission.name}: an ACL ALLOWs or DENYs")
    if e.operation != Op.ALL and e.operation not in SUPPORTED_OPERATIONS.get(p.resource_type, ()):
        raise AclError(f"operation {e.operation.name} does not apply to {p.resource_type.name} resources")
    check_principal(e.principal)
    if not e.host:
        raise AclError("an ACL's host must not be empty (use '*' for every host)")
    return binding


@dataclass(frozen=True)
class AclBindingFilter:
    """What DescribeAcls and DeleteAcls select: None (name, principal, host) or ANY match every
    value; pattern type MATCH selects every pattern that covers the resource `name`."""
    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = Op.ANY
    permission: AclPermissionType = AclPermissionType.ANY

    def check(self) -> "AclBindingFilter":
        for value, what in ((self.resource_type, "resource type"), (self.pattern_type, "pattern type"),
                            (self.operation, "operation"), (self.permission, "permission type")):
            if value.name == "UNKNOWN":
                raise AclError(f"a filter's {what} must not be UNKNOWN")
        return self

    def matches(self, binding: AclBinding) -> bool:
        p, e = binding.pattern, binding.entry
        if self.resource_type != ResourceType.ANY and p.resource_type != self.resource_type:
            return False
        if not self._pattern_matches(p):
            return False
        return ((self.principal is None or self.principal == e.principal)
                and (self.host is None or self.host == e.host)
                and (self.operation == Op.ANY or self.operation == e.operation)
                and (self.permission == AclPermissionType.ANY or self.permission == e.permission))

    def _pattern_matches(self, p: ResourcePattern) -> bool:
        if self.pattern_type == PatternType.MATCH:
            if self.name is None:
                return True
            if p.pattern_type == PatternType.LITERAL:
                return p.name == self.name or p.name == WILDCARD
            return p.pattern_type == PatternType.PREFIXED and self.name.startswith(p.name)
        if self.pattern_type != PatternType.ANY and p.pattern_type != self.pattern_type:
            return False
        return self.name is None or self.name == p.name
