"""`seglog acls`: kafka-acls through the Kafka protocol (CreateAcls, DescribeAcls, DeleteAcls).

    seglog acls --bootstrap-server H:P --add --allow-principal User:alice --operation Read --topic t
    seglog acls --bootstrap-server H:P --add --allow-principal User:bob --producer --topic t
    seglog acls --bootstrap-server H:P --list [--topic t] [--principal User:alice]
    seglog acls --bootstrap-server H:P --remove --force --allow-principal User:alice --topic t

The options are kafka-acls': principals and hosts to allow or deny (a host defaults to `*`),
operations (default ALL), resources (--topic, --group, --cluster, --transactional-id,
--delegation-token, each repeatable) and --resource-pattern-type (LITERAL, PREFIXED; ANY and
MATCH for --list and --remove). --producer (WRITE, DESCRIBE, CREATE on the topics; WRITE,
DESCRIBE on a --transactional-id; IDEMPOTENT_WRITE on the cluster with --idempotent) and
--consumer (READ, DESCRIBE on the topics, READ on the --group) add Kafka's convenience sets.
What it prints is kafka-acls' text: `Adding ACLs for resource ...`, then the resulting
`Current ACLs for resource ...` blocks.
"""
from __future__ import annotations

import sys
from typing import TextIO

from logcore.errors import InvalidConfigError
from logcore.security.acl import (CLUSTER_NAME, AccessControlEntry, AclBinding, AclBindingFilter, AclError,
                                  AclOperation as Op, AclPermissionType as P, PatternType, ResourcePattern,
                                  ResourceType as R, check_principal)
from logcore.tools.client_properties import client_properties, timeout_s
from logcore.wire.api_keys import CREATE_ACLS, DELETE_ACLS, DESCRIBE_ACLS
from logcore.wire.client import KafkaError, bootstrap, error_name
from logcore.wire.error_codes import NONE

WINDOWS = {DESCRIBE_ACLS: (1, 3), CREATE_ACLS: (1, 3), DELETE_ACLS: (1, 3)}


def cmd_acls(args, out: TextIO | None = None, stdin: TextIO | None = None) -> int:
    out = out or sys.stdout
    actions = [name for name in ("add", "remove", "list") if getattr(args, name)]
    if len(actions) != 1:
        raise InvalidConfigError("give exactly one of --add, --remove, --list")
    props = client_properties(getattr(args, "command_config", None), None, (),
                              command="seglog acls", item_option="--command-config")
    try:
        resources = _resources(args, actions[0])
        with bootstrap(args.bootstrap_server, timeout_s=timeout_s(props) + 5, windows=WINDOWS,
                       client_id=props.get("client.id", "seglog-acls"), option="--bootstrap-server") as conn:
            client = _AclClient(conn)
            if args.add:
                return _add(args, client, resources, out)
            if args.remove:
                return _remove(args, client, resources, out, stdin or sys.stdin)
            return _list(args, client, resources, out)
    except AclError as exc:
        raise InvalidConfigError(str(exc)) from None


class _AclClient:
    def __init__(self, conn):
        self.conn = conn

    def create(self, bindings: list[AclBinding]) -> None:
        body = self.conn.request(CREATE_ACLS, {"creations": [
            {"resource_type": int(b.pattern.resource_type), "resource_name": b.pattern.name,
             "resource_pattern_type": int(b.pattern.pattern_type), "principal": b.entry.principal,
             "host": b.entry.host, "operation": int(b.entry.operation), "permission_type": int(b.entry.permission)}
            for b in bindings]})
        failed = [f"{b.pattern} {b.entry}: {error_name(r.error_code)}: {r.error_message}"
                  for b, r in zip(bindings, body.results) if r.error_code != NONE]
        if failed:
            raise KafkaError("; ".join(failed), body.results[0].error_code)

    def describe(self, flt: AclBindingFilter) -> list[AclBinding]:
        body = self.conn.request(DESCRIBE_ACLS, _filter_body(flt))
        if body.error_code != NONE:
            raise KafkaError(f"{error_name(body.error_code)}: {body.error_message}", body.error_code)
        return [AclBinding(ResourcePattern(R(r.resource_type), r.resource_name, PatternType(r.pattern_type)),
                           AccessControlEntry(a.principal, a.host, Op(a.operation), P(a.permission_type)))
                for r in body.resources for a in r.acls]

    def delete(self, filters: list[AclBindingFilter]) -> None:
        body = self.conn.request(DELETE_ACLS, {"filters": [_filter_body(f) for f in filters]})
        for r in body.filter_results:
            if r.error_code != NONE:
                raise KafkaError(f"{error_name(r.error_code)}: {r.error_message}", r.error_code)


