"""Who may call what: every served API's authorization, as Kafka's KafkaApis checks it, in one
table over the broker's authorizer (logcore.security.authorizer).

Three kinds of rule, applied by `RequestAccess.handle` around the API's handler:

- WHOLE: the request names one resource (a group, a transactional id, the cluster) the principal
  needs an operation on; refused, it is answered with the API's error code everywhere
  (error_response), e.g. JoinGroup without READ on its group -> GROUP_AUTHORIZATION_FAILED,
  WriteTxnMarkers or a follower's Fetch without CLUSTER_ACTION.
- SPLIT: the request lists resources (topics, groups, config resources); those refused are taken
  out of the request before the handler runs and answered with their error code (the handler
  answers the rest), e.g. ListOffsets without DESCRIBE on a topic -> TOPIC_AUTHORIZATION_FAILED.
- AFTER: the response is narrowed or annotated: Metadata leaves out (all topics) or refuses
  (named topics) the topics the principal may not DESCRIBE and refuses auto-creation without
  CREATE; ListGroups and ListTransactions list only what the principal may DESCRIBE; Metadata,
  DescribeCluster, DescribeGroups and ConsumerGroupDescribe fill their authorized-operations bits
  (every operation of the resource type without an authorizer, as Kafka).

Produce and Fetch check their topics in their handlers (their responses are encoded by hand):
`topic_allowed` and `produce_denial` are theirs.
"""
from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass
from typing import Any, Callable

from logcore.broker.error_response import error_response
from logcore.security.acl import CLUSTER_NAME, AclOperation as Op, ResourceType as R
from logcore.wire import api_keys as K
from logcore.wire import error_codes as E
from logcore.wire.config_resources import BROKER_RESOURCE, GROUP_RESOURCE, TOPIC_RESOURCE
from logcore.wire.protocol import Request

Denial = tuple[int, str] | None
INT32_MIN = -(2 ** 31)
_CODE = {R.TOPIC: E.TOPIC_AUTHORIZATION_FAILED, R.GROUP: E.GROUP_AUTHORIZATION_FAILED,
         R.CLUSTER: E.CLUSTER_AUTHORIZATION_FAILED, R.TRANSACTIONAL_ID: E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}


def replica_id(body) -> int:
    """The replica id of a Fetch or OffsetForLeaderEpoch (-1 for a consumer's)."""
    state = getattr(body, "replica_state", None)
    if state is not None and getattr(state, "replica_id", -1) >= 0:
        return state.replica_id
    rid = getattr(body, "replica_id", -1)
    return -1 if rid is None else rid


@dataclass(frozen=True)
class Split:
    """A request listing resources: `field` of the body (by version), `response` the list its
    response answers them in, `check(access, request, item)` the denial of one item."""
    field: Callable[[int], str]
    response: str
    check: Callable[["RequestAccess", Request, Any], Denial]
    all_or_nothing: bool = False     # one refused item refuses them all (AddPartitionsToTxn)


