"""The ACL APIs of the Broker: CreateAcls (30), DescribeAcls (29) and DeleteAcls (31), v1-3 as
Kafka 4.1 serves them, over the broker's authorizer (logcore.security.authorizer). Who may call
them (ALTER, DESCRIBE on the cluster) is checked before, with every other API's rules
(access_rules.py). Without an authorizer they answer SECURITY_DISABLED, as Kafka does.
"""
from __future__ import annotations

import asyncio
import logging

from logcore.security.acl import (AccessControlEntry, AclBinding, AclBindingFilter, AclError, AclOperation,
                                  AclPermissionType, PatternType, ResourcePattern, ResourceType)
from logcore.security.authorizer import SecurityDisabledError
from logcore.errors import SegLogError
from logcore.wire import error_codes as E
from logcore.wire.protocol import Request

logger = logging.getLogger(__name__)


def _enum(cls, code: int):
    try:
        return cls(code)
    except ValueError:
        return cls.UNKNOWN


def binding_of(c) -> AclBinding:
    """A CreateAcls creation as a binding (unknown codes become UNKNOWN and are refused)."""
    return AclBinding(
        ResourcePattern(_enum(ResourceType, c.resource_type), c.resource_name,
                        _enum(PatternType, c.resource_pattern_type)),
        AccessControlEntry(c.principal, c.host, _enum(AclOperation, c.operation),
                           _enum(AclPermissionType, c.permission_type)))


def filter_of(f) -> AclBindingFilter:
    """A DescribeAcls request or DeleteAcls filter as a binding filter."""
    return AclBindingFilter(_enum(ResourceType, f.resource_type_filter), f.resource_name_filter,
                            _enum(PatternType, f.pattern_type_filter), f.principal_filter, f.host_filter,
                            _enum(AclOperation, f.operation), _enum(AclPermissionType, f.permission_type))


def _failure(exc: Exception) -> tuple[int, str]:
    if isinstance(exc, SecurityDisabledError):
        return E.SECURITY_DISABLED, str(exc)
    if isinstance(exc, AclError):
        return E.INVALID_REQUEST, str(exc)
    return E.error_code(exc) or E.UNKNOWN_SERVER_ERROR, f"{type(exc).__name__}: {exc}"


class AclHandlers:
    def __init__(self, authorizer):
        self.authorizer = authorizer

    def handlers(self) -> dict:
        return {29: self.describe_acls, 30: self.create_acls, 31: self.delete_acls}

    async def create_acls(self, req: Request) -> dict:
        creations = list(req.body.creations)
        try:
            refused = await asyncio.to_thread(self.authorizer.create, [binding_of(c) for c in creations])
        except (SecurityDisabledError, SegLogError, OSError) as exc:
            code, message = _failure(exc)
            return {"throttle_time": 0, "results": [{"error_code": code, "error_message": message}
                                                     for _ in creations]}
        for c, why in zip(creations, refused):
            if why is None:
                logger.info("ACL added by %s: %s %s", req.principal, binding_of(c).pattern, binding_of(c).entry)
        return {"throttle_time": 0, "results": [
            {"error_code": E.NONE if why is None else E.INVALID_REQUEST, "error_message": why} for why in refused]}

    async def describe_acls(self, req: Request) -> dict:
        try:
            bindings = self.authorizer.describe(filter_of(req.body))
        except (SecurityDisabledError, AclError) as exc:
            code, message = _failure(exc)
            return {"throttle_time": 0, "error_code": code, "error_message": message, "resources": []}
        return {"throttle_time": 0, "error_code": E.NONE, "error_message": None, "resources": _by_pattern(bindings)}

    async def delete_acls(self, req: Request) -> dict:
        filters = list(req.body.filters)
        try:
            results = await asyncio.to_thread(self.authorizer.delete, [filter_of(f) for f in filters])
        except (SecurityDisabledError, SegLogError, OSError) as exc:
            code, message = _failure(exc)
            return {"throttle_time": 0, "filter_results": [
                {"error_code": code, "error_message": message, "matching_acls": []} for _ in filters]}
        out = []
        for result in results:
            if isinstance(result, str):
                out.append({"error_code": E.INVALID_REQUEST, "error_message": result, "matching_acls": []})
                continue
            for b in result:
                logger.info("ACL removed by %s: %s %s", req.principal, b.pattern, b.entry)
            out.append({"error_code": E.NONE, "error_message": None, "matching_acls": [
                {"error_code": E.NONE, "error_message": None, "resource_type": int(b.pattern.resource_type),
                 "resource_name": b.pattern.name, "pattern_type": int(b.pattern.pattern_type),
                 "principal": b.entry.principal, "host": b.entry.host, "operation": int(b.entry.operation),
                 "permission_type": int(b.entry.permission)} for b in result]})
        return {"throttle_time": 0, "filter_results": out}


def _by_pattern(bindings: list[AclBinding]) -> list[dict]:
    grouped: dict[ResourcePattern, list[AccessControlEntry]] = {}
    for b in bindings:
        grouped.setdefault(b.pattern, []).append(b.entry)
    return [{"resource_type": int(p.resource_type), "resource_name": p.name, "pattern_type": int(p.pattern_type),
             "acls": [{"principal": e.principal, "host": e.host, "operation": int(e.operation),
                       "permission_type": int(e.permission)} for e in entries]}
            for p, entries in grouped.items()]