def _filter_body(f: AclBindingFilter) -> dict:
    return {"resource_type_filter": int(f.resource_type), "resource_name_filter": f.name,
            "pattern_type_filter": int(f.pattern_type), "principal_filter": f.principal, "host_filter": f.host,
            "operation": int(f.operation), "permission_type": int(f.permission)}


def _resources(args, action: str) -> list[ResourcePattern]:
    """The resources the options name, with --resource-pattern-type."""
    pattern = PatternType.parse(args.resource_pattern_type or "literal")
    if action == "add" and pattern not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise AclError(f"--resource-pattern-type {args.resource_pattern_type}: --add takes literal or prefixed")
    out = [ResourcePattern(R.TOPIC, t, pattern) for t in args.topic or ()]
    out += [ResourcePattern(R.GROUP, g, pattern) for g in args.group or ()]
    out += [ResourcePattern(R.TRANSACTIONAL_ID, t, pattern) for t in args.transactional_id or ()]
    out += [ResourcePattern(R.DELEGATION_TOKEN, t, pattern) for t in args.delegation_token or ()]
    if args.cluster or (args.idempotent and args.producer):
        out.append(ResourcePattern(R.CLUSTER, CLUSTER_NAME, PatternType.LITERAL if action == "add" else pattern))
    return out


def _entries(args, operations: list[Op]) -> list[AccessControlEntry]:
    out = []
    for principals, hosts, permission in ((args.allow_principal, args.allow_host, P.ALLOW),
                                          (args.deny_principal, args.deny_host, P.DENY)):
        for principal in principals or ():
            check_principal(principal)
            for host in hosts or ["*"]:
                out.extend(AccessControlEntry(principal, host, op, permission) for op in operations)
    return out


def _bindings(args, resources: list[ResourcePattern]) -> list[AclBinding]:
    """What --add adds: the --producer/--consumer sets, else the --operation(s) on each resource."""
    if not (args.allow_principal or args.deny_principal):
        raise AclError("--add needs --allow-principal or --deny-principal")
    out: list[AclBinding] = []
    if args.producer or args.consumer:
        if args.operation:
            raise AclError("--operation does not go with --producer or --consumer")
        topics = [r for r in resources if r.resource_type == R.TOPIC]
        if not topics:
            raise AclError("--producer and --consumer need --topic")
        wanted: dict[ResourcePattern, list[Op]] = {}
        if args.producer:
            for r in topics:
                wanted.setdefault(r, []).extend([Op.WRITE, Op.DESCRIBE, Op.CREATE])
            for r in resources:
                if r.resource_type == R.TRANSACTIONAL_ID:
                    wanted.setdefault(r, []).extend([Op.WRITE, Op.DESCRIBE])
                elif r.resource_type == R.CLUSTER and args.idempotent:
                    wanted.setdefault(r, []).append(Op.IDEMPOTENT_WRITE)
        if args.consumer:
            groups = [r for r in resources if r.resource_type == R.GROUP]
            if not groups:
                raise AclError("--consumer needs --group")
            for r in topics:
                wanted.setdefault(r, []).extend([Op.READ, Op.DESCRIBE])
            for r in groups:
                wanted.setdefault(r, []).append(Op.READ)
        for r, ops in wanted.items():
            out.extend(AclBinding(r, e) for e in _entries(args, list(dict.fromkeys(ops))))
        return out
    if not resources:
        raise AclError("name a resource: --topic, --group, --cluster, --transactional-id or --delegation-token")
    ops = [Op.parse(o) for o in args.operation or ["All"]]
    for r in resources:
        out.extend(AclBinding(r, e) for e in _entries(args, ops))
    return out


def _print_current(client: _AclClient, resources: list[ResourcePattern], principal: str | None,
                   out: TextIO) -> None:
    filters = [AclBindingFilter(r.resource_type, r.name, r.pattern_type) for r in resources] or [AclBindingFilter()]
    grouped: dict[ResourcePattern, list[AccessControlEntry]] = {}
    for flt in filters:
        for b in client.describe(AclBindingFilter(flt.resource_type, flt.name, flt.pattern_type, principal)):
            entries = grouped.setdefault(b.pattern, [])
            if b.entry not in entries:
                entries.append(b.entry)
    for pattern, entries in grouped.items():
        _print_block(out, "Current ACLs for resource", pattern, entries)


def _print_block(out: TextIO, title: str, pattern: ResourcePattern, entries) -> None:
    body = "\n".join(f"\t{e}" for e in entries)
    out.write(f"{title} `{pattern}`: \n {body} \n\n")