class RequestAccess:
    def __init__(self, authorizer, brokers: Callable[[], list[dict]],
                 topic_name_of: Callable[[Any], str | None] = lambda topic_id: None):
        self.authorizer = authorizer
        self.brokers = brokers
        self.topic_name_of = topic_name_of      # a topic id (UUID) -> its name, or None

    # ------------------------------------------------------------------ the checks
    def denial(self, req: Request, op: Op, kind: R, name: str, code: int | None = None) -> Denial:
        if self.authorizer.allows(req, op, kind, name):
            return None
        what = "the cluster" if kind == R.CLUSTER else f"{kind.name.lower().replace('_', ' ')} {name!r}"
        return (code or _CODE[kind], f"{req.principal} is not authorized to {op.name} {what}")

    def cluster(self, req: Request, op: Op, code: int = E.CLUSTER_AUTHORIZATION_FAILED) -> Denial:
        return self.denial(req, op, R.CLUSTER, CLUSTER_NAME, code)

    def topic_allowed(self, req: Request, op: Op, name: str) -> bool:
        return self.authorizer.allows(req, op, R.TOPIC, name)

    def produce_denial(self, req: Request) -> Denial:
        """A transactional Produce needs WRITE on its transactional id (per topic: WRITE)."""
        tid = req.body.transactional_id
        return None if tid is None else self.denial(req, Op.WRITE, R.TRANSACTIONAL_ID, tid)

    # ------------------------------------------------------------------ around the handler
    async def handle(self, req: Request, handler):
        enabled = self.authorizer.enabled
        if enabled:
            rule = WHOLE.get(req.api_key)
            refused = rule(self, req) if rule is not None else None
            if refused is not None:
                return error_response(req, refused[0], refused[1], self.brokers())
        split = SPLIT.get(req.api_key) if enabled else None
        denied: list[tuple[Any, int, str]] = []
        if split is not None:
            req, denied = self._split(req, split)
        after = AFTER.get(req.api_key)
        context = None
        if req.api_key == K.METADATA and enabled:
            req, context = _metadata_before(self, req)
        result = await handler(req)
        if not denied and after is None:
            return result
        if result is not None and not isinstance(result, (dict, bytes)) and inspect.isawaitable(result):
            return self._finish(req, split, denied, after, context, result)
        return self._merge(req, split, denied, after, context, result)

    async def _finish(self, req, split, denied, after, context, pending):
        return self._merge(req, split, denied, after, context, await pending)

    def _split(self, req: Request, split: Split) -> tuple[Request, list]:
        field = split.field(req.api_version)
        if not field:
            return req, []
        items = getattr(req.body, field) or ()
        denied = []
        kept = []
        for item in items:
            refused = split.check(self, req, item)
            if refused is None:
                kept.append(item)
            else:
                denied.append((item, *refused))
        if denied and split.all_or_nothing:
            denied += [(item, E.OPERATION_NOT_ATTEMPTED, "another topic of the request was refused")
                       for item in kept]
            kept = []
        if not denied:
            return req, []
        return dataclasses.replace(req, body=dataclasses.replace(req.body, **{field: tuple(kept)})), denied

    def _merge(self, req, split, denied, after, context, result):
        if isinstance(result, dict) and denied:
            field = split.field(req.api_version)
            answers = list(result.get(split.response) or ())
            for item, code, message in denied:
                one = dataclasses.replace(req, body=dataclasses.replace(req.body, **{field: (item,)}))
                answers.extend(error_response(one, code, message, [])[split.response])
            result = {**result, split.response: answers}
        if isinstance(result, dict) and after is not None:
            result = after(self, req, result, context)
        return result


# ---------------------------------------------------------------------- WHOLE
def _group(op: Op, field: str = "group_id"):
    return lambda a, req: a.denial(req, op, R.GROUP, getattr(req.body, field))


def _txn_then_group(a: RequestAccess, req: Request) -> Denial:
    return (a.denial(req, Op.WRITE, R.TRANSACTIONAL_ID, req.body.transactional_id)
            or a.denial(req, Op.READ, R.GROUP, req.body.group_id))


def _init_producer_id(a: RequestAccess, req: Request) -> Denial:
    tid = req.body.transactional_id
    if tid is not None:
        return a.denial(req, Op.WRITE, R.TRANSACTIONAL_ID, tid)
    # An idempotent producer: IDEMPOTENT_WRITE on the cluster, or WRITE on some topic (KIP-679).
    if a.authorizer.allows_any(req, Op.WRITE, R.TOPIC):
        return None
    return a.cluster(req, Op.IDEMPOTENT_WRITE)


def _find_coordinator(a: RequestAccess, req: Request) -> Denial:
    if req.api_version >= 4:
        return None                        # per key (SPLIT)
    return _coordinator_key(a, req, req.body.key)


def _coordinator_key(a: RequestAccess, req: Request, key: str) -> Denial:
    if req.body.key_type == 1:
        return a.denial(req, Op.DESCRIBE, R.TRANSACTIONAL_ID, key)
    return a.denial(req, Op.DESCRIBE, R.GROUP, key)


def _heartbeat_848(a: RequestAccess, req: Request) -> Denial:
    refused = a.denial(req, Op.READ, R.GROUP, req.body.group_id)
    if refused is not None:
        return refused
    hidden = sorted(t for t in (req.body.subscribed_topic_names or ())
                    if not a.authorizer.allows(req, Op.DESCRIBE, R.TOPIC, t))
    if hidden:
        return (E.TOPIC_AUTHORIZATION_FAILED,
                f"{req.principal} is not authorized to DESCRIBE topic(s) {', '.join(hidden)}")
    return None


