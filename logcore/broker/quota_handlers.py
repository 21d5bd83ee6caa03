"""The client quota APIs of the broker: DescribeClientQuotas (48) and AlterClientQuotas (49),
what `kafka-configs --entity-type users|clients` and `seglog configs` send.

Held by the `Broker`, over its logcore.quota.client_quota_configs.ClientQuotaConfigs (the
settings where the broker keeps them: its log root alone, ZooKeeper in a cluster).
"""
from __future__ import annotations

import asyncio

from logcore.errors import SegLogError
from logcore.quota.client_quota_entity import QuotaEntityError
from logcore.wire import error_codes as E
from logcore.wire.protocol import Request


class QuotaHandlers:
    def __init__(self, configs):
        self.configs = configs

    def handlers(self) -> dict:
        return {48: self.describe_client_quotas, 49: self.alter_client_quotas}

    async def describe_client_quotas(self, req: Request) -> dict:
        body = req.body
        components = [(c.entity_type, int(c.match_type), c.match) for c in body.components]
        try:
            found = await asyncio.to_thread(self.configs.describe, components, bool(body.strict))
        except QuotaEntityError as exc:
            return {"throttle_time": 0, "error_code": E.INVALID_REQUEST, "error_message": str(exc), "entries": None}
        except SegLogError as exc:
            return {"throttle_time": 0, "error_code": E.error_code(exc), "error_message": str(exc), "entries": None}
        entries = [{"entity": [{"entity_type": kind, "entity_name": name} for kind, name in entity.parts()],
                    "values": [{"key": key, "value": float(value)} for key, value in sorted(quotas.items())]}
                   for entity, quotas in found]
        return {"throttle_time": 0, "error_code": E.NONE, "error_message": None, "entries": entries}

    async def alter_client_quotas(self, req: Request) -> dict:
        body = req.body
        out = []
        for entry in body.entries:
            parts = [(e.entity_type, e.entity_name) for e in entry.entity]
            ops = [(op.key, op.value, bool(op.remove)) for op in entry.ops]
            res = {"error_code": E.NONE, "error_message": None,
                   "entity": [{"entity_type": kind, "entity_name": name} for kind, name in parts]}
            try:
                await asyncio.to_thread(self.configs.alter, parts, ops, bool(body.validate_only))
            except QuotaEntityError as exc:
                res.update(error_code=E.INVALID_REQUEST, error_message=str(exc))
            except SegLogError as exc:
                res.update(error_code=E.error_code(exc), error_message=str(exc))
            out.append(res)
        return {"throttle_time": 0, "entries": out}


class ThrottledResponse:
    """A handler's response (dict, bytes, EncodedResponse, or None for acks=0) whose client is
    over a quota: the server sends it at once and then reads nothing more from that connection
    for `throttle_ms` (KIP-219's muted channel)."""
    __slots__ = ("response", "throttle_ms")

    def __init__(self, response, throttle_ms: int):
        self.response = response
        self.throttle_ms = throttle_ms