def _add(args, client: _AclClient, resources, out: TextIO) -> int:
    bindings = _bindings(args, resources)
    by_pattern: dict[ResourcePattern, list[AccessControlEntry]] = {}
    for b in bindings:
        by_pattern.setdefault(b.pattern, []).append(b.entry)
    for pattern, entries in by_pattern.items():
        _print_block(out, "Adding ACLs for resource", pattern, entries)
    client.create(bindings)
    _print_current(client, list(by_pattern), None, out)
    return 0


def _remove(args, client: _AclClient, resources, out: TextIO, stdin: TextIO) -> int:
    if not resources:
        raise AclError("--remove needs a resource: --topic, --group, --cluster, --transactional-id or"
                       " --delegation-token")
    if args.allow_principal or args.deny_principal:
        ops = [Op.parse(o) for o in args.operation or ["All"]]
        filters = [AclBindingFilter(r.resource_type, r.name, r.pattern_type, e.principal, e.host, e.operation,
                                    e.permission) for r in resources for e in _entries(args, ops)]
    else:
        filters = [AclBindingFilter(r.resource_type, r.name, r.pattern_type) for r in resources]
    for r in resources:
        if not args.force:
            out.write(f"Are you sure you want to remove ACLs from resource `{r}`? (y/n)\n")
            out.flush()
            if stdin.readline().strip().lower() not in ("y", "yes"):
                out.write("Not removed.\n")
                return 1
    client.delete(filters)
    _print_current(client, resources, None, out)
    return 0


def _list(args, client: _AclClient, resources, out: TextIO) -> int:
    principals = args.principal or [None]
    for principal in principals:
        if principal is not None:
            out.write(f"ACLs for principal `{principal}`\n")
        _print_current(client, resources, principal, out)
    return 0


def add_parser(sub, formatter_class) -> None:
    """`seglog acls` in the CLI's subcommands."""
    p = sub.add_parser("acls", help="add, list and remove ACLs through a broker (kafka-acls)",
                       description="Manage ACLs (like kafka-acls) through the Kafka protocol's CreateAcls,"
                                   " DescribeAcls and DeleteAcls. The broker needs"
                                   " authorizer.class.name=kafka.security.authorizer.AclAuthorizer.",
                       epilog="examples:\n"
                              "  seglog acls --bootstrap-server 127.0.0.1:9092 --add --allow-principal User:alice"
                              " --operation Read --topic clicks\n"
                              "  seglog acls --bootstrap-server 127.0.0.1:9092 --add --allow-principal User:bob"
                              " --consumer --topic clicks --group readers\n"
                              "  seglog acls --bootstrap-server 127.0.0.1:9092 --list --topic clicks\n"
                              "  seglog acls --bootstrap-server 127.0.0.1:9092 --remove --force --topic clicks",
                       formatter_class=formatter_class)
    p.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,HOST:PORT]")
    p.add_argument("--command-config", metavar="FILE",
                   help="Kafka client properties (client.id, request.timeout.ms); any other key is refused")
    for name, text in (("--add", "add the ACLs the options describe"),
                       ("--remove", "remove the ACLs the options describe (all of a resource's without"
                                    " principals)"),
                       ("--list", "list ACLs (of the named resources, or all)")):
        p.add_argument(name, action="store_true", help=text)
    for name, text in (("--allow-principal", "a principal to allow (User:alice), repeatable"),
                       ("--deny-principal", "a principal to deny, repeatable"),
                       ("--allow-host", "a host the allowed principals connect from (default *), repeatable"),
                       ("--deny-host", "a host the denied principals connect from (default *), repeatable"),
                       ("--principal", "with --list: only this principal's ACLs, repeatable"),
                       ("--operation", "Read, Write, Create, Delete, Alter, Describe, ClusterAction,"
                                       " DescribeConfigs, AlterConfigs, IdempotentWrite, All (default)"),
                       ("--topic", "a topic (or prefix, or *), repeatable"),
                       ("--group", "a consumer group (or prefix, or *), repeatable"),
                       ("--transactional-id", "a transactional id (or prefix, or *), repeatable"),
                       ("--delegation-token", "a delegation token id, repeatable")):
        p.add_argument(name, action="append", metavar="VALUE", help=text)
    p.add_argument("--cluster", action="store_true", help="the cluster resource")
    p.add_argument("--resource-pattern-type", metavar="TYPE",
                   help="literal (default) or prefixed; with --list/--remove also any or match")
    p.add_argument("--producer", action="store_true", help="a producer's ACLs on the --topic(s)")
    p.add_argument("--consumer", action="store_true", help="a consumer's ACLs on the --topic(s) and --group")
    p.add_argument("--idempotent", action="store_true", help="with --producer: IDEMPOTENT_WRITE on the cluster")
    p.add_argument("--force", action="store_true", help="with --remove: do not ask")
    p.set_defaults(func=cmd_acls)