WHOLE: dict[int, Callable[[RequestAccess, Request], Denial]] = {
    K.FETCH: lambda a, req: a.cluster(req, Op.CLUSTER_ACTION, E.TOPIC_AUTHORIZATION_FAILED)
    if replica_id(req.body) >= 0 else None,
    K.OFFSET_COMMIT: _group(Op.READ),
    K.OFFSET_FETCH: lambda a, req: None if req.api_version >= 8 else _group(Op.DESCRIBE)(a, req),
    K.FIND_COORDINATOR: _find_coordinator,
    K.JOIN_GROUP: _group(Op.READ), K.HEARTBEAT: _group(Op.READ), K.LEAVE_GROUP: _group(Op.READ),
    K.SYNC_GROUP: _group(Op.READ),
    K.INIT_PRODUCER_ID: _init_producer_id,
    K.OFFSET_FOR_LEADER_EPOCH: lambda a, req: a.cluster(req, Op.CLUSTER_ACTION)
    if replica_id(req.body) >= 0 else None,
    K.ADD_PARTITIONS_TO_TXN: lambda a, req: a.cluster(req, Op.CLUSTER_ACTION) if req.api_version >= 4
    else a.denial(req, Op.WRITE, R.TRANSACTIONAL_ID, req.body.v3_and_below_transactional_id),
    K.ADD_OFFSETS_TO_TXN: _txn_then_group,
    K.END_TXN: lambda a, req: a.denial(req, Op.WRITE, R.TRANSACTIONAL_ID, req.body.transactional_id),
    K.WRITE_TXN_MARKERS: lambda a, req: a.cluster(req, Op.CLUSTER_ACTION),
    K.TXN_OFFSET_COMMIT: _txn_then_group,
    K.DESCRIBE_ACLS: lambda a, req: a.cluster(req, Op.DESCRIBE),
    K.CREATE_ACLS: lambda a, req: a.cluster(req, Op.ALTER),
    K.DELETE_ACLS: lambda a, req: a.cluster(req, Op.ALTER),
    K.DESCRIBE_LOG_DIRS: lambda a, req: a.cluster(req, Op.DESCRIBE),
    K.ELECT_LEADERS: lambda a, req: a.cluster(req, Op.ALTER),
    K.ALTER_PARTITION_REASSIGNMENTS: lambda a, req: a.cluster(req, Op.ALTER),
    K.LIST_PARTITION_REASSIGNMENTS: lambda a, req: a.cluster(req, Op.DESCRIBE),
    K.OFFSET_DELETE: _group(Op.DELETE),
    K.DESCRIBE_CLUSTER: lambda a, req: a.cluster(req, Op.DESCRIBE),
    K.CONSUMER_GROUP_HEARTBEAT: _heartbeat_848,
    K.DESCRIBE_CLIENT_QUOTAS: lambda a, req: a.cluster(req, Op.DESCRIBE_CONFIGS),
    K.ALTER_CLIENT_QUOTAS: lambda a, req: a.cluster(req, Op.ALTER_CONFIGS),
    K.LIST_CONFIG_RESOURCES: lambda a, req: a.cluster(req, Op.DESCRIBE_CONFIGS),
    K.DESCRIBE_USER_SCRAM_CREDENTIALS: lambda a, req: a.cluster(req, Op.DESCRIBE),
    K.ALTER_USER_SCRAM_CREDENTIALS: lambda a, req: a.cluster(req, Op.ALTER),
}


# ---------------------------------------------------------------------- SPLIT
def _topic(op: Op, attr: str = "name"):
    return lambda a, req, item: a.denial(req, op, R.TOPIC, getattr(item, attr))


def _create_topic(a: RequestAccess, req: Request, item) -> Denial:
    if a.authorizer.allows(req, Op.CREATE, R.CLUSTER, CLUSTER_NAME):
        return None
    return a.denial(req, Op.CREATE, R.TOPIC, item.name)


def _delete_topic(a: RequestAccess, req: Request, item) -> Denial:
    name = item if isinstance(item, str) else item.name
    if name is not None:
        return a.denial(req, Op.DELETE, R.TOPIC, name)
    # by topic id (v6): authorized on the name it resolves to; an id no topic has is answered
    # UNKNOWN_TOPIC_ID by the handler only to a principal who may delete any topic
    name = a.topic_name_of(item.topic_id)
    if name is not None:
        return a.denial(req, Op.DELETE, R.TOPIC, name)
    return a.cluster(req, Op.DELETE, E.TOPIC_AUTHORIZATION_FAILED)


def _config_resource(op: Op):
    def check(a: RequestAccess, req: Request, item) -> Denial:
        if item.resource_type == TOPIC_RESOURCE:
            return a.denial(req, op, R.TOPIC, item.resource_name)
        if item.resource_type == BROKER_RESOURCE:
            return a.cluster(req, op)
        if item.resource_type == GROUP_RESOURCE:           # Kafka: DESCRIBE_CONFIGS / ALTER_CONFIGS on the group
            return a.denial(req, op, R.GROUP, item.resource_name)
        return a.cluster(req, Op.DESCRIBE if op == Op.DESCRIBE_CONFIGS else Op.ALTER)   # broker loggers
    return check


def _fixed(name: str):
    return lambda v: name


SPLIT: dict[int, Split] = {
    K.LIST_OFFSETS: Split(_fixed("topics"), "topics", _topic(Op.DESCRIBE)),
    K.OFFSET_COMMIT: Split(_fixed("topics"), "topics", _topic(Op.READ)),
    K.OFFSET_FETCH: Split(lambda v: "groups" if v >= 8 else "", "groups",
                          lambda a, req, g: a.denial(req, Op.DESCRIBE, R.GROUP, g.group_id)),
    K.FIND_COORDINATOR: Split(lambda v: "coordinator_keys" if v >= 4 else "", "coordinators",
                              lambda a, req, key: _coordinator_key(a, req, key)),
    K.DESCRIBE_GROUPS: Split(_fixed("groups"), "groups", lambda a, req, g: a.denial(req, Op.DESCRIBE, R.GROUP, g)),
    K.CREATE_TOPICS: Split(_fixed("topics"), "topics", _create_topic),
    K.DELETE_TOPICS: Split(lambda v: "topics" if v >= 6 else "topic_names", "responses", _delete_topic),
    K.DELETE_RECORDS: Split(_fixed("topics"), "topics", _topic(Op.DELETE)),
    K.OFFSET_FOR_LEADER_EPOCH: Split(_fixed("topics"), "topics", _topic(Op.DESCRIBE, "topic")),
    K.ADD_PARTITIONS_TO_TXN: Split(lambda v: "v3_and_below_topics" if v <= 3 else "",
                                   "results_by_topic_v3_and_below", _topic(Op.WRITE), all_or_nothing=True),
    K.TXN_OFFSET_COMMIT: Split(_fixed("topics"), "topics", _topic(Op.READ)),
    K.DESCRIBE_CONFIGS: Split(_fixed("resources"), "results", _config_resource(Op.DESCRIBE_CONFIGS)),
    K.ALTER_CONFIGS: Split(_fixed("resources"), "responses", _config_resource(Op.ALTER_CONFIGS)),
    K.INCREMENTAL_ALTER_CONFIGS: Split(_fixed("resources"), "responses", _config_resource(Op.ALTER_CONFIGS)),
    K.CREATE_PARTITIONS: Split(_fixed("topics"), "results", _topic(Op.ALTER)),
    K.DELETE_GROUPS: Split(_fixed("groups_names"), "results", lambda a, req, g: a.denial(req, Op.DELETE, R.GROUP, g)),
    K.OFFSET_DELETE: Split(_fixed("topics"), "topics", _topic(Op.READ)),
    K.DESCRIBE_PRODUCERS: Split(_fixed("topics"), "topics", _topic(Op.READ)),
    K.DESCRIBE_TRANSACTIONS: Split(_fixed("transactional_ids"), "transaction_states",
                                   lambda a, req, t: a.denial(req, Op.DESCRIBE, R.TRANSACTIONAL_ID, t)),
    K.CONSUMER_GROUP_DESCRIBE: Split(_fixed("group_ids"), "groups",
                                     lambda a, req, g: a.denial(req, Op.DESCRIBE, R.GROUP, g)),
}


# ---------------------------------------------------------------------- AFTER
@dataclass
class _MetadataContext:
    refused: list                 # (name, code, message) of named topics refused before the handler
    no_create: set                # named topics this principal may not auto-create


def _metadata_before(a: RequestAccess, req: Request):
    body = req.body
    if body.topics is None:
        return req, _MetadataContext([], set())
    refused, kept = [], []
    for t in body.topics:
        if t.name is not None and not a.authorizer.allows(req, Op.DESCRIBE, R.TOPIC, t.name):
            refused.append((t.name, E.TOPIC_AUTHORIZATION_FAILED,
                            f"{req.principal} is not authorized to DESCRIBE topic {t.name!r}"))
        else:
            kept.append(t)
    may_create = a.authorizer.allows(req, Op.CREATE, R.CLUSTER, CLUSTER_NAME)
    no_create = set() if may_create else {t.name for t in kept if t.name is not None
                                          and not a.authorizer.allows(req, Op.CREATE, R.TOPIC, t.name)}
    changes: dict = {}
    if refused:
        changes["topics"] = tuple(kept)
    if no_create and getattr(body, "allow_auto_topic_creation", False):
        changes["allow_auto_topic_creation"] = False     # Kafka: CREATE (cluster or topic) to auto-create
    if changes:
        req = dataclasses.replace(req, body=dataclasses.replace(body, **changes))
    return req, _MetadataContext(refused, no_create if getattr(body, "allow_auto_topic_creation", False) else set())


def _metadata_after(a: RequestAccess, req: Request, result: dict, ctx: _MetadataContext | None) -> dict:
    body = req.body
    topics = []
    for t in result.get("topics") or ():
        name = t.get("name")
        if name is not None and a.authorizer.enabled and body.topics is None \
                and not a.authorizer.allows(req, Op.DESCRIBE, R.TOPIC, name):
            continue                                  # all topics: the hidden ones left out
        if ctx is not None and name in ctx.no_create and t.get("error_code") == E.UNKNOWN_TOPIC_OR_PARTITION:
            t = {**t, "error_code": E.TOPIC_AUTHORIZATION_FAILED}
        if getattr(body, "include_topic_authorized_operations", False) and t.get("error_code") == E.NONE:
            t = {**t, "topic_authorized_operations": a.authorizer.authorized_operations(req, R.TOPIC, name)}
        topics.append(t)
    for name, code, message in (ctx.refused if ctx is not None else ()):
        topics.append({"error_code": code, "name": name, "partitions": [],
                       "topic_authorized_operations": INT32_MIN})
    out = {**result, "topics": topics}
    if getattr(body, "include_cluster_authorized_operations", False):
        out["cluster_authorized_operations"] = a.authorizer.authorized_operations(req, R.CLUSTER, CLUSTER_NAME)
    return out


def _cluster_ops_after(a: RequestAccess, req: Request, result: dict, ctx) -> dict:
    if getattr(req.body, "include_cluster_authorized_operations", False) and result.get("error_code", 0) == E.NONE:
        return {**result, "cluster_authorized_operations":
                a.authorizer.authorized_operations(req, R.CLUSTER, CLUSTER_NAME)}
    return result


def _group_ops_after(a: RequestAccess, req: Request, result: dict, ctx) -> dict:
    if not getattr(req.body, "include_authorized_operations", False):
        return result
    return {**result, "groups": [
        {**g, "authorized_operations": a.authorizer.authorized_operations(req, R.GROUP, g["group_id"])}
        if isinstance(g, dict) and g.get("error_code", 0) == E.NONE else g for g in result.get("groups") or ()]}


def _list_groups_after(a: RequestAccess, req: Request, result: dict, ctx) -> dict:
    if not a.authorizer.enabled or a.authorizer.allows(req, Op.DESCRIBE, R.CLUSTER, CLUSTER_NAME):
        return result
    return {**result, "groups": [g for g in result.get("groups") or ()
                                 if a.authorizer.allows(req, Op.DESCRIBE, R.GROUP, _get(g, "group_id"))]}


def _list_transactions_after(a: RequestAccess, req: Request, result: dict, ctx) -> dict:
    if not a.authorizer.enabled:
        return result
    return {**result, "transaction_states": [
        t for t in result.get("transaction_states") or ()
        if a.authorizer.allows(req, Op.DESCRIBE, R.TRANSACTIONAL_ID, _get(t, "transactional_id"))]}


def _get(entry, name: str):
    return entry[name] if isinstance(entry, dict) else getattr(entry, name)


AFTER: dict[int, Callable[[RequestAccess, Request, dict, Any], dict]] = {
    K.METADATA: _metadata_after,
    K.DESCRIBE_CLUSTER: _cluster_ops_after,
    K.DESCRIBE_GROUPS: _group_ops_after,
    K.CONSUMER_GROUP_DESCRIBE: _group_ops_after,
    K.LIST_GROUPS: _list_groups_after,
    K.LIST_TRANSACTIONS: _list_transactions_after,
}
